"""The op-case table inside Pyodide on the cpu backend: the harness every GPU backend reuses."""

from __future__ import annotations

import pytest

from tests_e2e.engine_page import EnginePage
from tests_e2e.op_oracle import LONG_SUMS, assert_op_table_matches, assert_special_values_match


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=cpu"


def test_op_table_on_cpu_in_pyodide(engine_page: EnginePage) -> None:
    worst = assert_op_table_matches(engine_page, rtol=1e-5)
    assert len(worst) > 40


def test_special_values_on_cpu_in_pyodide(engine_page: EnginePage) -> None:
    assert_special_values_match(engine_page, rtol=1e-6)


def test_long_sums_keep_float32_accuracy(engine_page: EnginePage) -> None:
    errors = engine_page.run(LONG_SUMS)
    print("cpu in Pyodide long-sum relative errors:", errors)
    assert errors["sum"] < 1e-6 and errors["variance"] < 1e-6, errors
