"""A NaN or Inf loss in a replayed GPU training step: fit raises NonFiniteLossError and the
weights are exactly those after the last good step (shared by the webgpu and webgl2 tests)."""

from __future__ import annotations

import numpy as np

from tests_e2e.engine_page import EnginePage

# Step 6 of 12 samples in batches of 2 (replayed: a step is recorded after the first ones) gets
# a batch whose loss is Inf (1e30 squared in the mse) or NaN (the kernel's weights 2 and 2 turn
# 3e38 and -3e38 into +Inf and -Inf products, which sum to NaN); x and y themselves are finite.
BAD_STEP = """
from py_in_browser import layers
x = np.ones((12, 2), np.float32)
y = np.ones((12, 1), np.float32)
if {injected!r} == "inf":
    y[10:] = 1e30
else:
    x[10:] = (3e38, -3e38)
def make():
    m = pib.Sequential([layers.Dense(1, input_shape=(2,))], seed=3)
    m.compile(optimizer='sgd', loss='mse')
    return m
def start_weights(m):
    m.build()
    m.set_weights([np.full((2, 1), 2.0, np.float32), np.zeros(1, np.float32)])
good = make()
start_weights(good)
await good.fit(x[:10], y[:10], epochs=1, batch_size=2, shuffle=False)
model = make()
start_weights(model)
replayed = pib.memory()['steps_replayed']
try:
    await model.fit(x, y, epochs=2, batch_size=2, shuffle=False)
    err = None
except pib.NonFiniteLossError as exc:
    err = str(exc)
[err, pib.memory()['steps_replayed'] - replayed,
 [w.tolist() for w in await model.get_weights()], [w.tolist() for w in await good.get_weights()]]
"""


def check_bad_step_keeps_the_last_good_weights(engine_page: EnginePage, injected: str) -> None:
    message, replayed, weights, want = engine_page.run(BAD_STEP.format(injected=injected))
    assert message is not None and "weights are those after step 5" in message, message
    assert replayed >= 1  # the bad step ran as a replay, not eagerly
    for got, expected in zip(weights, want, strict=True):
        np.testing.assert_array_equal(got, expected)
