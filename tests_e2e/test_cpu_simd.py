"""The cpu backend's WebAssembly SIMD kernels inside Pyodide: loaded from the engine wheel through
Pyodide's dynamic linker, working on numpy's own memory, and agreeing with numpy."""

from __future__ import annotations

import pytest

from tests_e2e.engine_page import EnginePage


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=cpu"


def test_simd_module_is_loaded_and_used_by_the_cpu_backend(engine_page: EnginePage) -> None:
    loaded = engine_page.run(
        """
from py_in_browser.backends.cpu_simd import SIMD
from py_in_browser.events import runtime_events
[SIMD is not None, [e for e in runtime_events() if e["type"] == "simd_unavailable"]]
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
