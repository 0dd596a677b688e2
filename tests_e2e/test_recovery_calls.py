"""Recovery everywhere (issue 27): every engine call with a real device loss before it and
inside it, on webgl2 and webgpu in Chromium and webgl2 in Firefox, one page each and all cases
in one runPython (py_in_browser/testing/recovery_calls.py). Each call must give what the same
call gives without a loss; recovery times are printed, not asserted."""

from __future__ import annotations

from typing import Any

import pytest

from tests_e2e.engine_page import EnginePage

CASES = [
    pytest.param(("chromium", "webgl2"), id="chromium-webgl2"),
    pytest.param(("chromium", "webgpu"), id="chromium-webgpu"),
    pytest.param(("firefox", "webgl2"), id="firefox-webgl2", marks=pytest.mark.firefox),
]
EXACT = 1e-6  # predictions and weights against the run without a loss (the bound)


@pytest.fixture(scope="module", params=CASES)
def case(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param


@pytest.fixture(scope="module")
def browser_kind(case: tuple[str, str]) -> str:
    return case[0]


@pytest.fixture(scope="module")
def page_query(case: tuple[str, str]) -> str:
    return f"?backend={case[1]}"


@pytest.fixture(scope="module")
def every_call(engine_page: EnginePage, case: tuple[str, str]) -> dict[str, Any]:
    result: dict[str, Any] = engine_page.run(
        "from py_in_browser.testing import recovery_calls\n"
        f"await recovery_calls.every_call({case[1]!r})"
    )
    timed = engine_page.run(
        f"from py_in_browser.testing import recovery_calls\nrecovery_calls.timed({result['seconds']!r})"
    )
    print(f"{case}: {timed}; each: {[round(t, 3) for t in result['seconds']]}")
    print(f"{case}: seconds per case {result['case_seconds']}")
    return result


CALLS = [
    "predict",
    "evaluate",
    "train_on_batch",
    "fit",
    "get_weights",
    "set_weights",
    "save",
    "save_checkpoint",
    "export_tfjs",
    "top_k",
    "classify_bitmap",
    "graph_model",
    "pretrained_predict",
    "init",
]


@pytest.mark.parametrize("call", CALLS)
def test_a_loss_before_or_inside_a_call_gives_the_same_result(
    every_call: dict[str, Any], case: tuple[str, str], call: str
) -> None:
    got = every_call["cases"][call]
    print(f"{case} {call}: {got}")
    assert "error" not in got, got["error"]
    assert got["fired"], f"{call}: no loss happened inside the call"
    assert got["backend"] == case[1], got
    assert got["before"] <= EXACT and got["during"] <= EXACT, got
    if call == "init":
        assert got["new_tensor"] == 6.0, got


def test_a_hand_made_tensor_fails_clearly_and_alone(
    every_call: dict[str, Any], case: tuple[str, str]
) -> None:
    got = every_call["cases"]["eager_tensor"]
    assert "error" not in got, got["error"]
    assert len(got["errors"]) == 2, got
    for error in got["errors"]:
        assert "tensor of shape (2, 3)" in error and "create it again" in error, got
    assert got["later"] == 6.0 and got["backend"] == case[1]


def test_a_device_that_never_comes_back_is_replaced(
    every_call: dict[str, Any], case: tuple[str, str]
) -> None:
    """webgl2: the lost context is released and a new one made on a new canvas; webgpu: the
    model moves to webgl2 (another backend rounds differently)."""
    got = every_call["cases"]["never_back"]
    assert "error" not in got, got["error"]
    assert got["released"] and got["backend"] == "webgl2", got
    assert got["events"][-1] == "backend_switched", got
    assert got["difference"] <= (EXACT if case[1] == "webgl2" else 1e-4), got


def test_host_copy_cost(engine_page: EnginePage, case: tuple[str, str]) -> None:
    """What the host copy at the end of a fit reads and costs (printed): the app's model, W2."""
    cost = engine_page.run(
        "from py_in_browser.testing import recovery_calls\n"
        f"await recovery_calls.host_copy_cost({case[1]!r})"
    )
    for name, figures in cost.items():
        print(f"{case} host copy {name}: {figures['bytes']} bytes, ms per fit {figures['ms']}")
        assert figures["bytes"] > 0


def test_results_read_after_a_loss_are_computed_again(
    every_call: dict[str, Any], case: tuple[str, str]
) -> None:
    """predict hands its result back without waiting for the device (lineage.py): a loss before
    predict, inside it, after it before ops are made from its result, or after those ops before
    they are read, still gives every read the values of the run without a loss."""
    got = every_call["cases"]["results_read_later"]
    print(f"{case} results read later: {got}")
    assert "error" not in got, got["error"]
    assert got["fired"] and got["backend"] == case[1], got
    for when in ("before", "during", "before_ops", "before_reads"):
        assert got[when] <= EXACT, (when, got)


def test_a_revived_backend_compiles_nothing_ahead_of_the_next_call(
    engine_page: EnginePage, case: tuple[str, str]
) -> None:
    """The call that noticed a loss runs right after the recovery: the kernels a first training
    step would need are then left to the idle warm-up, not compiled ahead of that call (they
    were, and a predict after a loss took 1.1 s on Chromium webgl2, 0.2-0.3 s without them)."""
    got = engine_page.run(
        "from py_in_browser.testing import recovery_calls\n"
        f"await recovery_calls.compiled_ahead_after_loss({case[1]!r})"
    )
    print(f"{case}: {got}")
    assert got["fresh"] and got["backend"] == case[1], got
    assert got["ahead"] <= (0 if case[1] == "webgl2" else 1), got
