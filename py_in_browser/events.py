"""Runtime events: what happened to the runtime (losses, checkpoints, clamps), oldest first.

It sits below every other module of the engine, the backends included, so a backend can record a
context loss without importing the modules that import it.
"""

from __future__ import annotations

import time
from typing import Any

_events: list[dict[str, Any]] = []


def record_event(kind: str, step: int, **extra: Any) -> None:
    """Appends an event of type `kind` at training step `step` (with any extra fields)."""
    _events.append({"type": kind, "step": step, "time": time.time(), **extra})


def runtime_events() -> list[dict[str, Any]]:
    """What happened to the runtime, oldest first: dicts with at least type, step and time."""
    return list(_events)
