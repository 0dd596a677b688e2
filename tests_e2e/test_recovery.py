"""Context and device loss during fit, recovered with nothing lost (issue 11, item 3), in real
browsers: losses injected with pib.debug.lose_device (WEBGL_lose_context, GPUDevice.destroy),
each run compared with the same run uninterrupted (py_in_browser/testing/recovery_runs.py)."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import pytest

from tests_e2e.engine_page import EnginePage

CASES = [
    pytest.param(("chromium", "webgl2"), id="chromium-webgl2"),
    pytest.param(("chromium", "webgpu"), id="chromium-webgpu"),
    pytest.param(("firefox", "webgl2"), id="firefox-webgl2", marks=pytest.mark.firefox),
]
EXACT = 1e-6  # recovered weights against the uninterrupted run's (the bound)
STEPS = 36  # recovery_runs.train: 3 epochs of 12 steps


@pytest.fixture(scope="module", params=CASES)
def case(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param


@pytest.fixture(scope="module")
def browser_kind(case: tuple[str, str]) -> str:
    return case[0]


@pytest.fixture(scope="module")
def page_query(case: tuple[str, str]) -> str:
    return f"?backend={case[1]}"


def train(page: EnginePage, backend: str, **options: Any) -> dict[str, Any]:
    args = ", ".join(f"{k}={v!r}" for k, v in options.items())
    return page.run(
        "from py_in_browser.testing import recovery_runs\n"
        f"await recovery_runs.train({backend!r}, {args})"
    )


@pytest.fixture(scope="module")
def uninterrupted(engine_page: EnginePage, case: tuple[str, str]) -> dict[str, Any]:
    return train(engine_page, case[1])


def assert_same_weights(got: dict[str, Any], expected: dict[str, Any], atol: float) -> None:
    assert len(got["weights"]) == len(expected["weights"])
    for g, e in zip(got["weights"], expected["weights"], strict=True):
        np.testing.assert_allclose(np.array(g), np.array(e), rtol=0, atol=atol)


def kinds(result: dict[str, Any]) -> list[str]:
    return [e["type"] for e in result["events"]]


def recovery_seconds(result: dict[str, Any]) -> list[float]:
    return [e["seconds"] for e in result["events"] if e["type"] == "context_restored"]


def test_one_loss_recovers_the_uninterrupted_weights(
    engine_page: EnginePage, case: tuple[str, str], uninterrupted: dict[str, Any]
) -> None:
    backend = case[1]
    got = train(engine_page, backend, at_steps=[7])
    print(f"{case}: one loss, recovery s {recovery_seconds(got)}, fit {got['seconds']:.2f} s")
    lost = "device_lost" if backend == "webgpu" else "context_lost"
    assert kinds(got) == [lost, "context_restored"], got["events"]
    # Noticed at step 8 (counted from 0) or, on webgpu, where device.lost has resolved.
    assert got["events"][0]["fit_step"] >= 8
    assert got["events"][1]["step"] >= got["events"][0]["fit_step"]
    assert got["events"][1]["backend"] == backend
    assert got["backend"] == backend
    assert_same_weights(got, uninterrupted, EXACT)
    assert got["losses"] == pytest.approx(uninterrupted["losses"], abs=EXACT)


def test_ten_losses_at_random_steps_some_during_replay_lose_nothing(
    engine_page: EnginePage, case: tuple[str, str], uninterrupted: dict[str, Any]
) -> None:
    backend = case[1]
    steps = sorted(np.random.Generator(np.random.PCG64(11)).choice(STEPS - 1, 7, replace=False))
    engine_page.run("from py_in_browser import recovery\nrecovery.DEMOTE_LOSSES = 100")
    try:
        got = train(engine_page, backend, at_steps=[int(s) for s in steps], during_replay=3, seed=5)
    finally:
        engine_page.run("from py_in_browser import recovery\nrecovery.DEMOTE_LOSSES = 3")
    seconds = recovery_seconds(got)
    print(
        f"{case}: {got['injected']} losses (after steps {steps} + 3 during replay); recovery s median "
        f"{statistics.median(seconds):.3f} max {max(seconds):.3f}; fit {got['seconds']:.2f} s"
    )
    lost = [e for e in got["events"] if e["type"] in ("context_lost", "device_lost")]
    # Ten injections, less any that fell on a device already lost (then not injected).
    assert len(lost) == got["injected"] >= 8, got["events"]
    assert kinds(got).count("context_restored") == len(lost), got["events"]
    assert got["backend"] == backend
    assert_same_weights(got, uninterrupted, EXACT)


def test_a_backend_lost_again_and_again_is_demoted(
    engine_page: EnginePage, case: tuple[str, str], uninterrupted: dict[str, Any]
) -> None:
    backend = case[1]
    got = train(engine_page, backend, at_steps=[3, 9, 15])
    switched = [e for e in got["events"] if e["type"] == "backend_switched"]
    print(f"{case}: demotion {switched}")
    assert kinds(got).count("context_restored") == 2
    assert len(switched) == 1 and switched[0]["previous"] == backend, got["events"]
    assert switched[0]["step"] >= 16 and "3 losses" in switched[0]["reason"]
    assert got["backend"] == switched[0]["backend"] != backend
    # Another backend computes the rest: the same training up to its rounding.
    assert_same_weights(got, uninterrupted, 1e-3)


def test_a_loss_inside_a_replayed_step_loses_nothing(
    engine_page: EnginePage, case: tuple[str, str], uninterrupted: dict[str, Any]
) -> None:
    """The loss is armed to happen after the 5th command of the next replayed step, inside the
    one JS call that replays it: nothing else loses the device in this run."""
    backend = case[1]
    got = train(engine_page, backend, in_replay={10: 5})
    print(f"{case}: loss inside a replay, recovery s {recovery_seconds(got)}")
    lost = "device_lost" if backend == "webgpu" else "context_lost"
    assert kinds(got) == [lost, "context_restored"], got["events"]
    assert got["backend"] == backend
    assert_same_weights(got, uninterrupted, EXACT)


def test_a_context_that_never_comes_back_moves_training_to_the_next_backend(
    engine_page: EnginePage, case: tuple[str, str], uninterrupted: dict[str, Any]
) -> None:
    """webgl2: restoreContext is never called; webgpu: the worker's adapter requests go
    unanswered (lose_device(restore=False)), so recovery's wait for a new device times out."""
    backend = case[1]
    following = {"webgl2": "cpu", "webgpu": "webgl2"}[backend]
    got = train(engine_page, backend, at_steps=[20], restore=False, timeout_s=0.5)
    switched = [e for e in got["events"] if e["type"] == "backend_switched"]
    print(f"{case}: timeout {switched}, fit {got['seconds']:.2f} s")
    lost = "device_lost" if backend == "webgpu" else "context_lost"
    assert kinds(got) == [lost, "backend_switched"], got["events"]
    assert switched[0]["backend"] == following
    assert switched[0]["reason"] == "the device did not come back within 0.5 s"
    assert got["backend"] == following and len(got["losses"]) == 3
    assert_same_weights(got, uninterrupted, 1e-3)
    # Recovery gave the lost device up: adapters are handed out again.
    assert engine_page.run(f"await pib.init({backend!r})") == backend


def test_an_init_after_a_loss_outside_fit_starts_afresh_and_releases_the_lost_backend(
    engine_page: EnginePage, case: tuple[str, str]
) -> None:
    """No fit recovers this loss (restore=False: on webgpu adapters are withheld): pib.init
    itself lets the lost backend go, its listener proxy too, and starts a working one."""
    got = engine_page.run(
        "import asyncio\nfrom py_in_browser import _js\n"
        f"await pib.init({case[1]!r})\n"
        "before = _js.live_proxies()\n"
        "await pib.debug.lose_device(restore=False)\n"
        "await asyncio.sleep(0.1)\n"
        "lost = pib.runtime.current_backend().is_lost()\n"
        f"name = await pib.init({case[1]!r})\n"
        "{'lost': lost, 'name': name, 'proxies': [before, _js.live_proxies()],"
        " 'sum': float(await pib.sum(pib.tensor([1.0, 2.0]) * 3.0).numpy())}"
    )
    assert got["lost"] and got["name"] == case[1], got
    assert got["proxies"][1] == got["proxies"][0], got
    assert got["sum"] == 9.0


def test_a_thousand_steps_with_a_loss_in_the_middle_leave_nothing_behind(
    engine_page: EnginePage, case: tuple[str, str]
) -> None:
    got = engine_page.run(
        "from py_in_browser.testing import recovery_runs\n"
        f"await recovery_runs.long_run({case[1]!r})"
    )
    print(f"{case}: 1008 steps, loss at 500: before {got['before']} after {got['after']}")
    assert [e["type"] for e in got["events"]][-1] == "context_restored", got["events"]
    assert got["after"] == got["before"]
