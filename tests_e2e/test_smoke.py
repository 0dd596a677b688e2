"""The foundation holds in real Chromium, Firefox and WebKit: Python in a worker, numpy, errors,
GPU APIs."""

from __future__ import annotations

import numpy as np
import pytest

from tests_e2e.engine_page import EnginePage, PythonError


@pytest.fixture(
    scope="module", params=["chromium", "firefox", pytest.param("webkit", marks=pytest.mark.webkit)]
)
def browser_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_python_312_runs_in_a_worker(engine_page: EnginePage) -> None:
    info = engine_page.run(
        "import sys, js\n"
        "(sys.version_info[:2], sys.platform, type(js.self).__name__, hasattr(js, 'document'))"
    )
    assert info[0] == [3, 12]
    assert info[1] == "emscripten"
    assert info[3] is False, "the engine must run in a Worker, where there is no document"


def test_numpy_computes(engine_page: EnginePage) -> None:
    result = engine_page.run(
        "a = np.arange(12, dtype=np.float32).reshape(3, 4)\n"
        "{'version': np.__version__, 'gram': a @ a.T, 'mean': float(a.mean())}"
    )
    assert result["version"] == "2.0.2"
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert result["gram"] == (a @ a.T).tolist()
    assert result["mean"] == 5.5


def test_top_level_await_and_overlapping_calls(engine_page: EnginePage) -> None:
    # The second call finishes first: calls are separate tasks in the worker's event loop.
    order = engine_page.js(
        """async () => {
            const done = [];
            const slow = pib.runPython("import asyncio\\nawait asyncio.sleep(0.3)\\n'slow'").then((v) => done.push(v));
            const fast = pib.runPython("'fast'").then((v) => done.push(v));
            await Promise.all([slow, fast]);
            return done;
        }"""
    )
    assert order == ["fast", "slow"]


def test_python_exception_rejects_with_traceback(engine_page: EnginePage) -> None:
    with pytest.raises(PythonError) as failure:
        engine_page.run("def broken():\n    return {}['missing']\n\nbroken()")
    text = str(failure.value)
    assert "Traceback (most recent call last)" in text
    assert "KeyError: 'missing'" in text
    assert "in broken" in text
    # The engine survives a failed call.
    assert engine_page.run("21 * 2") == 42


def test_page_is_cross_origin_isolated(engine_page: EnginePage) -> None:
    assert engine_page.js("() => crossOriginIsolated") is True
    assert engine_page.run("import js\njs.self.crossOriginIsolated") is True


def test_worker_sees_webgpu_and_webgl2(engine_page: EnginePage, browser_kind: str) -> None:
    environment = engine_page.js("() => window.pib.environment")
    webgpu, webgl2 = environment["webgpu"], environment["webgl2"]
    print(f"{browser_kind}: webgpu={webgpu} webgl2={webgl2}")
    if browser_kind == "webkit":
        # WebKitGTK 2.50 has no WebGPU (its feature is a preview, off, and finds no adapter here).
        assert not webgpu["available"] and "navigator.gpu" in webgpu["reason"], webgpu
    else:
        assert webgpu["available"], webgpu
        assert webgpu["max_storage_buffer_binding_size"] > 0
    assert webgl2["available"], webgl2
    assert webgl2["ext_color_buffer_float"] and webgl2["float32_render"], webgl2
    assert webgl2["highp"]
    assert webgl2["max_texture_size"] >= 4096


def test_start_up_stages_are_reported(engine_page: EnginePage) -> None:
    stages = engine_page.js("() => window.pib.stages")
    assert list(stages) == ["page", "runtime", "numpy", "engine", "init"]
    assert all(stage["state"] == "done" and stage["ms"] >= 0 for stage in stages.values())
    # The stages are disjoint spans of navigation to ready: they add up to at most the ready time
    # (each is rounded to a millisecond).
    startup = engine_page.js("() => window.pib.startup")
    assert sum(startup["stages"].values()) <= startup["ready_ms"] + len(stages)
    bars = engine_page.js(
        "() => [...document.querySelectorAll('.stage progress')].map((bar) => bar.value === bar.max)"
    )
    assert bars == [True] * 5


def test_auto_selection_keeps_the_fastest_backend_that_passes(
    engine_page: EnginePage, browser_kind: str
) -> None:
    """No ?backend=: every candidate is self-tested and the fastest correct one is kept
    (tests_e2e/test_backend_selection_in_browsers.py checks the ranking in detail)."""
    available, chosen = engine_page.run("(pib.available_backends(), pib.get_backend())")
    print(f"{browser_kind}: available {available}, chosen {chosen}")
    assert available[-1] == "cpu" and set(available) <= {"webgpu", "webgl2", "cpu"}
    assert engine_page.js("() => window.pib.backend") == chosen
    report = engine_page.run('pib.capabilities()["selection"]')
    assert report["chosen"] == chosen and [c["name"] for c in report["candidates"]] == available
    # Each backend that was no candidate says why, in the words of the worker's GPU probe (which
    # the status panel shows): none where all are available (Chromium here), webgpu in WebKit.
    environment = engine_page.js("() => window.pib.environment")
    assert report["unavailable"] == {
        name: environment[name]["reason"] for name in ("webgpu", "webgl2") if name not in available
    }, environment


def test_an_unknown_backend_rejects_ready_and_every_call(
    request: pytest.FixtureRequest, browser_kind: str, server_url: str
) -> None:
    page = request.getfixturevalue(browser_kind).new_page()
    try:
        page.goto(f"{server_url}/console?backend=tpu")
        errors = page.evaluate(
            """async () => {
                const ready = await window.pib.ready.then(() => "resolved", (e) => e.message);
                const call = await window.pib.runPython("1").then(() => "resolved", (e) => e.message);
                return [ready, call];
            }"""
        )
    finally:
        page.close()
    assert all("?backend=tpu is not a backend" in error for error in errors), errors
