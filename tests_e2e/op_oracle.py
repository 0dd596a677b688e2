"""The shared op-case table run inside a page on one backend, checked against numpy in CPython.

Every backend's e2e tests call `assert_op_table_matches`: forward results against the plain-numpy
reference, tape gradients against the cpu backend's float64 gradients of the same objective.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from py_in_browser.testing.op_cases import (
    CASES,
    SPECIAL_CASES,
    make_inputs,
    reference,
    special_inputs,
    special_mismatches,
    special_reference,
    tape_gradients,
)
from tests_e2e.engine_page import EnginePage

RUN_TABLE_IN_PAGE = """
from py_in_browser.testing.op_cases import CASES, make_inputs, _call_pib, _to_tensors, tape_gradients
results = {}
for case in CASES:
    arrays = make_inputs(case, "float32")
    with pib.tidy():
        out = await _call_pib(case, _to_tensors(case, arrays, "float32")).numpy()
    grads = (await tape_gradients(case, "float32"))[0] if case.grad else []
    results[case.name] = {"forward": out, "grads": grads}
results
"""


def _cpu_gradients() -> dict[str, list[np.ndarray]]:
    async def all_cases() -> dict[str, list[np.ndarray]]:
        return {c.name: (await tape_gradients(c, "float64"))[0] for c in CASES if c.grad}

    # Playwright's sync API owns this thread's event loop, so the oracle runs on its own thread.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, all_cases()).result()


def _relative_error(got: Any, want: np.ndarray) -> float:
    got_array = np.asarray(got, dtype=np.float64)
    if got_array.shape != want.shape:
        return float("inf")
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    return float(np.max(np.abs(got_array - want.astype(np.float64)), initial=0.0)) / scale


def assert_op_table_matches(engine_page: EnginePage, rtol: float = 1e-4) -> dict[str, float]:
    """Runs every case on the page's backend; returns the worst error per case (for the notes)."""
    results = engine_page.run(RUN_TABLE_IN_PAGE)
    oracle_grads = _cpu_gradients()
    worst: dict[str, float] = {}
    failures = []
    for case in CASES:
        result = results[case.name]
        errors = [_relative_error(result["forward"], reference(case, make_inputs(case, "float32")))]
        if case.grad:
            errors += [
                _relative_error(got, want)
                for got, want in zip(result["grads"], oracle_grads[case.name], strict=True)
            ]
        worst[case.name] = max(errors)
        if not worst[case.name] <= rtol:
            failures.append(f"{case.name}: {worst[case.name]:.2e}")
    assert not failures, f"cases beyond {rtol} relative: {failures}"
    return worst


RUN_SPECIAL_IN_PAGE = """
from py_in_browser.testing.op_cases import SPECIAL_CASES, run_special_case
{case.name: await run_special_case(case) for case in SPECIAL_CASES}
"""


def assert_special_values_match(engine_page: EnginePage, rtol: float = 1e-4) -> None:
    """NaN, +-Inf and +-0 through every special-value case on the page's backend: the class of
    each result (NaN / +Inf / -Inf / finite, the sign of zeros where it matters) as numpy's,
    finite values within rtol."""
    results = engine_page.run(RUN_SPECIAL_IN_PAGE)
    failures = []
    for case in SPECIAL_CASES:
        want = special_reference(case, special_inputs(case))
        failures += special_mismatches(case, results[case.name], want, rtol)
    assert not failures, f"{len(failures)} special values differ from numpy:\n" + "\n".join(
        failures[:60]
    )


# A BatchNorm statistic's length (op_cases.LONG_SUM_SHAPE), data made in the page from a seed.
LONG_SUMS = """
from py_in_browser.testing.op_cases import long_sum_relative_errors
await long_sum_relative_errors()
"""
