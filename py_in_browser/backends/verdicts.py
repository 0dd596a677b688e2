"""What backend selection learned on earlier visits, kept by the engine's worker between them.

A GPU backend's self-test compiles and runs its kernels: 150-250 ms of a ~1 s second visit on a
software GPU. Measuring every candidate (pib.init() without a name) starts each backend and
times probe steps: up to 1.5 s more. Both answers depend only on the browser, the GPU and its
driver, and the engine's build. The worker keeps them in IndexedDB with a fingerprint of exactly
those (web/js/backend-verdicts.js) and hands them back at the next boot
(load). Then a backend that passed its self-test is not tested again, and a measured choice among
the same candidates is reused without starting the others.

Nothing is kept unless the worker loaded the store, so CPython and pages without persistent
storage always self-test and measure. A device that comes back after a loss is always
self-tested again (recovery.py): the loss is a reason to doubt the verdict.
"""

from __future__ import annotations

import json
from typing import Any

# passed: backend name -> [self-test ms, worst relative error] of its passed self-test;
# choices: selection reports of measured choices, each with the candidate names it chose among.
_store: dict[str, Any] = {"enabled": False, "passed": {}, "choices": []}


def load(text: str) -> None:
    """Enables the store with what the worker kept (JSON from dump(); "" when nothing was kept
    for this browser, GPU and build)."""
    kept = json.loads(text) if text else {}
    _store.update(
        enabled=True, passed=dict(kept.get("passed", {})), choices=list(kept.get("choices", []))
    )


def dump() -> str:
    """The store as JSON for the worker to keep."""
    return json.dumps({"passed": _store["passed"], "choices": _store["choices"]})


def disable() -> None:
    """Forgets the store and stops keeping (tests)."""
    _store.update(enabled=False, passed={}, choices=[])


def applies(limits: dict[str, Any] | None) -> bool:
    """Whether an init with `limits` may use and add verdicts: not with limits, which emulate
    another device or make a self-test fail on purpose."""
    return bool(_store["enabled"]) and not limits


def passed_before(name: str) -> tuple[float, float] | None:
    """(ms, worst relative error) of the self-test backend `name` passed on an earlier visit, or
    None."""
    figures = _store["passed"].get(name)
    return None if figures is None else (float(figures[0]), float(figures[1]))


def record_pass(name: str, ms: float, max_error: float) -> None:
    if _store["enabled"]:
        _store["passed"][name] = [ms, max_error]


def earlier_choice(names: list[str]) -> dict[str, Any] | None:
    """The selection report of a measured choice among exactly `names`, if one was made before."""
    return next((report for report in _store["choices"] if report["names"] == names), None)


def record_choice(names: list[str], report: dict[str, Any]) -> None:
    """Keeps a measured choice's report (replacing one among the same names)."""
    if _store["enabled"]:
        others = [kept for kept in _store["choices"] if kept["names"] != names]
        _store["choices"] = [*others, {"names": names, **report}]
