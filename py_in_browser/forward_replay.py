"""Recorded forward passes for predict, on backends that replay them (Backend.replays_inference).

The train step's protocol (replay.py) applied to inference: a batch's forward pass is recorded
while it runs eagerly; once two recordings of the same input signature agree, later batches with
that signature are replayed in one backend call (the cpu backend: one call into its SIMD module)
instead of Python per op. The weights are the recording's state: each replay reads the current
ones (copied in where a variable has moved to another buffer since), and changes none. An input
tensor is state too: its values are copied into a private copy the recording reads.

A `head` extends the recorded pass past the model's output (top_k's ranking on the device): the
replay then yields the head's tensors, all in the same one backend call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import functional as F
from . import replay
from .backends import Backend
from .runtime import keep, tidy
from .tensor import Tensor, Variable, _wrap, tensor
from .trainable import TrainableModel


@dataclass
class _Entry:
    recording: Any = None
    out_specs: list[tuple[tuple[int, ...], str]] = field(default_factory=list)
    input_dtype: str = "float32"
    verified: bool = False
    attempts: int = 0


# What a recorded pass may add after the model: its output in, the tensors to return out.
Head = Callable[[Tensor], tuple[Tensor, ...]]


def forward_pass(model: TrainableModel, backend: Backend, head: Head | None = None) -> Any:
    """predict's pass over one batch (a tensor or an array), model(x, training=False) in a tidy
    scope, with the backend's forward_only hint set while its ops run (see Backend); with a
    `head`, the head's tensors of that output instead of the output."""

    def forward(xb: Tensor | np.ndarray) -> Tensor | tuple[Tensor, ...]:
        backend.forward_only = True
        try:
            out: Tensor = model(xb if isinstance(xb, Tensor) else tensor(xb), training=False)
        finally:
            backend.forward_only = False
        return out if head is None else head(out)

    return tidy(forward)


class ForwardReplayer(replay.ModelReplayer):
    """Runs `model(x, training=False)` per batch (and its `head`, if any), through recordings
    once they are verified."""

    def __init__(self, model: TrainableModel, backend: Backend, head: Head | None = None) -> None:
        super().__init__(model, backend)  # the model's Trainer owns this
        self.entries: dict[Any, _Entry] = {}
        self.forward = forward_pass(model, backend, head)

    def __call__(self, xb: Tensor | np.ndarray) -> Tensor:
        """The model's outputs for one batch, a tensor of the caller's own (no head)."""
        (out,) = self.run(xb)
        return out

    def run(self, xb: Tensor | np.ndarray) -> list[Tensor]:
        """The pass's tensors for one batch (the output, or the head's), the caller's own."""
        variables = self.model_variables()
        on_device = isinstance(xb, Tensor)
        key = (on_device, tuple(xb.shape), str(xb.dtype), tuple(id(v) for v in variables))
        entry = self.entries.get(key)
        if entry is not None and entry.verified:
            return self._replay(entry, xb, variables)
        if entry is None:
            if len(self.entries) >= replay.MAX_SIGNATURES:
                return self._eager(xb)
            entry = self.entries[key] = _Entry()
        if entry.attempts >= replay.MAX_ATTEMPTS:
            entry.recording = None  # never verified: stays eager for this signature
            return self._eager(xb)
        return self._record(entry, xb, variables)

    def _eager(self, xb: Tensor | np.ndarray) -> list[Tensor]:
        return as_list(self.forward(xb if isinstance(xb, Tensor) else tensor(xb)))

    def _record(
        self, entry: _Entry, xb: Tensor | np.ndarray, variables: list[Variable]
    ) -> list[Tensor]:
        backend = self.backend
        before = [v._handle() for v in variables]
        on_device = isinstance(xb, Tensor)
        if on_device:
            x = keep(F.mul(xb, 1))  # a private copy the recording reads as state
        backend.begin_recording()
        if not on_device:
            x = tensor(xb)
        try:
            outs = as_list(self.forward(x))
            pairs = [(h, h) for h in before]
            if on_device:
                pairs.append((x._handle(), x._handle()))
            inputs = [] if on_device else [x._handle()]
            recording = backend.finish_recording(inputs, pairs, [o._handle() for o in outs])
        except BaseException:
            backend.abort_recording()
            raise
        finally:
            x.dispose()  # the recording keeps its buffers alive as long as it needs them
        entry.attempts += 1
        entry.out_specs, entry.input_dtype = [(o.shape, o.dtype) for o in outs], x.dtype
        if entry.recording is not None:
            entry.verified = entry.recording.signature == recording.signature
            backend.drop_recording(entry.recording)
        entry.recording = recording
        # The recorded output buffers are overwritten by every replay: the caller gets copies.
        results = [F.mul(o, 1) for o in outs]
        for o in outs:
            o.dispose()
        return results

    def _replay(
        self, entry: _Entry, xb: Tensor | np.ndarray, variables: list[Variable]
    ) -> list[Tensor]:
        now = [v._handle() for v in variables]
        if isinstance(xb, Tensor):
            arrays: list[np.ndarray] = []
            now.append(xb._handle())
        else:
            arrays = [np.asarray(xb, entry.input_dtype)]
        outs = self.backend.replay(entry.recording, arrays, now)
        self.replayed += 1
        return [
            _wrap(self.backend, out, *spec) for out, spec in zip(outs, entry.out_specs, strict=True)
        ]

    def close(self) -> None:
        """Frees every recording and the buffers only they kept alive."""
        for entry in self.entries.values():
            if entry.recording is not None:
                self.backend.drop_recording(entry.recording)
        self.entries.clear()


def as_list(result: Tensor | tuple[Tensor, ...]) -> list[Tensor]:
    """A pass's result (its output, or its head's tensors) as a list."""
    return [result] if isinstance(result, Tensor) else list(result)
