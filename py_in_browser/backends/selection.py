"""Choosing a backend by measurement: start every candidate, self-test it, time a probe step.

A GPU can report capabilities it does not honour, and a software GPU (SwiftShader, llvmpipe) is
often slower than numpy on the same CPU, so preference order alone picks badly. Each candidate
is started and runs Backend.self_test (a convolution, a reduction and an optimizer update
against numpy), all candidates at once; those that pass then run chained ProbeSteps one
backend at a time within TIMING_BUDGET_S in all, and the fastest is kept. The others are closed
at once (browsers cap live GPU contexts). The report says why each candidate was not chosen,
and why each backend that was no candidate is unavailable here ("unavailable");
pib.capabilities() shows it under "selection". Where the engine's worker keeps verdicts between
visits (verdicts.py), a backend that passed before skips its self-test and a measured choice among
the same candidates is reused; the report then says "remembered".
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

from . import BACKENDS, Backend, ProbeStep, registered_backends, verdicts

# Wall time all timed probe steps of one init may take together, shared by the candidates.
TIMING_BUDGET_S = 1.5
# Probe steps chained per sample before one readback (as fit queues steps between reads).
STEPS_PER_SAMPLE = 3
# Samples per candidate at most; the median of those taken is its step time.
MAX_SAMPLES = 5


class BackendSelectionError(RuntimeError):
    """A forced backend could not start or failed its self-test, or no candidate passed; the
    message names the backend and the reason.

    Example:
        >>> try:
        ...     await pib.init("cpu", limits={"fail_self_test": ["cpu"]})
        ... except pib.backends.selection.BackendSelectionError as err:
        ...     print(str(err)[:33])
        backend 'cpu' self-test failed: c
        >>> await pib.init("cpu")
        'cpu'
    """


@dataclass
class Candidate:
    """What init learned about one backend: status is "chosen", "slower", "rejected";
    remembered: its self-test (and step time) are an earlier visit's, not measured now."""

    name: str
    status: str = "rejected"
    reason: str = ""
    start_ms: float | None = None
    self_test_ms: float | None = None
    self_test_error: float | None = None
    step_ms: float | None = None
    software_renderer: str | None = None
    remembered: bool = False


async def _examine(name: str, limits: dict[str, Any] | None) -> tuple[Backend | None, Candidate]:
    """Starts and self-tests `name` (unless it passed on an earlier visit); a backend that fails
    either is closed and returned as None."""
    found = Candidate(name)
    backend = BACKENDS[name].factory(limits)
    began = time.perf_counter()
    try:
        await backend.start()
    except Exception as exc:  # a GPU that cannot start is a reason to try the next backend
        found.reason = f"could not start: {exc}"
        return None, found
    found.start_ms = (time.perf_counter() - began) * 1000.0
    found.software_renderer = backend.software_renderer()
    earlier = verdicts.passed_before(name) if verdicts.applies(limits) else None
    if earlier is not None:
        found.self_test_ms, found.self_test_error = earlier
        found.remembered = True
        return backend, found
    try:
        result = await backend.self_test()
    except Exception as exc:
        found.reason = f"self-test raised {type(exc).__name__}: {exc}"
        backend.close()
        return None, found
    found.self_test_ms, found.self_test_error = result.ms, result.max_error
    if not result.passed:
        found.reason = f"self-test failed: {result.detail}"
        backend.close()
        return None, found
    if verdicts.applies(limits):
        verdicts.record_pass(name, result.ms, result.max_error)
    return backend, found


async def _step_ms(backend: Backend, budget_s: float) -> float:
    """Median wall ms of one probe step: samples of STEPS_PER_SAMPLE chained steps and one
    readback, taken until the budget is spent (at least one sample)."""
    probe = ProbeStep()
    deadline = time.perf_counter() + budget_s
    samples: list[float] = []
    while not samples or (len(samples) < MAX_SAMPLES and time.perf_counter() < deadline):
        began = time.perf_counter()
        handles = probe.run(backend, STEPS_PER_SAMPLE)
        await backend.download(handles["sgd_momentum"])
        samples.append((time.perf_counter() - began) * 1000.0 / STEPS_PER_SAMPLE)
        for handle in handles.values():
            backend.free(handle)
    return sorted(samples)[len(samples) // 2]


def _software_note(candidate: Candidate) -> str:
    renderer = candidate.software_renderer
    return f" (software renderer: {renderer})" if renderer else ""


async def choose(
    names: list[str], limits: dict[str, Any] | None, forced: bool
) -> tuple[Backend, dict[str, Any]]:
    """The backend to keep and the report: {"mode", "chosen", "ms", "remembered",
    "candidates": [Candidate dicts], "unavailable": {name: reason}}; remembered: some verdict is
    an earlier visit's; unavailable: see unavailable().

    forced: `names` is the one backend asked for; it is self-tested but not timed, and a
    failure raises BackendSelectionError naming the reason.
    """
    began = time.perf_counter()
    earlier = verdicts.earlier_choice(names) if verdicts.applies(limits) and not forced else None
    if earlier is not None:
        kept = await _reuse(earlier, limits, began)
        if kept is not None:
            return kept
    chosen, report = await _measure(names, limits, forced, began)
    if verdicts.applies(limits) and not forced:
        verdicts.record_choice(names, report)
    return chosen, report


async def _reuse(
    earlier: dict[str, Any], limits: dict[str, Any] | None, began: float
) -> tuple[Backend, dict[str, Any]] | None:
    """Starts only the backend an earlier visit's measurement chose and reports that choice;
    None when it no longer starts (the caller measures afresh)."""
    backend, found = await _examine(earlier["chosen"], limits)
    if backend is None:
        return None
    started = {"start_ms": found.start_ms, "software_renderer": found.software_renderer}
    candidates = [
        kept | {"remembered": True} | (started if kept["name"] == found.name else {})
        for kept in earlier["candidates"]
    ]
    ms = (time.perf_counter() - began) * 1000.0
    return backend, _report(candidates, "measured", found.name, ms)


def unavailable() -> dict[str, str]:
    """Why each registered backend that is not available here was no candidate, by name
    (in the browser, the worker's GPU probe's words: "webgl2" where its OffscreenCanvas gives no
    WebGL2 context, "webgpu" where it has no navigator.gpu); empty where all are available."""
    return {
        name: BACKENDS[name].why_unavailable()
        for name in registered_backends()
        if not BACKENDS[name].available()
    }


def _report(candidates: list[dict[str, Any]], mode: str, chosen: str, ms: float) -> dict[str, Any]:
    return {
        "mode": mode,
        "chosen": chosen,
        "ms": ms,  # what choosing cost init
        "remembered": any(c["remembered"] for c in candidates),
        "candidates": candidates,
        "unavailable": unavailable(),
    }


async def _measure(
    names: list[str], limits: dict[str, Any] | None, forced: bool, began: float
) -> tuple[Backend, dict[str, Any]]:
    """Starts and self-tests every candidate, then times those that pass (choose's own path)."""
    # Concurrently: a GPU compiles the self-test's kernels off this thread while others run.
    examined = await asyncio.gather(*(_examine(name, limits) for name in names))
    report = [found for _, found in examined]
    passed = [(backend, found) for backend, found in examined if backend is not None]
    if forced and not passed:
        raise BackendSelectionError(f"backend {names[0]!r} {report[0].reason}")
    if not passed:
        reasons = "; ".join(f"{c.name}: {c.reason}" for c in report)
        raise BackendSelectionError(f"no backend passed its self-test ({reasons})")
    if len(passed) > 1:
        budget = TIMING_BUDGET_S / len(passed)
        for backend, found in passed:
            found.step_ms = await _step_ms(backend, budget)
        passed.sort(key=lambda pair: pair[1].step_ms or 0.0)
    best, winner = passed[0]
    winner.status = "chosen"
    winner.reason = (
        "forced" if forced else "the only backend that passed its self-test"
    ) + _software_note(winner)
    if len(passed) > 1:
        winner.reason = f"fastest probe step ({winner.step_ms:.2f} ms){_software_note(winner)}"
    for backend, found in passed[1:]:
        found.status = "slower"
        found.reason = (
            f"probe step {found.step_ms:.2f} ms vs {winner.step_ms:.2f} ms on {winner.name}"
            + _software_note(found)
        )
        backend.close()
    ms = (time.perf_counter() - began) * 1000.0
    mode = "forced" if forced else "measured"
    return best, _report([asdict(c) for c in report], mode, winner.name, ms)
