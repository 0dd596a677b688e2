"""pib.init chooses the backend by measurement in Chromium and Firefox: the ranking is reported,
SwiftShader is recognised as a software renderer, and a failing self-test falls back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests_e2e.conftest import BOOT_TIMEOUT_MS
from tests_e2e.engine_page import EnginePage, PythonError

BROWSERS = ["chromium", pytest.param("firefox", marks=pytest.mark.firefox)]


@pytest.fixture(scope="module", params=BROWSERS)
def browser_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def selection(engine_page: EnginePage) -> dict[str, Any]:
    report: dict[str, Any] = engine_page.run('pib.capabilities()["selection"]')
    print(f"\nselection: {json.dumps(report, indent=1)}")  # the figures the report quotes
    return report


def test_the_backend_is_chosen_by_measurement_and_the_ranking_reported(
    engine_page: EnginePage, browser_kind: str
) -> None:
    report = selection(engine_page)
    assert report["mode"] == "measured" and report["remembered"] is False  # a fresh profile
    candidates = {c["name"]: c for c in report["candidates"]}
    assert set(candidates) == set(engine_page.run("pib.available_backends()"))
    assert "cpu" in candidates and "webgl2" in candidates
    chosen = candidates[report["chosen"]]
    assert chosen["status"] == "chosen" and report["chosen"] == engine_page.run("pib.get_backend()")
    timed = [c for c in candidates.values() if c["status"] != "rejected"]
    assert len(timed) >= 2, report  # cpu and at least one GPU backend computed correctly
    assert chosen["step_ms"] == min(c["step_ms"] for c in timed)
    for c in timed:
        assert c["self_test_error"] < 1e-4
        if c is not chosen:
            assert c["status"] == "slower" and c["reason"].startswith("probe step")
    # This machine has no GPU: every GPU candidate is recognised as a software renderer
    # (Chromium: SwiftShader for both; Firefox: llvmpipe for WebGL2, a fallback WebGPU adapter).
    for name in ("webgpu", "webgl2"):
        if name in candidates:
            assert candidates[name]["software_renderer"], candidates[name]
    expected = {"chromium": "SwiftShader", "firefox": "llvmpipe"}[browser_kind]
    assert candidates["webgl2"]["software_renderer"] == expected
    assert report["ms"] > 0
    header = engine_page.page.locator("#status").inner_text()
    assert f"running on {report['chosen']}" in header
    if chosen["software_renderer"]:
        assert "software GPU" in header


@pytest.mark.parametrize("failing", ["webgpu", "webgl2"])
def test_a_failing_self_test_falls_back_to_the_next_candidate(
    engine_page: EnginePage, browser_kind: str, failing: str
) -> None:
    if failing not in engine_page.run("pib.available_backends()"):
        pytest.fail(f"{failing} is not available in {browser_kind}")
    chosen = engine_page.run(f"await pib.init(limits={{'fail_self_test': ['{failing}']}})")
    assert chosen != failing
    rejected = {c["name"]: c for c in selection(engine_page)["candidates"]}[failing]
    assert rejected["status"] == "rejected"
    assert rejected["reason"].startswith("self-test failed: conv2d is off by")
    with pytest.raises(PythonError, match=f"backend '{failing}' self-test failed"):
        engine_page.run(f"await pib.init('{failing}', limits={{'fail_self_test': ['{failing}']}})")


def test_a_reload_reuses_the_measured_choice_and_passed_self_tests(
    engine_page: EnginePage, browser_kind: str
) -> None:
    """The worker keeps the verdicts (backend-verdicts.js): the next visit in the profile starts
    only the backend measured fastest, and a named backend that passed skips its self-test."""
    measured = engine_page.run("await pib.init()")
    first = selection(engine_page)
    engine_page.page.reload()
    engine_page.page.wait_for_function(
        "() => window.pib !== undefined && window.pib.backend !== null", timeout=BOOT_TIMEOUT_MS
    )
    again = selection(engine_page)
    assert again["remembered"] is True and again["chosen"] == measured == first["chosen"]
    assert engine_page.run("pib.get_backend()") == measured
    was = {c["name"]: c for c in first["candidates"]}
    for c in again["candidates"]:
        assert c["remembered"] is True
        assert (c["status"], c["step_ms"]) == (was[c["name"]]["status"], was[c["name"]]["step_ms"])
    named = engine_page.run(f"await pib.init('{measured}')")
    forced = selection(engine_page)
    assert (named, forced["mode"], forced["remembered"]) == (measured, "forced", True)
    assert forced["candidates"][0]["self_test_error"] < 1e-4
    # Limits (an emulated device, the failure hook) always test afresh.
    engine_page.run(f"await pib.init('{measured}', limits={{'max_texture_size': 4096}})")
    assert selection(engine_page)["remembered"] is False
