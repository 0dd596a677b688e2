"""The feature x backend matrix in real browsers: every case of py_in_browser.testing.feature_cases
on cpu, webgpu and webgl2 in Chromium, on webgpu and webgl2 in Firefox ESR and on cpu and webgl2
in WebKit (WebKitGTK, which has no WebGPU), compared with the CPython cpu run: per-epoch losses and metrics, final weights and each feature's own outputs.

One page per browser, one runPython call per backend runs the whole table; each case is then its
own test, so a failure names the case, the backend and the browser.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from py_in_browser.testing import feature_cases
from tests_e2e.conftest import open_engine_page
from tests_e2e.engine_page import EnginePage

# Pyodide's numpy against CPython's: the same engine code on float32 (measured worst 2.2e-7).
CPU_TOLERANCE = 1e-5
# GPU kernels round and accumulate differently (fused programs, tiled sums, their own exp and
# log) over a dozen steps: measured worst 5.6e-6 in Chromium (SwiftShader), 9.9e-6 in Firefox
# (llvmpipe / lavapipe); the bound is the issue's.
GPU_TOLERANCE = 1e-3
# WebGL2's float16 storage (limits={"float32_render": False}) is not a target: over a case's
# eight steps half rounding stays within 3e-4 with SGD but Adam, AdamW and RMSprop turn it into
# 1e-2 to 1.4e-1 (a rounded tiny gradient becomes a full-size normalised step, and epsilon is
# raised to 2^-7 there by design). test_webgl2_f16.py checks that path against its own bounds.


@dataclass(frozen=True)
class Target:
    browser: str
    backend: str
    tolerance: float

    def __str__(self) -> str:
        return f"{self.browser}-{self.backend}"


TARGETS = [
    Target("chromium", "cpu", CPU_TOLERANCE),
    Target("chromium", "webgpu", GPU_TOLERANCE),
    Target("chromium", "webgl2", GPU_TOLERANCE),
    Target("firefox", "webgpu", GPU_TOLERANCE),
    Target("firefox", "webgl2", GPU_TOLERANCE),
    # WebKitGTK has no WebGPU; its worker's WebGL2 runs on the GPU process's Mesa (llvmpipe here).
    Target("webkit", "cpu", CPU_TOLERANCE),
    Target("webkit", "webgl2", GPU_TOLERANCE),
]
NAMES = [c.name for c in feature_cases.CASES]
BROWSER_MARKS = {"firefox": [pytest.mark.firefox], "webkit": [pytest.mark.webkit]}


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    """The CPython cpu run, on its own thread (Playwright's sync API owns this thread's loop)."""
    with ThreadPoolExecutor(1) as pool:
        results: dict[str, Any] = pool.submit(asyncio.run, feature_cases.run_cases()).result()
    return results


class PagePerBrowser:
    """One engine page per browser for the module, booted on cpu (the cheapest start); each
    target then selects its backend with pib.init, as a script may: page loads cost more than
    the cases here."""

    def __init__(self, request: pytest.FixtureRequest, server_url: str) -> None:
        self.request, self.server_url = request, server_url
        self.pages: dict[str, EnginePage] = {}

    def get(self, browser_name: str) -> EnginePage:
        if browser_name not in self.pages:
            browser: Any = self.request.getfixturevalue(browser_name)
            self.pages[browser_name] = open_engine_page(browser, f"{self.server_url}/?backend=cpu")
        return self.pages[browser_name]

    def close(self) -> None:
        for engine in self.pages.values():
            engine.page.close()


@pytest.fixture(scope="module")
def pages(request: pytest.FixtureRequest, server_url: str) -> Iterator[PagePerBrowser]:
    opened = PagePerBrowser(request, server_url)
    yield opened
    opened.close()


@pytest.fixture(
    scope="module",
    params=[pytest.param(t, id=str(t), marks=BROWSER_MARKS.get(t.browser, [])) for t in TARGETS],
)
def matrix_run(request: pytest.FixtureRequest, pages: PagePerBrowser) -> tuple[Target, Any]:
    """The whole table on one browser and backend in one runPython call: (target, results)."""
    target: Target = request.param
    start = time.perf_counter()
    engine = pages.get(target.browser)
    selected = engine.run(f"await pib.init(backend={target.backend!r})\npib.get_backend()")
    assert selected == target.backend, engine.describe()
    results = engine.run(
        f"from py_in_browser.testing import feature_cases\nawait feature_cases.run_cases({NAMES!r})"
    )
    seconds = {name: round(r["seconds"], 2) for name, r in results.items()}
    print(f"\nfeature matrix {target}: {time.perf_counter() - start:.1f} s; per case {seconds}")
    return target, results


def _is_number(value: Any) -> bool:
    return isinstance(value, float | int) and not isinstance(value, bool)


def differences(got: Any, want: Any, path: str = "") -> list[tuple[float, str]]:
    """(error, where) for every number of want: |got - want| / max(1, |want|), relative only
    above 1 in magnitude; anything else that differs (strings, bools, None, lengths, keys) is an
    infinite error."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            keys = sorted(got) if isinstance(got, dict) else got
            return [(math.inf, f"{path}: keys {keys!r} != {sorted(want)}")]
        return [d for k in want for d in differences(got[k], want[k], f"{path}.{k}")]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [(math.inf, f"{path}: {got!r} != {want!r}")]
        return [
            d
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for d in differences(g, w, f"{path}[{i}]")
        ]
    if _is_number(want) and _is_number(got):
        error = abs(float(got) - float(want)) / max(1.0, abs(float(want)))
        return [(error, f"{path}: {got!r} vs {want!r} (error {error:.2e})")]
    return [(0.0 if got == want else math.inf, f"{path}: {got!r} != {want!r}")]


@pytest.mark.parametrize("name", NAMES)
def test_case_matches_cpython(
    matrix_run: tuple[Target, dict[str, Any]], reference: dict[str, Any], name: str
) -> None:
    target, results = matrix_run
    assert "error" not in reference[name], reference[name].get("error")
    assert "error" not in results[name], f"{name} on {target}:\n{results[name]['error']}"
    tolerance = target.tolerance
    found = differences(results[name]["result"], reference[name]["result"])
    beyond = [where for error, where in found if not error <= tolerance]
    print(f"{target} {name}: worst error {max(error for error, _ in found):.1e}")
    assert not beyond, f"{name} on {target}, beyond {tolerance}:\n" + "\n".join(beyond[:20])


def test_the_comparison_sees_small_differences() -> None:
    """The comparison itself: a drift in any leaf is measured, structure must match exactly."""
    want = {"history": {"loss": [1.0, 0.5]}, "weights": [[[0.25, -2.0]]], "summary": "x"}
    assert max(error for error, _ in differences(want, want)) == 0.0
    drifted = {"history": {"loss": [1.0, 0.5 + 2e-5]}, "weights": [[[0.25, -2.0]]], "summary": "x"}
    errors = {where.split(":")[0]: error for error, where in differences(drifted, want)}
    assert errors[".history.loss[1]"] == pytest.approx(2e-5)
    scaled = {"history": {"loss": [1.0, 0.5]}, "weights": [[[0.25, -2.00004]]], "summary": "x"}
    errors = {where.split(":")[0]: error for error, where in differences(scaled, want)}
    assert errors[".weights[0][0][1]"] == pytest.approx(2e-5)  # relative above 1 in magnitude
    assert max(error for error, _ in differences({**want, "summary": "y"}, want)) == math.inf
    assert max(error for error, _ in differences({**want, "weights": [[[0.25]]]}, want)) == math.inf
