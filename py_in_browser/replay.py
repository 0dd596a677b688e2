"""Recorded train steps for fit on backends that can replay them (Backend.supports_replay).

A step is recorded while it runs eagerly; once two consecutive recordings of the same batch
signature agree (same dispatches, same constants: no host-side randomness such as a dropout
mask), later steps with that signature are replayed by the backend with O(1) Python work: new
batch data written into the recorded input buffers, the variables' current buffers copied into
the recorded state buffers, the recorded dispatches run, and the variables pointed at the
recorded results. Anything the recording cannot reproduce runs eagerly instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .tensor import Tensor, Variable, _wrap, tensor

if TYPE_CHECKING:
    from .backends import Backend
    from .model import Sequential
    from .training import FitState

# Set False to run every step of fit eagerly (benchmarks compare recorded and eager steps).
ENABLED = True
MAX_SIGNATURES = 4  # batch shapes per fit with a recording (full batches and the last partial one)
MAX_ATTEMPTS = 4  # recordings per signature before giving up and staying eager


@dataclass
class _Entry:
    """Recordings of one batch signature: the last candidate, or the verified one."""

    variables: list[Variable]
    recording: Any = None
    held: list[Tensor] = field(default_factory=list)  # the variables' values after the step
    loss_spec: tuple[tuple[int, ...], str] = ((), "float32")
    verified: bool = False
    attempts: int = 0


class StepReplayer:
    """Runs fit's train steps through recordings; `train_step` is the eager step it records."""

    def __init__(self, model: Sequential, state: FitState, backend: Backend, train_step: Any):
        self.model, self.state, self.backend = model, state, backend
        self.train_step = train_step
        self.entries: dict[Any, _Entry] = {}
        self.replayed = 0

    def _variables(self) -> list[Variable]:
        assert self.model.optimizer is not None
        self.model.optimizer.build(self.model.trainable_weights)  # slots exist before recording
        seen: dict[int, Variable] = {}
        for v in (
            *self.model.weights,
            *self.model.optimizer.variables(),
            self.state.ok,
            *self.state.variables(),
        ):
            seen.setdefault(id(v), v)
        return list(seen.values())

    def _signature(self, xb: np.ndarray, yb: np.ndarray, variables: list[Variable]) -> Any:
        assert self.model.optimizer is not None
        # Host-side settings a callback may change between steps are part of the key.
        return (
            xb.shape,
            yb.shape,
            repr(sorted(self.model.optimizer.get_config().items())),
            tuple(id(v) for v in variables),
            tuple(id(v) for v in self.model.trainable_weights),
        )

    def step(self, xb: np.ndarray, yb: np.ndarray) -> Tensor:
        """One train step on host arrays; returns the batch loss tensor (the caller disposes it)."""
        variables = self._variables()
        key = self._signature(xb, yb, variables)
        entry = self.entries.get(key)
        if entry is not None and entry.verified:
            return self._replay(entry, xb, yb)
        if entry is None:
            if len(self.entries) >= MAX_SIGNATURES:
                return self.train_step(self.model, xb, yb, self.state)
            entry = self.entries[key] = _Entry(variables)
        if entry.attempts >= MAX_ATTEMPTS:
            if entry.recording is not None:
                self._release(entry)  # never verified: stay eager for this signature
            return self.train_step(self.model, xb, yb, self.state)
        return self._record(entry, xb, yb)

    def _record(self, entry: _Entry, xb: np.ndarray, yb: np.ndarray) -> Tensor:
        assert self.model.loss is not None
        backend = self.backend
        before = [v._handle() for v in entry.variables]
        backend.begin_recording()
        x = tensor(xb)
        y = tensor(yb, dtype=self.model.loss.target_dtype)
        try:
            loss = self.train_step(self.model, x, y, self.state)
            after = [v._handle() for v in entry.variables]
            recording = backend.finish_recording(
                [x._handle(), y._handle()], list(zip(before, after, strict=True)), [loss._handle()]
            )
        except BaseException:
            backend.abort_recording()
            raise
        finally:
            x.dispose()
            y.dispose()
        entry.attempts += 1
        entry.loss_spec = (loss.shape, loss.dtype)
        if entry.recording is not None:
            entry.verified = entry.recording.signature == recording.signature
            self._release(entry)
        entry.recording = recording
        entry.held = [Tensor(v._live_storage(), v.shape, v.dtype) for v in entry.variables]
        return loss

    def _replay(self, entry: _Entry, xb: np.ndarray, yb: np.ndarray) -> Tensor:
        assert self.model.loss is not None
        arrays = [np.asarray(xb, np.float32), np.asarray(yb, self.model.loss.target_dtype)]
        now = [v._handle() for v in entry.variables]
        (loss_handle,) = self.backend.replay(entry.recording, arrays, now)
        for variable, value in zip(entry.variables, entry.held, strict=True):
            variable.assign(value)
        # The one host-side effect of train_step (training._accumulate) the replay must repeat.
        self.state.seen += len(yb)
        self.replayed += 1
        return _wrap(self.backend, loss_handle, *entry.loss_spec)

    def _release(self, entry: _Entry) -> None:
        for t in entry.held:
            t.dispose()
        self.backend.drop_recording(entry.recording)
        entry.recording, entry.held = None, []

    def close(self) -> None:
        """Frees every recording and the buffers only they kept alive."""
        for entry in self.entries.values():
            if entry.recording is not None:
                self._release(entry)
        self.entries.clear()
