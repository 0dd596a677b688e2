"""WebGL context loss: one runtime event when the browser drops the context, then a clear error
(fit catches it and recovers: recovery.py)."""

from __future__ import annotations

from typing import NoReturn

from ... import events


class WebGLContextLostError(RuntimeError):
    """The browser dropped the WebGL context; tensors on it are gone."""


class ContextLoss:
    """Records the loss once (however many calls notice it) and raises for every later use."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.recorded = False

    def record(self, flushes: int) -> None:
        """bridge.js calls this (through the backend) when the browser reports webglcontextlost."""
        if not self.recorded:
            self.recorded = True
            events.record_event("context_lost", flushes, backend=self.backend)

    def fail(self, flushes: int) -> NoReturn:
        self.record(flushes)
        raise WebGLContextLostError(
            "webgl2: the WebGL context was lost; tensors on it are gone (the engine's calls "
            "recover by themselves and rebuild models; or re-run pib.init)"
        )
