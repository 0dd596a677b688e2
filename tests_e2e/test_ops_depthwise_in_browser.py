"""depthwise_conv2d at the hand model's sizes on every backend of Chromium and Firefox: the
112 x 112 x 24 first layer (3x3, an R-texture filter on webgl2), a 28 x 28 x 144 5x5 layer (an
RGBA-packed filter) and a 5x5 one at stride 2, each one dispatch of the vec4 kernel on webgpu and
on webgl2 one block draw of 4 neighbouring pixels per fragment and its interleave, against the op-case table's numpy reference (plain loops, computed in the page, once
per browser); the forward times are printed for the notes (never asserted: the machine is
shared). One page per browser, switched between backends with pib.init."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests_e2e.conftest import open_engine_page
from tests_e2e.engine_page import EnginePage

LAYERS = [
    # x shape, filter shape, strides, and the kernel webgpu runs it on (dispatch key)
    ((1, 112, 112, 24), (3, 3, 24, 1), 1, "depthwise_cols:3x1"),
    ((1, 28, 28, 144), (5, 5, 144, 1), 1, "depthwise_cols:5x1"),
    ((1, 56, 56, 96), (5, 5, 96, 1), 2, "depthwise_cols:5x2"),
]
# webgl2 runs each as blocks of 4 pixels (rewrites.depthwise_blocked): the draws sent. The 3x3
# filter is small, an R texture: drawn into an RGBA one first ("rows", rewrites.packed_filter).
WEBGL2_KERNELS = {
    (3, 1): ["rows", "depthwise_block:k3s1_4x1", "block_interleave:4x1"],
    (5, 1): ["depthwise_block:k5s1_4x1", "block_interleave:4x1"],
    (5, 2): ["depthwise_block:k5s2_4x1", "block_interleave:4x1"],
}

RUN_LAYERS = """
import json, time
from py_in_browser.backends.webgpu import kernels as webgpu_kernels
from py_in_browser.testing.op_cases import _ref_depthwise_conv2d
backend = pib.runtime.current_backend()
kernels_run = []
if pib.get_backend() == "webgl2":
    backend.flush()
    engine_run = backend.queue.engine.run
    def spy(payload, staging):
        kernels_run.extend(c[1] for c in json.loads(payload)["commands"] if c[0] == "draw")
        return engine_run(payload, staging)
    backend.queue.engine.run = spy
if pib.get_backend() == "webgpu":
    plan = webgpu_kernels.plan
    def plan_spy(op, attrs, out, *rest):  # the depthwise op's dispatches (not warm-up plans)
        found = plan(op, attrs, out, *rest)
        if op == "depthwise_conv2d":
            kernels_run.extend(d.key for d in found.dispatches)
        return found
    webgpu_kernels.plan = plan_spy
if "DEPTHWISE_REFERENCES" not in globals():
    DEPTHWISE_REFERENCES = {}
results = []
try:
    for k, (x_shape, w_shape, strides, _) in enumerate(LAYERS):
        rng = np.random.default_rng(11 + k)
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        if k not in DEPTHWISE_REFERENCES:
            DEPTHWISE_REFERENCES[k] = _ref_depthwise_conv2d(x, w, strides, "same")
        want = DEPTHWISE_REFERENCES[k]
        xt, wt = pib.tensor(x), pib.tensor(w)
        kernels_run.clear()
        got = await pib.depthwise_conv2d(xt, wt, strides=strides, padding="same").numpy()
        kernels = list(kernels_run)
        times = []
        for _ in range(4):
            start = time.perf_counter()
            with pib.tidy():
                await pib.depthwise_conv2d(xt, wt, strides=strides, padding="same").numpy()
            times.append((time.perf_counter() - start) * 1e3)
        error = float(np.max(np.abs(got - want))) / max(1.0, float(np.max(np.abs(want))))
        results.append({"shape_ok": got.shape == want.shape, "error": error,
                        "kernels": kernels, "ms": min(times[1:])})
        xt.dispose()
        wt.dispose()
finally:
    if pib.get_backend() == "webgpu":
        webgpu_kernels.plan = plan
    if pib.get_backend() == "webgl2":
        backend.queue.engine.run = engine_run
results
"""

TARGETS = [
    pytest.param("chromium", "cpu", id="chromium-cpu"),
    pytest.param("chromium", "webgpu", id="chromium-webgpu"),
    pytest.param("chromium", "webgl2", id="chromium-webgl2"),
    pytest.param("firefox", "webgpu", id="firefox-webgpu", marks=pytest.mark.firefox),
    pytest.param("firefox", "webgl2", id="firefox-webgl2", marks=pytest.mark.firefox),
]


@pytest.fixture(scope="module")
def pages(request: pytest.FixtureRequest, server_url: str) -> Iterator[Callable[[str], EnginePage]]:
    """One engine page per browser for the module, opened on first use (booted on cpu)."""
    opened: dict[str, EnginePage] = {}

    def get(browser_name: str) -> EnginePage:
        if browser_name not in opened:
            browser: Any = request.getfixturevalue(browser_name)
            opened[browser_name] = open_engine_page(browser, f"{server_url}/console?backend=cpu")
        return opened[browser_name]

    yield get
    for engine in opened.values():
        engine.page.close()


@pytest.mark.parametrize("browser_name, backend", TARGETS)
def test_hand_model_layers_match_numpy_in_one_kernel(
    pages: Callable[[str], EnginePage], browser_name: str, backend: str
) -> None:
    engine = pages(browser_name)
    selected = engine.run(f"await pib.init(backend={backend!r})\npib.get_backend()")
    assert selected == backend, engine.describe()
    results = engine.run(f"LAYERS = {LAYERS!r}\n{RUN_LAYERS}")
    for (x_shape, w_shape, strides, webgpu_kernel), result in zip(LAYERS, results, strict=True):
        assert result["shape_ok"] and result["error"] <= 1e-5, (x_shape, w_shape, result)
        if backend == "webgpu":
            assert result["kernels"] == [webgpu_kernel], result["kernels"]
        if backend == "webgl2":
            assert result["kernels"] == WEBGL2_KERNELS[(w_shape[1], strides)], result["kernels"]
        print(
            f"{browser_name}-{backend} depthwise {x_shape} x {w_shape}/{strides}: {result['ms']:.1f} ms"
        )
