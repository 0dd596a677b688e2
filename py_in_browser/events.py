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
    """What happened to the runtime, oldest first: dicts with at least type, step and time.

    Types: "checkpoint" (save_checkpoint), "epsilon_clamped" (an optimizer's epsilon raised for
    float16 storage), "device_lost" (webgpu), "context_lost" (webgl2), "context_restored" and
    "backend_switched" (fit recovered from a loss: recovery.py).

    Example:
        >>> model = pib.Sequential([pib.layers.Dense(1, input_shape=(1,))])
        >>> blob = await model.save_checkpoint()
        >>> pib.runtime_events()[-1]["type"]
        'checkpoint'
    """
    return list(_events)
