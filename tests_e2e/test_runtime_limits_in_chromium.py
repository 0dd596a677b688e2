"""Runtime limits in Chromium: batches over MAX_TEXTURE_SIZE train as micro-batches on WebGL2 with
the full batch's update, and 1000 training steps leave tensors, GPU bytes and Pyodide proxies
where they started (WebGPU and WebGL2)."""

from __future__ import annotations

import numpy as np
import pytest

from tests_e2e.engine_page import EnginePage

MICRO_BATCH_RUN = """
import numpy as np
async def train(limits):
    await pib.init("webgl2", limits=limits)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 64, 64, 8)).astype(np.float32)
    y = rng.integers(0, 3, 128)
    model = pib.Sequential([
        pib.layers.Conv2D(4, 3, strides=2, padding="same", activation="relu", input_shape=(64, 64, 8)),
        pib.layers.Flatten(),
        pib.layers.Dense(3, activation="softmax"),
    ], seed=5)
    model.compile(optimizer=pib.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    largest = pib.max_batch_size(model)
    history = await model.fit(x, y, epochs=2, batch_size=64, seed=1)
    return largest, history.params, [w.tolist() for w in await model.get_weights()]
full = await train(None)
micro = await train({"max_texture_size": 512})
[full, micro]
"""


def test_batches_over_max_texture_size_train_as_micro_batches_on_webgl2(
    engine_page: EnginePage,
) -> None:
    full, micro = engine_page.run(MICRO_BATCH_RUN)
    # (b, 64, 64, 8) inputs take b * 8192 RGBA texels; 512 x 512 holds 32 examples.
    assert micro[0] == 32 and micro[1]["micro_batch_size"] == 32
    assert full[0] > 64 and "micro_batch_size" not in full[1]
    for a, b in zip(full[2], micro[2], strict=True):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=0, atol=1e-5)


HYGIENE_RUN = """
import gc
import numpy as np
import pyodide_js
from py_in_browser import _js
await pib.init("{backend}")
rng = np.random.default_rng(0)
x = rng.standard_normal((40, 6)).astype(np.float32)
y = rng.integers(0, 2, 40)
model = pib.Sequential([pib.layers.Dense(8, activation="relu", input_shape=(6,)),
                        pib.layers.Dense(2, activation="softmax")], seed=0)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
await model.fit(x, y, epochs=2, batch_size=4)  # weights, slots and step recordings exist now
pyodide_js._module.enable_pyproxy_allocation_tracing()
def figures():
    gc.collect()
    m = pib.memory()
    return {{k: m[k] for k in ("num_tensors", "num_bytes", "gpu_bytes", "js_refs", "py_proxies_traced")}}
before = figures()
await model.fit(x, y, epochs=100, batch_size=4)  # 1000 steps
after = figures()
with pib.tidy():
    listener = _js.create_proxy(lambda: 1)
    inside = figures()["py_proxies_traced"]
scoped_after = figures()["py_proxies_traced"]
pyodide_js._module.disable_pyproxy_allocation_tracing()
[before, after, inside, scoped_after]
"""


@pytest.mark.parametrize("backend", ["webgpu", "webgl2"])
def test_1000_steps_leave_tensors_gpu_bytes_and_proxies_where_they_started(
    engine_page: EnginePage, backend: str
) -> None:
    before, after, inside, scoped_after = engine_page.run(HYGIENE_RUN.format(backend=backend))
    print(f"\n{backend} memory before/after 1000 steps: {before} {after}")
    assert after == before
    assert before["gpu_bytes"] > 0
    # A tidy scope destroys the Pyodide proxies made inside it.
    assert inside == before["py_proxies_traced"] + 1
    assert scoped_after == before["py_proxies_traced"]
