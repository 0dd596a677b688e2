"""The feature x backend matrix in real browsers: every case of py_in_browser.testing.feature_cases
on cpu, webgpu and webgl2 in Chromium and on webgpu and webgl2 in Firefox ESR, compared with the
CPython cpu run: per-epoch losses and metrics, final weights and each feature's own outputs.

One page per browser x backend runs the whole table in one runPython call; each case is then its
own test, so a failure names the case, the backend and the browser.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from py_in_browser.testing import feature_cases
from tests_e2e.conftest import open_engine_page

# Pyodide's numpy against CPython's: the same float32 kernels, summed in the same order.
CPU_TOLERANCE = 1e-5
# GPU kernels round and accumulate differently (fused programs, tiled sums) over a dozen steps.
GPU_TOLERANCE = 1e-3

TARGETS = [
    pytest.param(("chromium", "cpu"), id="chromium-cpu"),
    pytest.param(("chromium", "webgpu"), id="chromium-webgpu"),
    pytest.param(("chromium", "webgl2"), id="chromium-webgl2"),
    pytest.param(("firefox", "webgpu"), id="firefox-webgpu", marks=pytest.mark.firefox),
    pytest.param(("firefox", "webgl2"), id="firefox-webgl2", marks=pytest.mark.firefox),
]
NAMES = [c.name for c in feature_cases.CASES]


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    """The CPython cpu run, on its own thread (Playwright's sync API owns this thread's loop)."""
    with ThreadPoolExecutor(1) as pool:
        results: dict[str, Any] = pool.submit(asyncio.run, feature_cases.run_cases()).result()
    return results


@pytest.fixture(scope="module", params=TARGETS)
def matrix_run(
    request: pytest.FixtureRequest, server_url: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The whole table on one browser and backend, in one fresh page: (backend, results)."""
    browser_name, backend = request.param
    browser: Any = request.getfixturevalue(browser_name)
    start = time.perf_counter()
    engine = open_engine_page(browser, f"{server_url}/?backend={backend}")
    try:
        assert engine.run("pib.get_backend()") == backend, engine.describe()
        results = engine.run(
            "from py_in_browser.testing import feature_cases\n"
            f"await feature_cases.run_cases({NAMES!r})"
        )
    finally:
        engine.page.close()
    seconds = {name: round(r["seconds"], 2) for name, r in results.items()}
    print(
        f"\nfeature matrix {browser_name}/{backend}: {time.perf_counter() - start:.1f} s "
        f"with page load; per case {seconds}"
    )
    yield backend, results


def _is_number(value: Any) -> bool:
    return isinstance(value, float | int) and not isinstance(value, bool)


def mismatches(got: Any, want: Any, tolerance: float, path: str = "") -> list[str]:
    """Where got differs from want: numbers by more than tolerance * max(1, |want|), anything
    else (strings, bools, None, lengths, keys) at all. Returns readable paths with both values."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return [
                f"{path}: keys {sorted(got) if isinstance(got, dict) else got!r} != {sorted(want)}"
            ]
        return [m for k in want for m in mismatches(got[k], want[k], tolerance, f"{path}.{k}")]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{path}: {got!r} != {want!r}"]
        return [
            m
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for m in mismatches(g, w, tolerance, f"{path}[{i}]")
        ]
    if _is_number(want) and _is_number(got):
        error = abs(float(got) - float(want))
        if error <= tolerance * max(1.0, abs(float(want))):
            return []
        return [f"{path}: {got!r} vs {want!r} (error {error:.2e})"]
    return [] if got == want else [f"{path}: {got!r} != {want!r}"]


@pytest.mark.parametrize("name", NAMES)
def test_case_matches_cpython(
    matrix_run: tuple[str, dict[str, Any]], reference: dict[str, Any], name: str
) -> None:
    backend, results = matrix_run
    assert "error" not in reference[name], reference[name].get("error")
    assert "error" not in results[name], f"{name} on {backend}:\n{results[name]['error']}"
    tolerance = CPU_TOLERANCE if backend == "cpu" else GPU_TOLERANCE
    found = mismatches(results[name]["result"], reference[name]["result"], tolerance)
    assert not found, f"{name} on {backend}, beyond {tolerance}:\n" + "\n".join(found[:20])


def test_the_mismatch_check_sees_small_differences() -> None:
    """The comparison itself: a drift beyond the tolerance in any leaf is reported."""
    want = {"history": {"loss": [1.0, 0.5]}, "weights": [[[0.25, -2.0]]], "summary": "x"}
    assert mismatches(want, want, 1e-5) == []
    drifted = {"history": {"loss": [1.0, 0.5 + 2e-5]}, "weights": [[[0.25, -2.0]]], "summary": "x"}
    assert mismatches(drifted, want, 1e-5) == [".history.loss[1]: 0.50002 vs 0.5 (error 2.00e-05)"]
    scaled = {"history": {"loss": [1.0, 0.5]}, "weights": [[[0.25, -2.00003]]], "summary": "x"}
    assert mismatches(scaled, want, 2e-5) == []  # relative above 1 in magnitude
    assert len(mismatches({**want, "summary": "y"}, want, 1.0)) == 1
