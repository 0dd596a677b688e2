"""Recorded forward passes for predict, on backends that replay them (Backend.replays_inference).

The train step's protocol (replay.py) applied to inference: a batch's forward pass is recorded
while it runs eagerly; once two recordings of the same input signature agree, later batches with
that signature are replayed in one backend call (the cpu backend: one call into its SIMD module)
instead of Python per op. The weights are the recording's state: each replay reads the current
ones (copied in where a variable has moved to another buffer since), and changes none. An input
tensor is state too: its values are copied into a private copy the recording reads.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    out_spec: tuple[tuple[int, ...], str] = ((), "float32")
    input_dtype: str = "float32"
    verified: bool = False
    attempts: int = 0


def forward_pass(model: TrainableModel, backend: Backend) -> Any:
    """predict's pass over one batch (a tensor or an array), model(x, training=False) in a tidy
    scope, with the backend's forward_only hint set while its ops run (see Backend)."""

    def forward(xb: Tensor | np.ndarray) -> Tensor:
        backend.forward_only = True
        try:
            out: Tensor = model(xb if isinstance(xb, Tensor) else tensor(xb), training=False)
        finally:
            backend.forward_only = False
        return out

    return tidy(forward)


class ForwardReplayer(replay.ModelReplayer):
    """Runs `model(x, training=False)` per batch, through recordings once they are verified."""

    def __init__(self, model: TrainableModel, backend: Backend) -> None:
        super().__init__(model, backend)  # the model's Trainer owns this
        self.entries: dict[Any, _Entry] = {}
        self.forward = forward_pass(model, backend)

    def __call__(self, xb: Tensor | np.ndarray) -> Tensor:
        """The model's outputs for one batch, a tensor of the caller's own."""
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

    def _eager(self, xb: Tensor | np.ndarray) -> Tensor:
        result: Tensor = self.forward(xb if isinstance(xb, Tensor) else tensor(xb))
        return result

    def _record(self, entry: _Entry, xb: Tensor | np.ndarray, variables: list[Variable]) -> Tensor:
        backend = self.backend
        before = [v._handle() for v in variables]
        on_device = isinstance(xb, Tensor)
        if on_device:
            x = keep(F.mul(xb, 1))  # a private copy the recording reads as state
        backend.begin_recording()
        if not on_device:
            x = tensor(xb)
        try:
            out = self.forward(x)
            pairs = [(h, h) for h in before]
            if on_device:
                pairs.append((x._handle(), x._handle()))
            inputs = [] if on_device else [x._handle()]
            recording = backend.finish_recording(inputs, pairs, [out._handle()])
        except BaseException:
            backend.abort_recording()
            raise
        finally:
            x.dispose()  # the recording keeps its buffers alive as long as it needs them
        entry.attempts += 1
        entry.out_spec, entry.input_dtype = (out.shape, out.dtype), x.dtype
        if entry.recording is not None:
            entry.verified = entry.recording.signature == recording.signature
            backend.drop_recording(entry.recording)
        entry.recording = recording
        # The recorded output buffer is overwritten by every replay: the caller gets a copy.
        result = F.mul(out, 1)
        out.dispose()
        return result

    def _replay(self, entry: _Entry, xb: Tensor | np.ndarray, variables: list[Variable]) -> Tensor:
        now = [v._handle() for v in variables]
        if isinstance(xb, Tensor):
            arrays: list[np.ndarray] = []
            now.append(xb._handle())
        else:
            arrays = [np.asarray(xb, entry.input_dtype)]
        (out,) = self.backend.replay(entry.recording, arrays, now)
        self.replayed += 1
        return _wrap(self.backend, out, *entry.out_spec)

    def close(self) -> None:
        """Frees every recording and the buffers only they kept alive."""
        for entry in self.entries.values():
            if entry.recording is not None:
                self.backend.drop_recording(entry.recording)
        self.entries.clear()
