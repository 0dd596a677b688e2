"""Runtime events: what happened to the runtime (losses, checkpoints, clamps), oldest first.

It sits below every other module of the engine, the backends included, so a backend can record a
context loss without importing the modules that import it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

_events: list[dict[str, Any]] = []
# Called with each new event: how a module above hears of a loss the backends record
# (resilience.py starts recovering).
_listeners: list[Callable[[dict[str, Any]], None]] = []


def record_event(kind: str, step: int, **extra: Any) -> None:
    """Appends an event of type `kind` at training step `step` (with any extra fields)."""
    event = {"type": kind, "step": step, "time": time.time(), **extra}
    _events.append(event)
    for listener in _listeners:
        listener(event)


def add_listener(listener: Callable[[dict[str, Any]], None]) -> None:
    """`listener` is called with every event recorded from now on (it must not raise)."""
    _listeners.append(listener)


def runtime_events() -> list[dict[str, Any]]:
    """What happened to the runtime, oldest first: dicts with at least type, step and time.

    Types: "checkpoint" (save_checkpoint), "epsilon_clamped" (an optimizer's epsilon raised for
    float16 storage), "device_lost" (webgpu), "context_lost" (webgl2), "context_restored" and
    "backend_switched" (a loss recovered: by fit, recovery.py, with its training step, or
    by any other engine call, resilience.py, with source "engine" and step 0).

    Example:
        >>> model = pib.Sequential([pib.layers.Dense(1, input_shape=(1,))])
        >>> blob = await model.save_checkpoint()
        >>> pib.runtime_events()[-1]["type"]
        'checkpoint'
    """
    return list(_events)
