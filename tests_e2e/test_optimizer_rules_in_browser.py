"""Adam's Keras epsilon placement on the GPU backends in Chromium: the same 20 steps as
tests_unit/test_optimizer_rules.py against the numpy transcriptions of Keras 3's and the paper's
formulas, and a training step with the Keras form compiles nothing after the start-up warm-up,
which registered its fused programs."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests_e2e.engine_page import EnginePage
from tests_unit.test_optimizer_rules import (
    EPS,
    LR,
    WEIGHT_DECAY,
    gradients,
    initial_weights,
    keras3_adam,
    paper_adam,
)

# GPU float32: WGSL and GLSL do not promise correctly rounded sqrt and division. Measured 1.5e-7
# on SwiftShader (CPython: 9e-8); 1e-6 leaves room for other GPUs and is still 100x below the
# 1.3e-4 between the two placements.
GPU_TOLERANCE = 1e-6


@pytest.fixture(scope="module", params=["webgpu", "webgl2"])
def page_query(request: pytest.FixtureRequest) -> Iterator[str]:
    yield f"?backend={request.param}"


STEPS_IN_PAGE = """
w = pib.Variable(np.array(initial, np.float32))
opt = pib.optimizers.{kind}({lr}, epsilon={eps}, epsilon_placement="{placement}"{extra})
for g in grads:
    with pib.tidy():
        opt.apply_gradients([(pib.tensor(np.array(g, np.float32)), w)])
result = (await w.numpy()).tolist()
w.dispose()
opt.dispose()
result
"""


def steps_in_page(page: EnginePage, kind: str, placement: str) -> np.ndarray:
    page.run(
        f"initial = {initial_weights().tolist()!r}\ngrads = {[g.tolist() for g in gradients()]!r}\n"
    )
    extra = f", weight_decay={WEIGHT_DECAY}" if kind == "AdamW" else ""
    code = STEPS_IN_PAGE.format(kind=kind, lr=LR, eps=EPS, placement=placement, extra=extra)
    return np.array(page.run(code), np.float32)


@pytest.mark.parametrize("kind", ["Adam", "AdamW"])
def test_both_placements_match_their_formulas_on_the_gpu(
    engine_page: EnginePage, kind: str
) -> None:
    decay = WEIGHT_DECAY if kind == "AdamW" else 0.0
    w0, grads = initial_weights(), gradients()
    keras = steps_in_page(engine_page, kind, "keras")
    np.testing.assert_allclose(keras, keras3_adam(w0, grads, decay), rtol=0, atol=GPU_TOLERANCE)
    paper = steps_in_page(engine_page, kind, "paper")
    np.testing.assert_allclose(paper, paper_adam(w0, grads, decay), rtol=0, atol=GPU_TOLERANCE)


def test_keras_placement_compiles_nothing_after_the_warm_up(engine_page: EnginePage) -> None:
    compiled_late = engine_page.run(
        """
from py_in_browser import runtime
from py_in_browser.testing import workloads
backend = runtime.current_backend()
def compiled():  # programs and pipelines, the warm-up's included (queued at start, built while idle)
    return set(backend.queue.known_programs if backend.name == "webgl2" else backend._pipelines)
before = compiled()
x, y = workloads.synthetic_images(8, size=8, seed=0)
model = workloads.small_cnn(size=8, seed=0)
model.compile(optimizer=pib.optimizers.Adam(0.01, epsilon_placement="keras"), loss=model.loss)
await model.fit(x, y, epochs=1, batch_size=4)
sorted(compiled() - before)
"""
    )
    assert compiled_late == []
