"""The cpu backend's large products split by rows between the engine's worker and helper workers
(cpu_simd/threads.py, pool.js), in Chromium and Firefox: the helpers start after ready, give the
bits the engine alone computes, and a helper that dies leaves its rows to the engine."""

from __future__ import annotations

import pytest

from tests_e2e.conftest import open_engine_page
from tests_e2e.engine_page import EnginePage

# Defines `compare(m, n, k, transposed_b)` in the page: one product with the helpers and one by
# the engine's worker alone, on the same operands (with a NaN and infinities in them); returns
# whether the helpers took part, whether the bits are equal, the error against float64 numpy and
# whether NaN and the infinities land where numpy's do.
COMPARE = """
import numpy as np
from py_in_browser.backends.cpu_simd import SIMD, threads
from py_in_browser.events import runtime_events

def compare(m, n, k, transposed_b):
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transposed_b else (k, n)).astype(np.float32)
    a[3, 5], a[m - 1, 0], b[1, 2] = np.nan, np.inf, -np.inf
    helpers = SIMD.helpers
    before = helpers.products if helpers else 0
    split = SIMD.gemm(a, b, False, transposed_b)
    used = helpers is not None and helpers.products == before + 1
    active, SIMD.helpers = SIMD.helpers, None  # None already where the helpers closed
    try:
        alone = SIMD.gemm(a, b, False, transposed_b)
    finally:
        SIMD.helpers = active
    finite = np.isfinite(alone)
    reference = np.matmul(a.astype(np.float64), (b.T if transposed_b else b).astype(np.float64))
    error = float(np.abs(split[finite] - reference[finite]).max() / np.abs(reference[finite]).max())
    same = bool(np.array_equal(split.view(np.uint32), alone.view(np.uint32)))
    agree = bool(np.array_equal(finite, np.isfinite(reference)))
    return {"used": used, "same_bits": same, "error": error, "non_finite_agree": agree}
"""


# From ready until the helpers have started, the page keeps two calls in flight (one awaiting a timer
# in the worker, one not); each must answer within 20 s, or the call rejects. Returns whether the
# helpers started.
CALLS_WHILE_HELPERS_START = """async () => {
    const answer = (code) => Promise.race([
        pib.runPython(code),
        new Promise((_, reject) => setTimeout(() => reject(new Error(`no answer to ${code}`)), 20000)),
    ]);
    let starting = true;
    const started = answer("from py_in_browser.backends.cpu_simd import threads\\nawait threads.ready()");
    started.finally(() => { starting = false; });
    while (starting) {
        await Promise.all([answer("import asyncio\\nawait asyncio.sleep(0.005)\\n1"), answer("2")]);
    }
    return await started;
}"""
PAGE_LOADS = 8


@pytest.fixture(scope="module", params=["chromium", "firefox"])
def browser_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=cpu"


@pytest.fixture(scope="module")
def helpers(engine_page: EnginePage) -> int:
    """Waits for the helpers init started after ready; their count."""
    engine_page.run(COMPARE)
    started = engine_page.run("await threads.ready(), SIMD.helpers and SIMD.helpers.count")
    cores = engine_page.js("() => navigator.hardwareConcurrency")
    assert started == [True, min(7, cores - 1)], (started, cores)
    return int(started[1])


@pytest.mark.parametrize(
    ("m", "n", "k", "transposed_b"), [(600, 300, 200, False), (257, 1030, 129, True)]
)
def test_large_products_share_rows_with_helpers_and_keep_the_bits(
    engine_page: EnginePage, helpers: int, m: int, n: int, k: int, transposed_b: bool
) -> None:
    result = engine_page.run(f"compare({m}, {n}, {k}, {transposed_b})")
    assert result["used"] and result["same_bits"], result
    assert result["error"] < 1e-5 and result["non_finite_agree"], result


def test_small_products_stay_in_the_engines_worker(engine_page: EnginePage, helpers: int) -> None:
    """Below 2^24 multiply-adds the copies would cost more than the helpers win."""
    result = engine_page.run("compare(200, 200, 200, False)")
    assert not result["used"] and result["same_bits"], result


def test_a_helper_that_dies_leaves_its_rows_to_the_engine(
    engine_page: EnginePage, helpers: int
) -> None:
    """A helper's worker gone before a product: the engine waits for its answer up to the
    deadline, computes the helper's rows itself (the same bits), closes the helpers and says why;
    later products run in the engine's worker alone."""
    # A worker blocked in Atomics.wait outlives terminate() until woken; its stop signal (what
    # closing the pool sends) ends it for sure, and it answers nothing after.
    engine_page.run(
        """
import asyncio, js
helper = SIMD.helpers._pool.helpers[0]
js.Atomics.store(helper.cells, 0, 3)
js.Atomics.notify(helper.cells, 0)
await asyncio.sleep(0.2)
"""
    )
    result = engine_page.run("compare(600, 300, 200, False)")
    assert result["used"] and result["same_bits"] and result["error"] < 1e-5, result
    closed = engine_page.run(
        '[SIMD.helpers is None, [e["reason"] for e in runtime_events() if e["type"] == "gemm_helpers_closed"]]'
    )
    assert closed[0] and "did not answer" in closed[1][-1], closed
    after = engine_page.run("compare(600, 300, 200, False)")
    assert not after["used"] and after["same_bits"], after


def test_calls_made_while_the_helpers_start_all_answer(
    request: pytest.FixtureRequest, browser_kind: str, server_url: str
) -> None:
    """The page starts the helpers for the engine's worker: a Worker constructed inside that worker
    hung it in Firefox now and then (about 1 page load in 15) when the page called into it at the
    same moment, and every later call with it."""
    browser = request.getfixturevalue(browser_kind)
    for load in range(PAGE_LOADS):
        engine = open_engine_page(browser, f"{server_url}/console?backend=cpu")
        try:
            started = engine.js(CALLS_WHILE_HELPERS_START)
        finally:
            engine.page.close()
        assert started is True, f"load {load}: the helpers did not start"
