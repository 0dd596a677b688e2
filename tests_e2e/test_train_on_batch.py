"""model.train_on_batch on webgpu and webgl2 in Chromium: replayed from the third step with O(1)
Python->JS calls per step, losses within 1e-3 of the cpu backend in CPython."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from tests_e2e.engine_page import EnginePage

STEPS = 20
LOSS_TOLERANCE = 1e-3

# 20 train_on_batch steps of an Adam MLP over 4 batches, read back every 10 steps (like the
# benchmark's "synced every 10"), with pib.memory() counters around the last 10 steps.
STEPPED_LOSSES = """
async def stepped_losses(as_tensors):
    import numpy as np
    import py_in_browser as pib
    from py_in_browser import layers, optimizers
    from py_in_browser.testing import workloads

    x, y = workloads.blobs(samples=128, seed=0)
    x, y = x.astype(np.float32), y.astype(np.int32)
    model = pib.Sequential(
        [layers.Dense(16, activation="relu", input_shape=(4,)), layers.Dense(3)], seed=0
    )
    model.compile(
        optimizer=optimizers.Adam(0.01),
        loss=pib.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    batches = [(x[i : i + 32], y[i : i + 32]) for i in range(0, 128, 32)]
    if as_tensors:
        batches = [(pib.tensor(a), pib.tensor(b, dtype="int32")) for a, b in batches]
    losses, pending, counts = [], [], []
    for step in range(20):
        if step == 10:
            counts.append(pib.memory())
        xb, yb = batches[step % 4]
        pending.append(await model.train_on_batch(xb, yb))
        if step == 19:
            counts.append(pib.memory())  # before the reads
        if step % 10 == 9:
            for loss in pending:
                losses.append(float(await loss.numpy()))
                loss.dispose()
            pending = []
    # The cpu reference run has no replay counters; on a GPU backend the test requires
    # 10 replayed steps, which a missing counter could not fake.
    replayed = counts[1].get("steps_replayed", 0) - counts[0].get("steps_replayed", 0)
    calls = counts[1].get("js_calls", 0) - counts[0].get("js_calls", 0)
    return losses, replayed, calls
"""


@pytest.fixture(scope="module", params=["webgpu", "webgl2"])
def page_query(request: pytest.FixtureRequest) -> str:
    return f"?backend={request.param}"


@pytest.fixture(scope="module")
def stepped(engine_page: EnginePage) -> Iterator[EnginePage]:
    engine_page.run(STEPPED_LOSSES)
    yield engine_page


def cpu_losses(as_tensors: bool) -> list[float]:
    namespace: dict[str, Any] = {}
    exec(STEPPED_LOSSES, namespace)
    # Playwright's sync API owns this thread's event loop, so CPython runs on its own thread.
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(asyncio.run, namespace["stepped_losses"](as_tensors)).result()
    losses: list[float] = result[0]
    return losses


@pytest.mark.parametrize("as_tensors", [False, True], ids=["arrays", "tensors"])
def test_train_on_batch_replays_and_matches_cpu(stepped: EnginePage, as_tensors: bool) -> None:
    expected = cpu_losses(as_tensors)
    backend = stepped.run("pib.get_backend()")
    losses, replayed, calls = stepped.run(f"await stepped_losses({as_tensors})")
    assert len(losses) == STEPS
    np.testing.assert_allclose(losses, expected, rtol=0, atol=LOSS_TOLERANCE)
    # Steps 1-2 record (the second verifies the first); 11-20 all replay.
    assert replayed == 10, replayed
    # One flush per step, a fence every few steps: O(1), whatever the model's op count.
    assert calls / 10 <= 2, (backend, calls)
    print(f"{backend} {'tensors' if as_tensors else 'arrays'}: {calls} js calls in 10 steps")
