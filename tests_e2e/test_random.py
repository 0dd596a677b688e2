"""random_uniform and Dropout on webgpu and webgl2 in Chromium: draws and masks bit-identical to the
plain-Python oracle (hence to cpu), and a Dropout CNN whose train steps replay from JS with O(1)
Python->JS calls per step and new masks each step, with the losses of the cpu backend."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from py_in_browser.nn.layers import DROPOUT_BITS
from py_in_browser.testing.op_cases import random_uniform_reference
from tests_e2e.engine_page import EnginePage

LOSS_TOLERANCE = 1e-3

# (shape, seed, stream, counter, counter dtype, bits): odd sizes (partly filled texels and
# workgroups), the largest seed and counter, an int32 counter, and fewer bits.
DRAWS = [
    ((3, 1001), 0, 0, 0, "float32", 24),
    ((257, 129), 2**32 - 1, 7, 123456, "int32", 24),
    ((5, 7, 9), 42, 2**32 - 1, 2**24 - 1, "float32", 22),
    ((1000,), 3, 1, 77, "float32", 11),
]

DRAWS_IN_PAGE = """
import numpy as np
out = []
with pib.tidy():
    for shape, seed, stream, counter, dtype, bits in DRAWS:
        c = pib.tensor(counter, dtype=dtype)
        u = pib.random_uniform(shape, seed=seed, stream=stream, counter=c, bits=bits)
        out.append((await u.numpy()).ravel().tolist())
    # A counter advanced on the device, as a recorded step does: draw 6 after 5 + 1.
    advanced = pib.tensor(5.0) + 1.0
    out.append((await pib.random_uniform((333,), seed=9, counter=advanced).numpy()).tolist())
    # Dropout masks: two training calls of one layer on ones (entries 0 or 1 / (1 - rate)).
    layer = pib.layers.Dropout(0.3, seed=4)
    ones = pib.ones((16, 300))
    for _ in range(2):
        out.append((await layer(ones, training=True).numpy()).ravel().tolist())
    out.append(list(layer.seed))
out
"""

# 20 train_on_batch steps of a small CNN with Dropout over 4 batches, read back every 10 steps,
# with pib.memory() counters around the last 10 steps and the layer's draw count at the end.
DROPOUT_CNN = """
async def dropout_cnn_losses():
    import numpy as np
    import py_in_browser as pib
    from py_in_browser import layers, optimizers

    rng = np.random.Generator(np.random.PCG64(0))
    x = rng.standard_normal((64, 8, 8, 2)).astype(np.float32)
    y = (x[:, :4, :4, 0].mean(axis=(1, 2)) > 0).astype(np.int32) + (x[:, 4:, 4:, 1].mean(axis=(1, 2)) > 0)
    model = pib.Sequential(
        [
            layers.Conv2D(8, 3, activation="relu", padding="same", input_shape=(8, 8, 2)),
            layers.Dropout(0.25),
            layers.MaxPool2D(2),
            layers.Flatten(),
            layers.Dropout(0.5),
            layers.Dense(3),
        ],
        seed=0,
    )
    model.compile(
        optimizer=optimizers.Adam(0.01),
        loss=pib.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    batches = [(x[i : i + 16], y[i : i + 16].astype(np.int32)) for i in range(0, 64, 16)]
    losses, pending, counts = [], [], []
    for step in range(20):
        if step == 10:
            counts.append(pib.memory())
        xb, yb = batches[step % 4]
        pending.append(await model.train_on_batch(xb, yb))
        if step == 19:
            counts.append(pib.memory())
        if step % 10 == 9:
            for loss in pending:
                losses.append(float(await loss.numpy()))
                loss.dispose()
            pending = []
    replayed = counts[1].get("steps_replayed", 0) - counts[0].get("steps_replayed", 0)
    calls = counts[1].get("js_calls", 0) - counts[0].get("js_calls", 0)
    draws = [await la.draw_count() for la in model.layers if isinstance(la, layers.Dropout)]
    return losses, replayed, calls, draws
"""


@pytest.fixture(scope="module", params=["webgpu", "webgl2"])
def page_query(request: pytest.FixtureRequest) -> str:
    return f"?backend={request.param}"


@pytest.fixture(scope="module")
def page(engine_page: EnginePage) -> Iterator[EnginePage]:
    engine_page.run(f"DRAWS = {DRAWS!r}\n{DROPOUT_CNN}")
    yield engine_page


def bits_of(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def test_draws_and_dropout_masks_are_bit_identical_to_cpu(page: EnginePage) -> None:
    *draws, advanced, mask_0, mask_1, (_, stream) = page.run(DRAWS_IN_PAGE)
    for got, (shape, seed, layer_stream, counter, _, bits) in zip(draws, DRAWS, strict=True):
        want = random_uniform_reference(counter, shape, seed, layer_stream, bits).ravel()
        np.testing.assert_array_equal(bits_of(got), bits_of(want), err_msg=str(shape))
    np.testing.assert_array_equal(
        bits_of(advanced), bits_of(random_uniform_reference(6, (333,), 9, 0, 24))
    )
    for k, got in enumerate((mask_0, mask_1)):
        drawn = random_uniform_reference(k, (16, 300), 4, stream, DROPOUT_BITS).ravel()
        want = np.where(drawn < 0.3, np.float32(0), np.float32(1 / 0.7))
        np.testing.assert_array_equal(bits_of(got), bits_of(want), err_msg=f"mask {k}")
    assert not np.array_equal(mask_0, mask_1)


def cpu_dropout_cnn() -> tuple[list[float], list[int]]:
    namespace: dict[str, Any] = {}
    exec(DROPOUT_CNN, namespace)
    # Playwright's sync API owns this thread's event loop, so CPython runs on its own thread.
    with ThreadPoolExecutor(1) as pool:
        losses, _, _, draws = pool.submit(asyncio.run, namespace["dropout_cnn_losses"]()).result()
    return losses, draws


def test_dropout_cnn_replays_with_new_masks_and_matches_cpu(page: EnginePage) -> None:
    expected, expected_draws = cpu_dropout_cnn()
    backend = page.run("pib.get_backend()")
    losses, replayed, calls, draws = page.run("await dropout_cnn_losses()")
    assert len(losses) == 20
    np.testing.assert_allclose(losses, expected, rtol=0, atol=LOSS_TOLERANCE)
    # Steps 1-2 record (the second verifies the first); 11-20 all replay, each advancing the
    # layers' draw counters on the device: 20 masks per layer, as on cpu.
    assert replayed == 10, replayed
    assert draws == expected_draws == [20, 20]
    assert calls / 10 <= 2, (backend, calls)
    print(f"{backend} dropout cnn: {calls} js calls in 10 replayed steps, losses {losses[-3:]}")
