"""The WebGL2 backend in real Chromium (ANGLE on SwiftShader): ops, layouts and training."""

from __future__ import annotations

import pytest

from tests_e2e.engine_page import EnginePage
from tests_e2e.op_oracle import assert_op_table_matches

# float32 textures, highp shaders: what is left is the order of float32 sums.
F32_RTOL = 1e-4


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=webgl2"


def test_capabilities_are_probed(engine_page: EnginePage) -> None:
    caps = engine_page.run("pib.capabilities()")
    assert caps["backend"] == "webgl2"
    assert caps["float32_render"] is True
    assert caps["highp"] is True
    assert caps["max_texture_size"] >= 4096


def test_op_table_matches_numpy_on_float32(engine_page: EnginePage) -> None:
    worst = assert_op_table_matches(engine_page, rtol=F32_RTOL)
    print("webgl2 f32 worst relative error per case:", worst)
