"""The cpu backend's WebAssembly SIMD kernels inside Pyodide: loaded from the engine wheel through
Pyodide's dynamic linker, working on numpy's own memory, and agreeing with numpy."""

from __future__ import annotations

import pytest

from tests_e2e.engine_page import EnginePage


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=cpu"


def test_simd_module_is_loaded_and_used_by_the_cpu_backend(engine_page: EnginePage) -> None:
    """Chromium validates relaxed SIMD, so the build with fused multiply-adds is the one running."""
    loaded = engine_page.run(
        """
from py_in_browser.backends.cpu_simd import SIMD
from py_in_browser.events import runtime_events
[SIMD is not None and SIMD.fuses_multiply_adds(),
 [e for e in runtime_events() if e["type"] == "simd_unavailable"]]
"""
    )
    assert loaded == [True, []]


def test_gemm_in_pyodide_matches_numpy_in_place(engine_page: EnginePage) -> None:
    worst = engine_page.run(
        """
import numpy as np
from py_in_browser.backends.cpu_simd import SIMD
rng = np.random.default_rng(3)
worst = []
for (m, n, k) in [(1, 1, 1), (7, 9, 5), (130, 70, 300), (64, 600, 33)]:
    for ta in (False, True):
        for tb in (False, True):
            a = rng.standard_normal((2, k, m) if ta else (2, m, k)).astype(np.float32)
            b = rng.standard_normal((2, n, k) if tb else (2, k, n)).astype(np.float32)
            out = SIMD.gemm(a, b, ta, tb)
            ref = np.matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b,
                            dtype=np.float64)
            worst.append(float(np.abs(out - ref).max() / max(1.0, np.abs(ref).max())))
max(worst)
"""
    )
    assert worst < 1e-5


def test_replayed_cpu_steps_in_pyodide_give_the_eager_steps_bits(engine_page: EnginePage) -> None:
    """A small CNN with Adam (convolution, pooling, softmax cross-entropy): 5 steps replayed
    (from the third) and 5 run op by op give the same losses and weights, bit for bit; so do
    3 predictions (the third replayed)."""
    outcome = engine_page.run(
        """
import numpy as np
import py_in_browser as pib
from py_in_browser import layers, optimizers, replay

async def train(replayed):
    replay.ENABLED = replayed
    rng = np.random.default_rng(3)
    model = pib.Sequential([
        layers.Conv2D(3, 3, activation="relu", padding="same", input_shape=(6, 6, 2)),
        layers.MaxPool2D(2), layers.Flatten(), layers.Dense(2)], seed=3)
    model.compile(optimizer=optimizers.Adam(0.01),
                  loss=pib.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = rng.uniform(-1, 1, (2, 6, 6, 2)).astype(np.float32)
    y = rng.integers(0, 2, 2).astype(np.int32)
    before = pib.memory()["steps_replayed"]
    losses = [float(await (await model.train_on_batch(x, y)).numpy()) for _ in range(5)]
    weights = await model.get_weights()
    weights += [await (await model.predict(x)).numpy() for _ in range(3)]
    replay.ENABLED = True
    return losses, weights, pib.memory()["steps_replayed"] - before

eager, replayed = await train(False), await train(True)
[eager[2], replayed[2], eager[0] == replayed[0],
 all(np.array_equal(a, b) for a, b in zip(eager[1], replayed[1]))]
"""
    )
    assert outcome == [0, 3 + 1, True, True]
