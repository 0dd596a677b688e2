"""pib.init chooses by measurement: self-tests reject wrong backends, timing ranks the rest.

CPython has two real backends to choose from: cpu and the WGSL kernels on wgpu-py (lavapipe),
registered here as an extra candidate the way the browser registers webgpu.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import runtime
from py_in_browser.backends import BACKENDS, ProbeStep, register_backend, selection, verdicts
from py_in_browser.backends.cpu import CpuBackend
from tests_unit.wgpu_native import NAME, WgpuNativeBackend, request_device


@pytest.fixture
def native_candidate() -> Iterator[None]:
    """Registers the native WGSL backend as the most preferred candidate for one test."""
    device = request_device()

    def factory(limits: dict[str, Any] | None) -> WgpuNativeBackend:
        backend = WgpuNativeBackend(device)
        backend.limits = dict(limits or {})
        return backend

    previous = runtime._state.copy()
    register_backend(NAME, factory, priority=10)
    try:
        yield
    finally:
        del BACKENDS[NAME]
        runtime._state.update(previous)


@pytest.fixture
def kept_verdicts() -> Iterator[None]:
    """Verdicts kept as the engine's worker keeps them (nothing kept yet), for one test."""
    previous = runtime._state.copy()
    verdicts.load("")
    try:
        yield
    finally:
        verdicts.disable()
        runtime._state.update(previous)


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["candidates"]}


def test_the_probe_step_oracle_matches_the_cpu_kernels_within_1e_4() -> None:
    result = asyncio.run(CpuBackend().self_test())
    assert result.passed, result.detail
    assert result.max_error < 1e-5
    assert set(ProbeStep().oracle()) == {"conv2d", "reduce_sum", "sgd_momentum"}


def test_the_test_hook_makes_the_real_comparison_fail() -> None:
    result = asyncio.run(CpuBackend({"fail_self_test": ["cpu"]}).self_test())
    assert not result.passed
    assert "conv2d is off by" in result.detail and "tolerance 0.0001" in result.detail


def test_a_forced_backend_that_fails_its_self_test_is_a_clear_error() -> None:
    previous = runtime._state.copy()
    try:
        with pytest.raises(selection.BackendSelectionError, match="'cpu' self-test failed"):
            asyncio.run(pib.init("cpu", limits={"fail_self_test": ["cpu"]}))
    finally:
        runtime._state.update(previous)


def test_a_failing_candidate_falls_back_to_the_next(native_candidate: None) -> None:
    assert pib.available_backends()[0] == NAME
    assert asyncio.run(pib.init(limits={"fail_self_test": [NAME]})) == "cpu"
    report = pib.capabilities()["selection"]
    assert report["mode"] == "measured" and report["chosen"] == "cpu"
    rejected = by_name(report)[NAME]
    assert rejected["status"] == "rejected"
    assert rejected["reason"].startswith("self-test failed: conv2d is off by")
    assert by_name(report)["cpu"]["reason"] == "the only backend that passed its self-test"
    # The chosen backend computes.
    assert np.allclose(asyncio.run((pib.ones((2,)) * 3).numpy()), 3.0)


def test_passing_candidates_are_ranked_by_their_timed_step(native_candidate: None) -> None:
    chosen = asyncio.run(pib.init())
    report = pib.capabilities()["selection"]
    candidates = by_name(report)
    assert {c["status"] for c in candidates.values()} == {"chosen", "slower"}
    winner, loser = sorted(candidates.values(), key=lambda c: c["step_ms"])
    assert chosen == winner["name"] == report["chosen"]
    assert winner["reason"].startswith("fastest probe step")
    assert loser["reason"].startswith(f"probe step {loser['step_ms']:.2f} ms vs")
    for c in candidates.values():
        assert c["self_test_error"] < 1e-4 and c["self_test_ms"] > 0


def test_a_candidate_that_cannot_start_is_reported() -> None:
    class Broken(CpuBackend):
        async def start(self) -> None:
            raise RuntimeError("no adapter")

    previous = runtime._state.copy()
    register_backend("broken", Broken, priority=10)
    try:
        assert asyncio.run(pib.init()) == "cpu"
        rejected = by_name(pib.capabilities()["selection"])["broken"]
        assert rejected == {
            **rejected,
            "status": "rejected",
            "reason": "could not start: no adapter",
        }
    finally:
        del BACKENDS["broken"]
        runtime._state.update(previous)


def test_the_report_says_why_each_backend_that_was_no_candidate_is_unavailable(
    native_candidate: None, kept_verdicts: None
) -> None:
    register_backend(
        "absent", CpuBackend, priority=20, available=lambda: False, why_unavailable=lambda: "no X"
    )
    try:
        # CPython has neither browser GPU API: the words gpu_probe_reason gives outside a browser.
        cpython = "runs only in a browser's worker (this is CPython)"
        expected = {"absent": "no X", "webgpu": cpython, "webgl2": cpython}
        asyncio.run(pib.init())
        measured = pib.capabilities()["selection"]
        assert measured["unavailable"] == expected
        assert [c["name"] for c in measured["candidates"]] == [NAME, "cpu"]
        verdicts.load(verdicts.dump())  # the next visit reuses the choice and still says why
        asyncio.run(pib.init())
        reused = pib.capabilities()["selection"]
        assert reused["remembered"] is True and reused["unavailable"] == expected
        asyncio.run(pib.init("cpu"))
        assert pib.capabilities()["selection"]["unavailable"] == expected
    finally:
        del BACKENDS["absent"]


def test_a_backend_that_passed_on_an_earlier_visit_is_not_self_tested_again(
    kept_verdicts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(pib.init("cpu"))
    first = by_name(pib.capabilities()["selection"])["cpu"]
    assert first["remembered"] is False and first["self_test_ms"] > 0
    verdicts.load(verdicts.dump())  # the next visit

    async def not_again(self: CpuBackend) -> None:
        raise AssertionError("self-tested again")

    monkeypatch.setattr(CpuBackend, "self_test", not_again)
    asyncio.run(pib.init("cpu"))
    report = pib.capabilities()["selection"]
    again = by_name(report)["cpu"]
    assert report["remembered"] is True and again["remembered"] is True
    assert (again["self_test_ms"], again["self_test_error"]) == (
        first["self_test_ms"],
        first["self_test_error"],
    )
    # Limits (an emulated device, the failure hook) always self-test.
    with pytest.raises(selection.BackendSelectionError, match="self-tested again"):
        asyncio.run(pib.init("cpu", limits={"max_texture_size": 512}))


def test_a_measured_choice_is_reused_without_starting_the_other_candidates(
    native_candidate: None, kept_verdicts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = asyncio.run(pib.init())
    measured = pib.capabilities()["selection"]
    assert measured["remembered"] is False
    verdicts.load(verdicts.dump())  # the next visit
    for name in BACKENDS:
        if name != chosen:

            def not_started(limits: dict[str, Any] | None, name: str = name) -> Any:
                raise AssertionError(f"{name} was started")

            monkeypatch.setitem(
                BACKENDS, name, dataclasses.replace(BACKENDS[name], factory=not_started)
            )
    assert asyncio.run(pib.init()) == chosen
    reused = pib.capabilities()["selection"]
    assert reused["remembered"] is True and reused["chosen"] == chosen
    assert [c["name"] for c in reused["candidates"]] == [c["name"] for c in measured["candidates"]]
    for was, now in zip(measured["candidates"], reused["candidates"], strict=True):
        assert now["remembered"] is True
        assert (now["status"], now["reason"], now["step_ms"]) == (
            was["status"],
            was["reason"],
            was["step_ms"],
        )
    assert np.allclose(asyncio.run((pib.ones((2,)) * 3).numpy()), 3.0)


def test_without_a_store_nothing_is_remembered() -> None:
    previous = runtime._state.copy()
    try:
        for _ in range(2):
            asyncio.run(pib.init("cpu"))
            assert pib.capabilities()["selection"]["remembered"] is False
        assert verdicts.dump() == '{"passed": {}, "choices": []}'
    finally:
        runtime._state.update(previous)
