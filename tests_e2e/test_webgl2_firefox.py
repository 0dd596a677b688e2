"""The WebGL2 backend in Firefox ESR (under Xvfb): the op table and the XOR trajectory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests_e2e import webgl2_trajectories
from tests_e2e.engine_page import EnginePage
from tests_e2e.op_oracle import assert_op_table_matches, assert_special_values_match
from tests_e2e.test_webgl2 import F32_RTOL, TRAJECTORY_ATOL, check_blocks, check_epilogues
from tests_e2e.test_webgl2_hand_model_blocks import check_depthwise_blocks, check_residual_blocks

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


def test_special_values_flow_as_in_numpy_in_firefox(engine_page: EnginePage) -> None:
    assert_special_values_match(engine_page)


def test_xor_trajectory_matches_cpu_in_firefox(engine_page: EnginePage) -> None:
    engine_page.run(Path(webgl2_trajectories.__file__).read_text())
    expected = webgl2_trajectories.on_cpu("xor")
    got = engine_page.run("await trajectory('xor')")
    np.testing.assert_allclose(got["losses"], expected["losses"], rtol=0, atol=TRAJECTORY_ATOL)


def test_a_fused_program_may_leave_inputs_unread_in_firefox(engine_page: EnginePage) -> None:
    """Firefox's shader compiler drops the uniforms of an input the program never reads (ANGLE
    keeps them); the inputs after it must still get their textures and layouts."""
    got = engine_page.run(
        "a = pib.tensor(np.full((3, 5), 7.0, np.float32))\n"
        "b = pib.tensor(np.arange(15, dtype=np.float32).reshape(3, 5))\n"
        "await pib.fused(lambda a, b, s: b * s, a, b, pib.tensor(np.float32(2.0))).numpy()"
    )
    np.testing.assert_array_equal(got, np.arange(15, dtype=np.float32).reshape(3, 5) * 2.0)


def test_block_kernels_match_numpy_in_firefox(engine_page: EnginePage) -> None:
    check_blocks(engine_page)  # several render targets per draw, on another GL stack


def test_a_layers_bias_and_relu_run_inside_its_block_kernels_in_firefox(
    engine_page: EnginePage,
) -> None:
    check_epilogues(engine_page)  # the bias block and the relu interleave on another GL stack


def test_depthwise_layers_run_as_blocks_in_firefox(engine_page: EnginePage) -> None:
    check_depthwise_blocks(engine_page)  # the depthwise block programs on another GL stack


def test_a_residual_blocks_skip_joins_its_convolution_blocks_in_firefox(
    engine_page: EnginePage,
) -> None:
    check_residual_blocks(engine_page)  # the skip read inside the block draw, another GL stack
