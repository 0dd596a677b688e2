"""The WebGL2 backend in Firefox ESR (under Xvfb): the op table and the XOR trajectory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests_e2e import webgl2_trajectories
from tests_e2e.engine_page import EnginePage
from tests_e2e.op_oracle import assert_op_table_matches
from tests_e2e.test_webgl2 import F32_RTOL, TRAJECTORY_ATOL

pytestmark = pytest.mark.firefox


@pytest.fixture(scope="module")
def browser_kind() -> str:
    return "firefox"


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=webgl2"


def test_op_table_matches_numpy_in_firefox(engine_page: EnginePage) -> None:
    assert engine_page.run("pib.get_backend()") == "webgl2"
    assert_op_table_matches(engine_page, rtol=F32_RTOL)


def test_xor_trajectory_matches_cpu_in_firefox(engine_page: EnginePage) -> None:
    engine_page.run(Path(webgl2_trajectories.__file__).read_text())
    expected = webgl2_trajectories.on_cpu("xor")
    got = engine_page.run("await trajectory('xor')")
    np.testing.assert_allclose(got["losses"], expected["losses"], rtol=0, atol=TRAJECTORY_ATOL)
