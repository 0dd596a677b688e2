"""The WebGL2 float16 path (emulated with limits={"float32_render": False}) in real Chromium:
RGBA16F/R16F textures, and weights kept from drowning in rounding by compensated updates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from py_in_browser.nn.layers import DROPOUT_BITS
from py_in_browser.testing.op_cases import random_uniform_reference
from tests_e2e import webgl2_trajectories
from tests_e2e.engine_page import EnginePage, PythonError
from tests_e2e.op_oracle import assert_op_table_matches

# Every stored value is rounded to half (relative 2^-11 = 4.9e-4) while shaders compute in float32;
# a case chains a few roundings (inputs, intermediates, output): measured worst 7.2e-4 (mul,
# matmul, sqrt), so the documented bound is 2e-3, about four half ulps.
F16_RTOL = 2e-3
DRIFT_STEPS = 200


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=webgl2"


def init(page: EnginePage, **limits: Any) -> dict[str, Any]:
    caps: dict[str, Any] = page.run(
        f"await pib.init(backend='webgl2', limits={limits!r})\npib.capabilities()"
    )
    return caps


@pytest.fixture(scope="module")
def half_page(engine_page: EnginePage) -> EnginePage:
    engine_page.run(Path(webgl2_trajectories.__file__).read_text())
    caps = init(engine_page, float32_render=False)
    assert caps["float32_render"] is False
    assert caps["texture_formats"] == "RGBA16F/R16F"
    assert caps["compensated_updates"] is True
    return engine_page


def test_op_table_on_float16_within_the_documented_bound(half_page: EnginePage) -> None:
    worst = assert_op_table_matches(half_page, rtol=F16_RTOL)
    print("webgl2 f16 worst relative error per case:", worst)


def test_special_values_survive_compensated_storage(half_page: EnginePage) -> None:
    """The low part of an infinity is -0, not inf - inf (which read back as NaN); beyond half's
    range is +-Inf. (Drawing into a half target here, SwiftShader turns +-Inf into NaN, so the
    op table's special values run on float32 storage only.)"""
    got = half_page.run(
        "x = pib.tensor(np.array([np.inf, -np.inf, np.nan, 1e5, -0.0, 1.0 + 2**-12], np.float32))\n"
        "(await x.numpy()).tolist()"
    )
    assert got[:4] == ["inf", "-inf", "nan", "inf"]
    assert got[4] == 0.0 and np.signbit(got[4])
    assert got[5] == 1.0 + 2**-12  # kept exactly by the low part


def test_xor_and_the_small_cnn_converge_on_float16(half_page: EnginePage) -> None:
    """XOR (SGD) and the CNN with default Adam: its second moment (1 - beta_2) * g^2 underflows
    half's range, so the backend reports a min_epsilon and Adam raises its 1e-7 to it (a
    runtime event says so) instead of dividing by ~0."""
    caps = half_page.run("pib.capabilities()")
    assert caps["min_epsilon"] == 2.0**-7
    assert caps["float16"]["smallest_normal"] == 2.0**-14
    xor = half_page.run(
        "from py_in_browser.testing import workloads\nawait workloads.run_xor(epochs=500)"
    )
    assert xor["losses"][-1] < 0.1 < xor["losses"][0]
    assert xor["accuracy"][-1] == 1.0
    cnn = half_page.run(
        "import warnings\n"
        "events_before = len(pib.runtime_events())\n"
        "model, x, y, batch = setup('cnn')\n"
        "model.compile(optimizer=pib.optimizers.Adam(0.01),\n"
        "              loss='sparse_categorical_crossentropy')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    h = await model.fit(x, y, epochs=15, batch_size=batch, shuffle=False)\n"
        "{'loss': h.history['loss'], 'events': pib.runtime_events()[events_before:],\n"
        " 'warnings': [str(w.message) for w in caught],\n"
        " 'config_epsilon': model.optimizer.get_config()['epsilon']}"
    )
    print("f16 xor final loss", xor["losses"][-1], "cnn losses", cnn["loss"])
    assert np.all(np.isfinite(cnn["loss"]))
    assert cnn["loss"][-1] < 0.6 * cnn["loss"][0]
    clamped = [e for e in cnn["events"] if e["type"] == "epsilon_clamped"]
    assert len(clamped) == 1, cnn["events"]
    assert clamped[0]["requested"] == 1e-7 and clamped[0]["used"] == 2.0**-7
    assert any("epsilon 1e-07" in w for w in cnn["warnings"]), cnn["warnings"]
    assert cnn["config_epsilon"] == 1e-7  # the configured value is what checkpoints keep


FUSED_STEPS = 100
FUSED_INCREMENTS = f"""
w = pib.tensor(np.ones((8, 16), np.float32))
lr = pib.tensor(np.float32(1e-4))
for _ in range({FUSED_STEPS}):
    w = pib.fused(lambda w, lr: w + lr, w, lr)
await w.numpy()
"""


def test_fused_updates_keep_what_float16_rounding_loses(half_page: EnginePage) -> None:
    """1e-4 is below half an ulp of 1.0 in float16 (2^-11): added 100 times by a fused program
    it is lost without compensation, and kept (to float32's accuracy) with it."""
    init(half_page, float32_render=False, compensated_updates=False)
    plain = np.asarray(half_page.run(FUSED_INCREMENTS))
    init(half_page, float32_render=False)
    compensated = np.asarray(half_page.run(FUSED_INCREMENTS))
    np.testing.assert_array_equal(plain, 1.0)
    np.testing.assert_allclose(compensated, 1.0 + FUSED_STEPS * 1e-4, rtol=0, atol=1e-5)


def _drift(page: EnginePage, reference: list[Any], **limits: Any) -> float:
    init(page, float32_render=False, **limits)
    got = page.run(f"await trajectory('xor', {DRIFT_STEPS})")
    return max(
        float(np.max(np.abs(np.asarray(w) - np.asarray(r))))
        for w, r in zip(got["weights"], reference, strict=True)
    )


def test_compensated_updates_reduce_weight_drift(half_page: EnginePage) -> None:
    """XOR weights after 200 float16 steps against the float32 run: compensated (Kahan) updates
    drift measurably less than plain float16 updates."""
    reference = webgl2_trajectories.on_cpu("xor", DRIFT_STEPS)["weights"]
    plain = _drift(half_page, reference, compensated_updates=False)
    compensated = _drift(half_page, reference)
    print(
        f"f16 weight drift after {DRIFT_STEPS} XOR steps: plain {plain:.2e}, compensated {compensated:.2e}"
    )
    assert compensated < 0.5 * plain


HALF_DRAWS = """
with pib.tidy():
    counter = pib.tensor(COUNTER, dtype=COUNTER_DTYPE)
    u = pib.random_uniform((7, 301), seed=5, stream=2, counter=counter, bits=BITS)
    layer = pib.layers.Dropout(0.3, seed=4)
    mask = layer(pib.ones((16, 300)), training=True) if BITS >= DROPOUT_BITS else u
    result = [(await u.numpy()).ravel().tolist(), (await mask.numpy()).ravel().tolist()]
[*result, list(layer.seed)]
"""


def _half_draws(page: EnginePage, counter: int, bits: int, dtype: str = "float32") -> list[Any]:
    values = f"{counter}, {dtype!r}, {bits}, {DROPOUT_BITS}"
    code = f"COUNTER, COUNTER_DTYPE, BITS, DROPOUT_BITS = {values}\n{HALF_DRAWS}"
    result: list[Any] = page.run(code)
    return result


def _bits(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def test_random_draws_and_dropout_masks_stay_exact_on_float16(half_page: EnginePage) -> None:
    """Draws are stored as half plus compensation: 22-bit draws (Dropout's) and counters past
    half's 2^11 come back bit-identical; more bits than the storage holds are refused."""
    init(half_page, float32_render=False)
    draw, mask, (_, stream) = _half_draws(half_page, 4321, DROPOUT_BITS)
    want = random_uniform_reference(4321, (7, 301), 5, 2, DROPOUT_BITS)
    np.testing.assert_array_equal(_bits(draw), _bits(want.ravel()))
    # An int32 counter has no compensation texture: the draw still gets one.
    draw, _, _ = _half_draws(half_page, 1000, DROPOUT_BITS, "int32")
    want = random_uniform_reference(1000, (7, 301), 5, 2, DROPOUT_BITS)
    np.testing.assert_array_equal(_bits(draw), _bits(want.ravel()))
    drawn = random_uniform_reference(0, (16, 300), 4, stream, DROPOUT_BITS).ravel()
    np.testing.assert_array_equal(_bits(mask), _bits(np.where(drawn < 0.3, 0.0, 1 / 0.7)))
    with pytest.raises(PythonError, match="float16 storage holds 22 bits"):
        half_page.run("pib.random_uniform((4,), bits=24)")
    # Without compensation a half holds 11 bits (and integers to 2^11): Dropout is refused.
    init(half_page, float32_render=False, compensated_updates=False)
    draw, _, _ = _half_draws(half_page, 1000, 11)
    want = random_uniform_reference(1000, (7, 301), 5, 2, 11)
    np.testing.assert_array_equal(_bits(draw), _bits(want.ravel()))
    with pytest.raises(PythonError, match="float16 storage holds 11 bits"):
        half_page.run("pib.layers.Dropout(0.5)(pib.ones((2, 2)), training=True)")
    init(half_page, float32_render=False)
