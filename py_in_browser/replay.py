"""Recorded train steps for fit on backends that can replay them (Backend.supports_replay).

A step is recorded while it runs eagerly; once two consecutive recordings of the same batch
signature agree (same dispatches, same constants: no host-side randomness such as a dropout
mask), later steps with that signature are replayed by the backend with O(1) Python work: new
batch data written into the recorded input buffers, the variables' current buffers copied into
the recorded state buffers, the recorded dispatches run, and the variables pointed at the
recorded results. Anything the recording cannot reproduce runs eagerly instead.

The batch comes either as host arrays (fit; written into the recorded input buffers) or as
tensors already on the device (Sequential.train_on_batch). Tensors are passed like state: the
recording reads a private copy made once when it is recorded, and each replay copies the given
tensors into it on the device (no readback, no upload; the caller's tensors are never written).

One StepReplayer lives on a model across fit and train_on_batch calls (in its Trainer's
DeviceStep), so recordings survive from one call to the next; compile, set_weights and a backend
change drop it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import functional as F
from .backends import Backend
from .fit_state import FitState
from .runtime import keep
from .tensor import Tensor, Variable, _wrap, tensor
from .trainable import TrainableModel

# Set False to run every step of fit eagerly (benchmarks compare recorded and eager steps).
ENABLED = True
MAX_SIGNATURES = 4  # batch shapes per model with a recording (full and last partial batches)
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
    on_device: bool = False  # the batch comes as tensors, copied in like state


class ModelReplayer:
    """What the replayers share: their model, held weakly, and a count of replayed calls."""

    def __init__(self, model: TrainableModel, backend: Backend) -> None:
        # A weak reference: the model owns its replayer, and a cycle would keep a dropped model's
        # GPU buffers alive until the cyclic garbage collector happens to run.
        self._model = weakref.ref(model)
        self.backend = backend
        self.replayed = 0

    @property
    def model(self) -> TrainableModel:
        model = self._model()
        assert model is not None, "the model of this replayer was garbage collected"
        return model

    def model_variables(self, *more: Variable) -> list[Variable]:
        """The model's weights and layer state (draw counters) and `more`, each once: the state
        a recording reads and writes."""
        seen: dict[int, Variable] = {}
        for v in (
            *self.model.weights,
            *(v for layer in self.model.layers for v in layer.state_variables()),
            *more,
        ):
            seen.setdefault(id(v), v)
        return list(seen.values())


class StepReplayer(ModelReplayer):
    """Runs fit's train steps through recordings; `train_step` is the eager step it records."""

    def __init__(self, model: TrainableModel, state: FitState, backend: Backend, train_step: Any):
        super().__init__(model, backend)
        self.state = state
        self.train_step = train_step
        self.entries: dict[Any, _Entry] = {}

    def _variables(self) -> list[Variable]:
        assert self.model.optimizer is not None
        self.model.optimizer.build(self.model.trainable_weights)  # slots exist before recording
        return self.model_variables(
            *self.model.optimizer.variables(), self.state.ok, *self.state.variables()
        )

    def _signature(self, xb: Any, yb: Any, variables: list[Variable]) -> Any:
        assert self.model.optimizer is not None
        # Host-side settings a callback may change between steps are part of the key.
        return (
            isinstance(xb, Tensor),
            xb.shape,
            yb.shape,
            repr(sorted(self.model.optimizer.get_config().items())),
            tuple(id(v) for v in variables),
            tuple(id(v) for v in self.model.trainable_weights),
        )

    def step(self, xb: Any, yb: Any, own_loss: bool = False) -> Tensor:
        """One train step on a batch, both host arrays or both tensors (of the loss's target dtype
        for y); returns the batch loss tensor (the caller disposes it). Unless `own_loss`, the
        loss of a recorded step may be overwritten by the next replay: read it before then."""
        variables = self._variables()
        key = self._signature(xb, yb, variables)
        entry = self.entries.get(key)
        if entry is not None and entry.verified:
            return self._replay(entry, xb, yb)
        if entry is None:
            if len(self.entries) >= MAX_SIGNATURES:
                return self.train_step(self.model, xb, yb, self.state)
            entry = self.entries[key] = _Entry(variables, on_device=isinstance(xb, Tensor))
        if entry.attempts >= MAX_ATTEMPTS:
            if entry.recording is not None:
                self._release(entry)  # never verified: stay eager for this signature
            return self.train_step(self.model, xb, yb, self.state)
        return self._record(entry, xb, yb, own_loss)

    def _record(self, entry: _Entry, xb: Any, yb: Any, own_loss: bool) -> Tensor:
        assert self.model.loss is not None
        backend = self.backend
        before = [v._handle() for v in entry.variables]
        if entry.on_device:
            # Private dense copies the recording reads as state: a replay copies the caller's
            # tensors into them, so the caller's own buffers are never overwritten.
            x, y = keep(F.mul(xb, 1)), keep(F.mul(yb, 1))
        backend.begin_recording()
        if not entry.on_device:
            x = tensor(xb)
            y = tensor(yb, dtype=self.model.loss.target_dtype)
        try:
            loss = self.train_step(self.model, x, y, self.state)
            after = [v._handle() for v in entry.variables]
            pairs = list(zip(before, after, strict=True))
            if entry.on_device:
                pairs += [(x._handle(), x._handle()), (y._handle(), y._handle())]
                inputs = []
            else:
                inputs = [x._handle(), y._handle()]
            recording = backend.finish_recording(inputs, pairs, [loss._handle()])
        except BaseException:
            backend.abort_recording()
            raise
        finally:
            x.dispose()  # the recording keeps its buffers alive as long as it needs them
            y.dispose()
        entry.attempts += 1
        entry.loss_spec = (loss.shape, loss.dtype)
        if entry.recording is not None:
            entry.verified = entry.recording.signature == recording.signature
            self._release(entry)
        entry.recording = recording
        entry.held = [keep(Tensor(v._live_storage(), v.shape, v.dtype)) for v in entry.variables]
        if not own_loss:
            return loss
        # The loss buffer is the recording's output, which every replay overwrites: a caller that
        # may read it after later steps (train_on_batch) gets its own copy. fit reads it first.
        result = F.mul(loss, 1.0)
        loss.dispose()
        return result

    def _replay(self, entry: _Entry, xb: Any, yb: Any) -> Tensor:
        assert self.model.loss is not None
        now = [v._handle() for v in entry.variables]
        if entry.on_device:
            arrays: list[np.ndarray] = []
            now += [xb._handle(), yb._handle()]
        else:
            arrays = [np.asarray(xb, np.float32), np.asarray(yb, self.model.loss.target_dtype)]
        (loss_handle,) = self.backend.replay(entry.recording, arrays, now)
        for variable, value in zip(entry.variables, entry.held, strict=True):
            variable.assign(value)
        # The one host-side effect of train_step (training._accumulate) the replay must repeat.
        self.state.seen += yb.shape[0]
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
