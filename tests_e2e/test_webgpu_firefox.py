"""The WebGPU backend in Firefox ESR (lavapipe under Xvfb): the op table and its special values.

The feature matrix trains on WebGPU in Firefox; this checks each primitive there, NaN, +-Inf and
+-0 included, because Firefox's WGSL compiler (naga) is not Chromium's (Tint) and may treat
special values differently.
"""

from __future__ import annotations

import pytest

from tests_e2e.engine_page import EnginePage
from tests_e2e.op_oracle import assert_op_table_matches, assert_special_values_match

pytestmark = pytest.mark.firefox


@pytest.fixture(scope="module")
def browser_kind() -> str:
    return "firefox"


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=webgpu"


def test_op_table_matches_numpy_on_webgpu_in_firefox(engine_page: EnginePage) -> None:
    assert engine_page.run("pib.get_backend()") == "webgpu"
    assert_op_table_matches(engine_page, rtol=1e-4)


def test_special_values_flow_as_in_numpy_on_webgpu_in_firefox(engine_page: EnginePage) -> None:
    assert_special_values_match(engine_page)
