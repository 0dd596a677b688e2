"""Measures one workload on one backend pair: ours, TF.js and jax-js alternate block by block, warm-up
apart."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from bench.page import BenchPage, CallFailed, CallTimeout
from bench.stats import BUDGET, FAILED, TIMEOUT, UNAVAILABLE, SideResult
from bench.workloads import SYNC_EVERY_STEP, Workload

BLOCK_STEPS = 10  # steps per call: the unit of alternation, and the block of "synced every 10"
CALL_GRACE_S = 90.0  # beyond a side's budget before a call counts as hung
WARMUP_SHARE = 0.25  # of a side's budget, after which no further warm-up step starts


@dataclass
class Settings:
    steps: int
    warmup: int
    budget_scale: float = 1.0


@dataclass
class SideState:
    """One side while a workload runs: its results per sync mode and how much budget it used."""

    results: dict[int, SideResult]
    active: bool = True
    warmup_s: float = 0.0
    spent_s: dict[int, float] = field(default_factory=dict)
    step_estimate_s: float | None = None

    def stop(self, status: str, detail: str, modes: list[int]) -> None:
        for mode in modes:
            self.results[mode].fail(status, detail)
        self.active = False


def measure_name(workload: Workload, sync_every: int) -> str:
    if workload.kind == "infer":
        return "predict+argmax+read back, ms"
    if workload.kind == "graph":
        return "graph model to embedding+read back, ms per frame"
    what = "matmul" if workload.kind == "matmul" else "train step"
    synced = "synced every step" if sync_every == SYNC_EVERY_STEP else f"synced every {sync_every}"
    return f"{what}, {synced}"


async def measure_workload(
    page: BenchPage,
    workload: Workload,
    unavailable: dict[str, str | None],
    settings: Settings,
) -> tuple[dict[str, dict[int, SideResult]], dict[str, Any]]:
    """Results per side and sync mode, plus one profiled step per side and how each side steps.
    The sides are the keys of `unavailable` (window.bench's names: ours, theirs, jaxjs), each with
    why it cannot run or None."""
    modes = workload.sync_modes
    budget_s = workload.budget_s * settings.budget_scale
    sides = list(unavailable)
    states = {side: SideState({mode: SideResult() for mode in modes}) for side in sides}
    extras: dict[str, Any] = {"how": {}, "profiles": {}}
    for side, reason in unavailable.items():
        if reason is not None:
            states[side].stop(UNAVAILABLE, reason, modes)

    async def call(side: str, method: str, args: dict[str, Any], timeout_s: float) -> Any:
        """A side's call; a failure or a hang ends that side's part in this workload."""
        try:
            return await page.call(side, method, args, timeout_s)
        except CallFailed as exc:
            states[side].stop(FAILED, f"{method}: {exc}", modes)
        except CallTimeout as exc:
            states[side].stop(TIMEOUT, f"{method}: {exc}", modes)
            await recover_after_timeout(page, states, modes)
        return None

    for side in sides:
        if states[side].active:
            setup = await call(side, "setup", {"spec": workload.spec()}, 180)
            if setup is not None:
                extras["how"][side] = setup.get("how")

    # Warm-up (first-run compilation, caches) is timed only to estimate block times. It stops
    # after the step that spends WARMUP_SHARE of the budget: a side at ~50 s a step (jax-js's W4
    # on a software WebGL) then still measures a step instead of spending its budget warming up.
    for side in sides:
        state = states[side]
        if state.active and settings.warmup > 0:
            started = time.monotonic()
            warmup_ms = budget_s * 1000 * WARMUP_SHARE
            args = {"steps": settings.warmup, "sync_every": 1, "budget_ms": warmup_ms}
            answer = await call(side, "run", args, budget_s + CALL_GRACE_S)
            if answer is not None:
                state.warmup_s = time.monotonic() - started
                state.step_estimate_s = state.warmup_s / max(len(answer["samples"]), 1)

    for mode in modes:
        for side in sides:
            states[side].spent_s[mode] = 0.0
        for done in range(0, settings.steps, BLOCK_STEPS):
            block = min(BLOCK_STEPS, settings.steps - done)
            for side in sides:  # alternation: ours' block, TF.js's, jax-js's, then ours' next
                await run_block(call, states[side], side, mode, block, budget_s, len(modes))

    for side in sides:
        if states[side].active:
            extras["profiles"][side] = await call(side, "profile", {}, budget_s + CALL_GRACE_S)
        if states[side].active:
            await call(side, "teardown", {}, 60)
    return {side: states[side].results for side in sides}, extras


async def run_block(
    call: Any, state: SideState, side: str, mode: int, block: int, budget_s: float, n_modes: int
) -> None:
    """One block of steps for one side, unless the side's share of the budget is spent."""
    result = state.results[mode]
    if not state.active or result.status == BUDGET:
        return
    # Each sync mode gets an equal share of what warm-up left of the budget.
    share_s = max(budget_s - state.warmup_s, 0.0) / n_modes
    left_s = share_s - state.spent_s[mode]
    estimate_s = (state.step_estimate_s or 0.0) * block
    if left_s <= 0 or (mode != SYNC_EVERY_STEP and estimate_s > left_s):
        measured = len(result.samples_ms) * (mode if mode != SYNC_EVERY_STEP else 1)
        result.fail(BUDGET, f"{measured} steps fit in {share_s:.0f} s")
        return
    started = time.monotonic()
    args = {"steps": block, "sync_every": mode, "budget_ms": left_s * 1000}
    answer = await call(side, "run", args, left_s + estimate_s + CALL_GRACE_S)
    state.spent_s[mode] += time.monotonic() - started
    if answer is None:
        return
    samples = [float(ms) for ms in answer["samples"]]
    result.samples_ms.extend(samples)
    if samples and mode == SYNC_EVERY_STEP:
        state.step_estimate_s = statistics.median(samples) / 1000
    if len(samples) * (1 if mode == SYNC_EVERY_STEP else mode) < block:
        measured = len(result.samples_ms) * (1 if mode == SYNC_EVERY_STEP else mode)
        result.fail(BUDGET, f"{measured} steps fit in {share_s:.0f} s")


async def recover_after_timeout(
    page: BenchPage, states: dict[str, SideState], modes: list[int]
) -> None:
    """A hung side leaves the page unusable: reload it; the other side's unfinished modes end too."""
    for state in states.values():
        if state.active:
            state.stop(
                FAILED, "interrupted: the page was reloaded after the other side hung", modes
            )
    await page.open()
