"""Choosing a backend by measurement: start every candidate, self-test it, time a probe step.

A GPU can report capabilities it does not honour, and a software GPU (SwiftShader, llvmpipe) is
often slower than numpy on the same CPU, so preference order alone picks badly. Each candidate
is started and runs Backend.self_test (a convolution, a reduction and an optimizer update
against numpy), all candidates at once; those that pass then run chained ProbeSteps one
backend at a time within TIMING_BUDGET_S in all, and the fastest is kept. The others are closed at once (browsers cap live GPU contexts). The report
says why each candidate was not chosen; pib.capabilities() shows it under "selection".
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

from . import BACKENDS, Backend, ProbeStep

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
    """What init learned about one backend: status is "chosen", "slower", "rejected"."""

    name: str
    status: str = "rejected"
    reason: str = ""
    start_ms: float | None = None
    self_test_ms: float | None = None
    self_test_error: float | None = None
    step_ms: float | None = None
    software_renderer: str | None = None


async def _examine(name: str, limits: dict[str, Any] | None) -> tuple[Backend | None, Candidate]:
    """Starts and self-tests `name`; a backend that fails either is closed and returned as None."""
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
    """The backend to keep and the report: {"mode", "chosen", "ms", "candidates": [Candidate
    dicts]}.

    forced: `names` is the one backend asked for; it is self-tested but not timed, and a
    failure raises BackendSelectionError naming the reason.
    """
    began = time.perf_counter()
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
    return best, {
        "mode": "forced" if forced else "measured",
        "chosen": winner.name,
        "ms": (time.perf_counter() - began) * 1000.0,  # what choosing cost init
        "candidates": [asdict(c) for c in report],
    }
