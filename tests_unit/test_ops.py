"""Every op case: forward against plain numpy, gradient against float64 finite differences."""

import asyncio

import pytest

from py_in_browser.testing.op_cases import (
    CASES,
    SPECIAL_CASES,
    OpCase,
    check_forward,
    check_gradient,
    run_special_case,
    special_inputs,
    special_mismatches,
    special_reference,
)

IDS = [case.name for case in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_float32_matches_numpy(case: OpCase) -> None:
    result = asyncio.run(check_forward(case, "float32"))
    assert result["shape_ok"], result
    assert result["max_abs_err"] <= 1e-5 * result["scale"], result


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_float64_matches_numpy(case: OpCase) -> None:
    result = asyncio.run(check_forward(case, "float64"))
    assert result["shape_ok"], result
    # 2e-7 admits only erf's closed-form approximation; every other op is exact to ~1e-15.
    assert result["max_abs_err"] <= 2e-7 * result["scale"], result


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.grad], ids=[c.name for c in CASES if c.grad]
)
def test_gradient_matches_finite_differences(case: OpCase) -> None:
    result = asyncio.run(check_gradient(case))
    assert result["max_rel_err"] <= case.grad_tol, result


@pytest.mark.parametrize("case", SPECIAL_CASES, ids=[c.name for c in SPECIAL_CASES])
def test_special_values_flow_as_in_numpy(case: OpCase) -> None:
    got = asyncio.run(run_special_case(case))
    assert not special_mismatches(case, got, special_reference(case, special_inputs(case)), 1e-6)
