"""The fit / evaluate / predict loops: host-side batching, device-side loss and metric sums.

Per batch, fit runs one train step inside a tidy scope, then yields to the event loop
(`await asyncio.sleep(0)`) so other tasks (other runPython calls in the browser) interleave.
It never awaits inside a tidy scope, because scopes are shared by every task of the interpreter.

Non-finite losses: each step computes `ok = ok and isfinite(loss)` on the device and gates every
weight, slot, moving-statistic and step-counter update with it. Once a step's loss is NaN/Inf no
later update takes effect, so the weights stay exactly those before the first bad step, without a
readback per step. The flag is read with the epoch's loss (or per batch when a callback asks for
batch logs) and fit raises NonFiniteLossError.

Each Sequential delegates fit, evaluate, predict and train_on_batch to its one Trainer, which owns
everything training keeps between calls: the data cursor checkpoints save, a pending resume, the
accumulators of the fit in progress, and per backend the DeviceStep that fit and train_on_batch
share (the device-side FitState and, on backends that replay, the StepReplayer whose recordings
carry over from call to call). checkpoint.py reads and restores the cursor through the Trainer.
train_on_batch starts each call with the ok flag set, so a batch with a NaN/Inf loss leaves the
weights as they were and later batches train again.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from . import functional as F
from . import fusion, permits, replay
from .autograd import GradientTape
from .backends import Backend
from .batching import max_batch_size
from .callbacks import Callback, History, call_hook
from .fit_state import FitState
from .forward_replay import ForwardReplayer, Head, as_list, forward_pass
from .limits import DEFAULT_LIMITS, ModelSummary, TrainingConfig, check_cap, validate_training
from .nn import layers as layer_lib
from .runtime import current_backend, keep, tidy
from .tensor import Tensor, Variable, tensor
from .trainable import TrainableModel


class NonFiniteLossError(FloatingPointError):
    """Training hit a NaN or Inf loss; the model keeps the weights from before that step.

    fit raises it at the end of the epoch (or batch, when a callback reads batch losses) in
    which a step's loss was not finite; from that step on nothing was updated (weights,
    optimizer slots and step counter, BatchNormalization statistics).

    Example:
        >>> dense = pib.layers.Dense(1, kernel_initializer="ones", input_shape=(1,))
        >>> model = pib.Sequential([dense])
        >>> model.compile(optimizer=pib.optimizers.SGD(1e30), loss="mse")
        >>> try:
        ...     await model.fit(np.ones((2, 1)), np.zeros((2, 1)), epochs=3)
        ... except pib.NonFiniteLossError as err:
        ...     print("stopped")
        stopped
    """


class FitGuard(Protocol):
    """What fit asks of the layer that keeps it alive through device loss (recovery.Recovery,
    which sits above this module): checkpoints at fit's start and after steps, and a recovery
    when a step fails."""

    async def begin(self, callbacks: list[Callback]) -> None: ...

    async def after_step(self, callbacks: list[Callback]) -> None: ...

    async def recover(self, exc: Exception, callbacks: list[Callback]) -> bool:
        """True when `exc` came from a lost device and training state is restored (on the same
        backend or the next one) for fit to continue from the trainer's restored cursor."""
        ...


class _FiredCallbacks:
    """The furthest epoch and step whose callbacks ran, so steps replayed after a recovery do
    not report twice."""

    def __init__(self) -> None:
        self.last: dict[str, int] = {}

    def first(self, hook: str, index: int) -> bool:
        if index <= self.last.get(hook, -1):
            return False
        self.last[hook] = index
        return True


class DeviceStep:
    """What fit and train_on_batch share on one model and backend: the FitState, the eager step
    and, where the backend replays, the StepReplayer (its recordings outlive each call)."""

    def __init__(self, model: TrainableModel, backend: Backend) -> None:
        self.backend = backend
        self.state = FitState(len(model.resolved_metrics()))
        self.ok_value = Variable(True, trainable=False, name="fit/ok_value", dtype="bool")
        self.step_fn = tidy(train_step)
        self.replayer: replay.StepReplayer | None = None
        if backend.supports_replay:
            self.replayer = replay.StepReplayer(model, self.state, backend, self.step_fn)
        self._model = weakref.ref(model)  # the model owns its Trainer, which owns this
        self.checked: set[Any] = set()  # batch signatures train_on_batch has validated
        self._micro: dict[int, int | None] = {}  # batch size -> micro-batch size (None: fits)

    def micro_batch(self, batch: int) -> int | None:
        """None when a step of `batch` examples fits the device in one pass, else the micro-batch
        size it is split into (max_batch_size). Fixed per model and backend: compile makes a
        new DeviceStep."""
        if batch not in self._micro:
            model = self._model()
            assert model is not None, "the model of this DeviceStep was garbage collected"
            largest = max_batch_size(model, self.backend)
            self._micro[batch] = largest if batch > largest else None
        return self._micro[batch]

    def reset_ok(self) -> None:
        """Lets steps update again (no op: the variable points at a constant True buffer)."""
        self.state.ok.assign(self.ok_value)

    def step(self, xb: Any, yb: Any, own_loss: bool = False, micro: int | None = None) -> Tensor:
        """One gated train step, replayed where it can be; returns the batch loss tensor (with
        own_loss, one that later steps never overwrite: see StepReplayer.step). A batch bigger
        than `micro` runs as micro-batches with accumulated gradients, eagerly: a recording
        holds one pass, and the accumulating micro-steps (and a smaller last one) differ."""
        model = self._model()
        assert model is not None, "the model of this DeviceStep was garbage collected"
        if micro is not None and xb.shape[0] > micro:
            return accumulated_train_step(model, xb, yb, self.state, micro)
        if self.replayer is not None and replay.ENABLED:
            return self.replayer.step(xb, yb, own_loss)
        return self.step_fn(model, xb, yb, self.state)

    def drop_recordings(self) -> None:
        if self.replayer is not None:
            self.replayer.close()

    def close(self) -> None:
        self.drop_recordings()
        self.state.dispose()
        self.ok_value.dispose()


# ---- input validation --------------------------------------------------------------------------


async def _host_array(value: Any, name: str) -> np.ndarray:
    if isinstance(value, Tensor):
        return await value.numpy()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name}: expected a numpy array, nested lists or a Tensor") from err
    if array.dtype.kind not in "biuf" or array.ndim == 0:
        raise TypeError(
            f"{name}: expected a numeric array with a samples axis, got dtype {array.dtype} "
            f"and shape {array.shape}"
        )
    return array


def _check_finite(array: np.ndarray, name: str) -> None:
    if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
        first = np.argwhere(~np.isfinite(array))[0]
        raise ValueError(f"{name} contains NaN or Inf values (first at index {tuple(first)})")


def _check_int(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def _require_compiled(model: TrainableModel) -> None:
    if model.optimizer is None or model.loss is None:
        raise RuntimeError("call model.compile(optimizer=..., loss=...) before fit/evaluate")


async def _prepare(
    model: TrainableModel, x: Any, y: Any | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Host arrays checked against the model: shapes, finiteness, sample counts and targets."""
    xa = (await _host_array(x, "x")).astype(np.float32)
    _check_finite(xa, "x")
    expected = model.input_shape if model.layers and model.input_shape else None
    if model.built and expected is not None and xa.shape[1:] != expected:
        raise ValueError(f"x: expected shape (samples, *{expected}), got {xa.shape}")
    if not model.built:
        model.build(expected or xa.shape[1:])
        if xa.shape[1:] != model.input_shape:
            raise ValueError(f"x: expected shape (samples, *{model.input_shape}), got {xa.shape}")
    if y is None:
        return xa, None
    ya = await _host_array(y, "y")
    if len(ya) != len(xa):
        raise ValueError(
            f"x and y must have the same number of samples: x has {len(xa)}, y has {len(ya)}"
        )
    _check_finite(ya, "y")
    assert model.loss is not None
    out = model.output_shape
    if ya.ndim == 1 and out == (1,) and model.loss.target_dtype != "int32":
        ya = ya.reshape(-1, 1)
    model.loss.check_targets(ya, out)
    return xa, ya.astype(model.loss.target_dtype)


# ---- steps -------------------------------------------------------------------------------------


def train_step(model: TrainableModel, xb: Any, yb: Any, state: FitState) -> Tensor:
    """One gated optimizer step on a batch (arrays or tensors); returns the batch loss tensor.

    Run it inside a tidy scope: it creates the batch tensors itself so the scope frees them.
    """
    assert model.loss is not None and model.optimizer is not None
    xb, yb = _batch_tensors(model, xb, yb)
    variables = model.trainable_weights
    loss, grads, ok = _gated_pass(model, xb, yb, variables, state)
    model.optimizer.apply_gradients(zip(grads, variables, strict=True), gate=ok)
    return loss


def _gated_pass(
    model: TrainableModel, x: Tensor, y: Tensor, variables: list[Variable], state: FitState
) -> tuple[Tensor, list[Tensor], Tensor]:
    """Forward and backward on one (micro-)batch: returns (loss, gradients, ok), ok being false
    from the first non-finite loss of the epoch on. The layers' state updates (moving statistics,
    draw counters) take effect only while ok, and the running loss and metric sums grow."""
    assert model.loss is not None
    sink: list[tuple[Variable, Tensor]] = []
    layer_lib.state_update_sink = sink
    try:
        with GradientTape() as tape:
            pred = model(x, training=True)
            loss = model.loss(y, pred)
    finally:
        layer_lib.state_update_sink = None
    grads = tape.gradient(loss, variables)
    ok = F.equal(F.fused(_not_ok_yet, loss, state.ok), 0.0)
    state.ok.assign(ok)
    for var, new in sink:
        var.assign(F.where(ok, new, var))
    _accumulate(model, state, y, pred, loss)
    return loss, grads, ok


def accumulated_train_step(
    model: TrainableModel, xb: Any, yb: Any, state: FitState, micro: int
) -> Tensor:
    """One gated optimizer step on a batch too big for one pass; returns the batch loss tensor.

    Micro-batches of `micro` examples each add their gradient, weighted by their share of the
    batch, to a running sum, and the optimizer applies the sum once: for a loss that is a mean
    over examples (every loss of the engine) the update equals the full batch's. Layers with a
    batch-dependent forward see each micro-batch alone: BatchNormalization normalises a
    micro-batch with its own mean and variance and updates its moving statistics once per
    micro-batch (Keras' virtual_batch_size behaviour); Dropout draws a mask per micro-batch.
    Each micro-step is its own tidy scope, so its activations are freed before the next.
    """
    assert model.loss is not None and model.optimizer is not None
    variables = model.trainable_weights
    total = len(xb)
    sums: list[Tensor] = []
    batch_loss: Tensor | None = None
    for start in range(0, total, micro):
        with tidy():
            x, y = _batch_tensors(model, xb[start : start + micro], yb[start : start + micro])
            share = x.shape[0] / total
            loss, grads, _ = _gated_pass(model, x, y, variables, state)
            parts = [F.mul(g, share) for g in grads]
            if sums:
                parts = [
                    F.add(total_so_far, part)
                    for total_so_far, part in zip(sums, parts, strict=True)
                ]
            weighted = F.mul(loss, share)
            new_sums = [keep(p) for p in parts]
            new_loss = keep(weighted if batch_loss is None else F.add(batch_loss, weighted))
        for old in sums:
            old.dispose()
        if batch_loss is not None:
            batch_loss.dispose()
        sums, batch_loss = new_sums, new_loss
    assert batch_loss is not None
    with tidy():
        model.optimizer.apply_gradients(zip(sums, variables, strict=True), gate=state.ok)
    for part in sums:
        part.dispose()
    return batch_loss


def _not_ok_yet(loss: fusion.Value, ok: fusion.Value) -> fusion.Value:
    """0 where the step may land (ok so far, and loss - loss is 0: NaN - NaN and Inf - Inf are
    NaN), else NaN or 1: `ok and isfinite(loss)` is this == 0, two kernels instead of three."""
    return fusion.where(ok, loss - loss, 1.0)


# Every step checks its loss with it.
fusion.register_common(fusion.trace(_not_ok_yet, 2), ("scalar", "gate"), typical=True)


def _loss_total(samples: float) -> Callable[[fusion.Value, fusion.Value], fusion.Value]:
    """The running loss sum after a batch of `samples` whose mean loss is batch_loss."""
    return lambda total, batch_loss: total + batch_loss * samples


# Every step runs it (with its batch's size, a constant outside the compiled kernel).
fusion.register_common(fusion.trace(_loss_total(1.0), 2), ("scalar", "scalar"), typical=True)


def _accumulate(
    model: TrainableModel, state: FitState, yb: Tensor, pred: Tensor, loss: Tensor
) -> None:
    state.loss_sum.assign(F.fused(_loss_total(float(yb.shape[0])), state.loss_sum, loss))
    for metric, total in zip(model.resolved_metrics(), state.metric_sums, strict=True):
        total.assign(F.add(total, metric.correct(yb, pred)))
    state.seen += yb.shape[0]


def _batch_tensors(model: TrainableModel, xb: Any, yb: Any) -> tuple[Tensor, Tensor]:
    assert model.loss is not None
    x = xb if isinstance(xb, Tensor) else tensor(xb)
    y = yb if isinstance(yb, Tensor) else tensor(yb, dtype=model.loss.target_dtype)
    return x, y


def _eval_step(model: TrainableModel, xb: Any, yb: Any, state: FitState) -> None:
    assert model.loss is not None
    xb, yb = _batch_tensors(model, xb, yb)
    pred = model(xb, training=False)
    _accumulate(model, state, yb, pred, model.loss(yb, pred))


async def _read_logs(model: TrainableModel, state: FitState, prefix: str = "") -> dict[str, float]:
    logs = {prefix + "loss": float(await state.loss_sum.item()) / max(state.seen, 1)}
    for metric, total in zip(model.resolved_metrics(), state.metric_sums, strict=True):
        logs[prefix + metric.name] = float(await total.item()) / max(state.seen, 1)
    return logs


async def _raise_if_bad(model: TrainableModel, state: FitState, epoch: int) -> None:
    if not await state.ok.item():
        assert model.optimizer is not None and model.optimizer.iterations is not None
        good = int(await model.optimizer.iterations.item())
        raise NonFiniteLossError(
            f"loss became NaN or Inf in epoch {epoch} (optimizer step {good + 1}); training "
            f"stopped and the weights are those after step {good}. Lower the learning rate, "
            "set clipnorm, or check the data."
        )


def _check_caps(
    model: TrainableModel, samples: int, batch_size: int, epochs: int = 1
) -> ModelSummary:
    """The shared caps of limits.py (model size, samples, dataset bytes, epochs, batch size),
    checked before any step runs; epochs=0 (nothing to run) is checked as 1."""
    assert model.input_shape is not None
    params = sum(math.prod(w.shape) for w in model.weights)
    summary = ModelSummary(tuple(model.input_shape), params, len(model.layers))
    validate_training(TrainingConfig(summary, samples, max(epochs, 1), batch_size))
    return summary


def epoch_order(seed: int, epoch: int, samples: int, shuffle: bool) -> np.ndarray:
    """Sample order of an epoch: a pure function of (seed, epoch), so resuming needs no RNG state."""
    if not shuffle:
        return np.arange(samples)
    return np.random.Generator(np.random.PCG64([seed, epoch])).permutation(samples)


class _PermitExpiry(Callback):
    """Ends a fit whose permit expires while it runs, at the next epoch boundary (the epoch that
    started within the permit finishes; the weights trained so far stay)."""

    def __init__(self, granted: permits.Permit) -> None:
        super().__init__()
        self.granted = granted

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any]) -> None:
        permits.check_unexpired(self.granted)


# ---- fit / evaluate / predict ------------------------------------------------------------------


def _device_input(model: TrainableModel, x: Tensor) -> Tensor:
    """A float32 input tensor checked by shape only (its values stay on the device)."""
    if not model.built:
        model.build(model.input_shape or x.shape[1:])
    if x.ndim == 0 or x.shape[1:] != model.input_shape:
        raise ValueError(f"x: expected shape (samples, *{model.input_shape}), got {x.shape}")
    return x if x.dtype == "float32" else tensor(x, dtype="float32")


def _device_batch(model: TrainableModel, step: DeviceStep, x: Any, y: Any) -> tuple[Tensor, Tensor]:
    """Checks a batch given as tensors by shape and dtype only (their values stay on the device:
    NaN/Inf in them shows up as a non-finite loss, and that step changes nothing)."""
    assert model.loss is not None
    xt = x if isinstance(x, Tensor) else tensor(x)
    yt = y if isinstance(y, Tensor) else tensor(y, dtype=model.loss.target_dtype)
    for t, name in ((xt, "x"), (yt, "y")):
        if t.ndim == 0:
            raise TypeError(f"{name}: expected a tensor with a samples axis, got shape ()")
        if t.dtype == "bool":
            raise TypeError(f"{name}: expected a numeric tensor, got dtype bool")
    key = (xt.shape, xt.dtype, yt.shape, yt.dtype)
    if key not in step.checked:
        if xt.shape[0] != yt.shape[0]:
            raise ValueError(
                "x and y must have the same number of samples: "
                f"x has {xt.shape[0]}, y has {yt.shape[0]}"
            )
        if xt.shape[0] == 0:
            raise ValueError("x: no samples to train on")
        expected = model.input_shape if model.layers and model.input_shape else None
        if not model.built:
            model.build(expected or xt.shape[1:])
        if xt.shape[1:] != model.input_shape:
            raise ValueError(f"x: expected shape (samples, *{model.input_shape}), got {xt.shape}")
        ya = np.zeros(_target_shape(model, yt.shape), dtype=model.loss.target_dtype)
        model.loss.check_targets(ya, model.output_shape)
        step.checked.add(key)
    xt = F.cast(xt, "float32")
    target_shape = _target_shape(model, yt.shape)
    if target_shape != yt.shape:
        yt = F.reshape(yt, target_shape)
    return xt, F.cast(yt, model.loss.target_dtype)


def _target_shape(model: TrainableModel, shape: tuple[int, ...]) -> tuple[int, ...]:
    """fit's one reshape of targets: (n,) -> (n, 1) for a single-output model's dense loss."""
    assert model.loss is not None
    if len(shape) == 1 and model.output_shape == (1,) and model.loss.target_dtype != "int32":
        return (shape[0], 1)
    return shape


async def _evaluate_arrays(
    model: TrainableModel, xa: np.ndarray, ya: np.ndarray, batch_size: int, prefix: str = ""
) -> dict[str, float]:
    state = FitState(len(model.resolved_metrics()))
    step = tidy(_eval_step)
    try:
        for start in range(0, len(xa), batch_size):
            end = start + batch_size
            step(model, xa[start:end], ya[start:end], state)
            await asyncio.sleep(0)
        return await _read_logs(model, state, prefix)
    finally:
        state.dispose()


class Trainer:
    """Trains one model (fit, evaluate, predict, train_on_batch) and owns what training keeps
    between calls: the data cursor, a resume restored from a checkpoint, the accumulators of the
    fit in progress and the DeviceStep of the current backend. checkpoint.py saves and restores
    the cursor through saved_progress and restore_progress."""

    def __init__(self, model: TrainableModel) -> None:
        self._model = weakref.ref(model)  # the model owns its Trainer: no reference cycle
        # Data-order cursor: the next batch to run and the settings that fix the order.
        self._cursor: dict[str, Any] = {"epoch": 0, "batch": 0}
        self._resume: dict[str, Any] | None = None  # a restored cursor fit(resume=True) takes
        self._fitting: FitState | None = None  # the accumulators while a fit runs
        self._device: DeviceStep | None = None
        self._device_finalizer: weakref.finalize[Any, Any] | None = None
        # predict's recorded passes (key None) and those with a head after the model (top_k's
        # ranking), on one backend; closed when the model goes (their recordings hold buffers).
        self._forward_replayers: dict[Any, ForwardReplayer] = {}
        self._forward_finalizer = weakref.finalize(model, _close_all, self._forward_replayers)
        self._forward_finalizer.atexit = False

    @property
    def model(self) -> TrainableModel:
        model = self._model()
        assert model is not None, "the model of this Trainer was garbage collected"
        return model

    def device_step(self) -> DeviceStep:
        """The DeviceStep fit and train_on_batch share: one per backend, kept (with its step
        recordings) until compile or a backend change; set_weights drops its recordings."""
        backend = current_backend()
        if self._device is not None and self._device.backend is not backend:
            self.reset()
        if self._device is None:
            self._device = DeviceStep(self.model, backend)
            # Frees its recordings (and the buffers only they hold) when the model goes away.
            self._device_finalizer = weakref.finalize(self.model, self._device.close)
            self._device_finalizer.atexit = False
        return self._device

    def forward_passes(
        self, head_key: Any = None, head: Head | None = None
    ) -> Callable[[Any], list[Tensor]]:
        """predict's forward pass over one batch, with `head` after the model when given (one
        per `head_key`): replayed where the backend replays inference (the ForwardReplayers live
        as long as the backend), else eager. Returns the pass's tensors, the caller's own."""
        backend = current_backend()
        replayers = self._forward_replayers
        if any(r.backend is not backend or r.backend.retired for r in replayers.values()):
            _close_all(replayers)  # recorded on another (or a lost) backend
        if backend.replays_inference and replay.ENABLED:
            if head_key not in replayers:
                replayers[head_key] = ForwardReplayer(self.model, backend, head)
            return replayers[head_key].run
        eager = forward_pass(self.model, backend, head)
        return lambda xb: as_list(eager(xb))

    def reset(self) -> None:
        """Drops the DeviceStep and its recordings (compile changes what a step computes)."""
        self._device = None
        if self._device_finalizer is not None:
            self._device_finalizer()  # runs DeviceStep.close once
            self._device_finalizer = None

    def drop_recordings(self) -> None:
        """Forgets recorded steps (new weights or optimizer state): the next steps re-record."""
        if self._device is not None:
            self._device.drop_recordings()

    # ---- checkpoints ----

    async def saved_progress(self) -> tuple[dict[str, Any], np.ndarray | None]:
        """What a checkpoint keeps of training: the data cursor (epoch, batch, seed, batch_size,
        shuffle, samples) and, while a fit runs, `seen` plus this epoch's accumulators (loss sum,
        then metric hit counts). Refuses once the running fit has hit a NaN/Inf loss."""
        progress = dict(self._cursor)
        state = self._fitting
        if state is None:
            return progress, None
        ok, *accumulators = await asyncio.gather(
            state.ok.item(), *(v.numpy() for v in state.variables())
        )  # read together: one wait for the device
        if not ok:
            raise FloatingPointError("refusing to checkpoint: this fit has hit a NaN/Inf loss")
        progress["seen"] = state.seen
        return progress, np.array(accumulators, dtype=np.float32)

    def saved_cursor(self) -> dict[str, Any]:
        """The data cursor alone (epoch, batch, seed, batch_size, shuffle, samples)."""
        return dict(self._cursor)

    def restore_progress(self, progress: dict[str, Any], accumulators: Any | None) -> None:
        """Restores a saved_progress: the next fit(resume=True) continues from that cursor."""
        self._cursor = dict(progress)
        self._resume = dict(progress)
        if accumulators is not None:
            self._resume["accumulators"] = list(accumulators)

    # ---- fit / train_on_batch / evaluate / predict ----

    async def fit(
        self,
        x: Any,
        y: Any,
        history: History,
        epochs: int = 1,
        batch_size: int = 32,
        shuffle: bool = True,
        seed: int = 0,
        validation_split: float = 0.0,
        validation_data: tuple[Any, Any] | None = None,
        callbacks: list[Callback] | None = None,
        verbose: int = 0,
        initial_epoch: int = 0,
        resume: bool = False,
        permit: str | None = None,
        guard: FitGuard | None = None,
    ) -> History:
        """Keras-style fit, reporting into `history` (Sequential.fit makes it model.history).
        resume=True continues from the cursor restored by restore_progress (load_checkpoint);
        `permit` (permits.py) bounds the epochs this call runs, the samples it trains on and the
        batch size, and its expiry ends training at the next epoch boundary;
        `guard` (recovery.Recovery) checkpoints along the way and recovers from device loss."""
        model = self.model
        _require_compiled(model)
        epochs = _check_int(epochs, "epochs", 0)
        batch_size = _check_int(batch_size, "batch_size", 1)
        initial_epoch = _check_int(initial_epoch, "initial_epoch", 0)
        if not 0.0 <= validation_split < 1.0:
            raise ValueError(f"validation_split must be in [0, 1), got {validation_split!r}")
        check_cap("max_epochs", epochs, DEFAULT_LIMITS, "epochs")
        check_cap("max_batch_size", batch_size, DEFAULT_LIMITS, "the batch size")
        callbacks = list(callbacks or [])
        for cb in callbacks:
            if not isinstance(cb, Callback):
                raise TypeError(f"callbacks: expected Callback instances, got {type(cb).__name__}")
        xa, ya = await _prepare(model, x, y)
        assert ya is not None
        val: tuple[np.ndarray, np.ndarray] | None = None
        if validation_data is not None:
            vx, vy = await _prepare(model, validation_data[0], validation_data[1])
            assert vy is not None
            val = (vx, vy)
        elif validation_split > 0:
            split = int(len(xa) * (1.0 - validation_split))
            if split < 1 or split == len(xa):
                raise ValueError(f"validation_split={validation_split} leaves an empty split")
            xa, ya, val = xa[:split], ya[:split], (xa[split:], ya[split:])
        samples = len(xa)
        if samples == 0:
            raise ValueError("x: no samples to train on")
        summary = _check_caps(model, samples, batch_size, epochs)
        steps = math.ceil(samples / batch_size)

        start_batch = 0
        device = self.device_step()
        micro = device.micro_batch(batch_size)
        state = device.state
        device.reset_ok()
        state.reset()
        if resume:
            initial_epoch, start_batch, seed = self._resume_cursor(
                state, batch_size, samples, shuffle
            )
        if permit is not None:
            # Checked once the cursor is known: a resumed fit runs only its remaining epochs.
            runs = TrainingConfig(summary, samples, max(epochs - initial_epoch, 1), batch_size)
            granted = permits.check_training(runs, permit, required=True)
            assert granted is not None
            callbacks.append(_PermitExpiry(granted))

        history.params = {"epochs": epochs, "steps": steps, "batch_size": batch_size}
        if micro is not None:
            history.params["micro_batch_size"] = micro
        all_callbacks: list[Callback] = [history, *callbacks]
        for cb in all_callbacks:
            cb.set_model(model)
        want_batch_logs = any(cb.wants_batch_logs for cb in callbacks)
        self._fitting = state
        self._cursor = {
            "epoch": initial_epoch,
            "batch": start_batch,
            "seed": seed,
            "batch_size": batch_size,
            "shuffle": shuffle,
            "samples": samples,
        }
        fired = _FiredCallbacks()
        try:
            await call_hook(all_callbacks, "on_train_begin", {})
            if guard is not None:
                await guard.begin(all_callbacks)
            while True:
                try:
                    await self._epochs(
                        device,
                        xa,
                        ya,
                        val,
                        all_callbacks,
                        fired,
                        guard,
                        want_batch_logs,
                        (initial_epoch, start_batch, epochs, steps, batch_size, seed, shuffle),
                        verbose,
                    )
                    break
                except Exception as exc:
                    # A lost GPU context or device: the guard restores its last checkpoint on the
                    # backend it recovered (or the next one) and the epochs go on from there.
                    if guard is None or not await guard.recover(exc, all_callbacks):
                        raise
                    device = self.device_step()
                    device.reset_ok()
                    device.state.reset()
                    self._fitting = device.state
                    initial_epoch, start_batch, seed = self._resume_cursor(
                        device.state, batch_size, samples, shuffle
                    )
            await call_hook(all_callbacks, "on_train_end", {})
        finally:
            self._fitting = None
        return history

    async def _epochs(
        self,
        device: DeviceStep,
        xa: np.ndarray,
        ya: np.ndarray,
        val: tuple[np.ndarray, np.ndarray] | None,
        all_callbacks: list[Callback],
        fired: _FiredCallbacks,
        guard: FitGuard | None,
        want_batch_logs: bool,
        plan: tuple[int, int, int, int, int, int, bool],
        verbose: int,
    ) -> None:
        """fit's epochs from (initial_epoch, start_batch) on. Where the backend can, steps after
        the first ones replay a recording instead of running Python per op (replay.py says when
        it falls back to eager). After a recovery fit runs this again from the restored cursor;
        `fired` keeps callbacks from hearing a replayed step or epoch twice."""
        model = self.model
        initial_epoch, start_batch, epochs, steps, batch_size, seed, shuffle = plan
        state = device.state
        backend = device.backend
        samples = len(xa)
        micro = device.micro_batch(batch_size)  # per backend: a recovery may have switched it
        for epoch in range(initial_epoch, epochs):
            if start_batch == 0:
                state.reset()
            if fired.first("epoch_begin", epoch):
                await call_hook(all_callbacks, "on_epoch_begin", epoch, {})
            order = epoch_order(seed, epoch, samples, shuffle)
            for batch in range(start_batch, steps):
                idx = order[batch * batch_size : (batch + 1) * batch_size]
                loss = device.step(xa[idx], ya[idx], micro=micro)
                self._cursor.update(epoch=epoch, batch=batch + 1)
                logs: dict[str, Any] = {"batch": batch, "size": len(idx)}
                if want_batch_logs:
                    await _raise_if_bad(model, state, epoch)
                    logs["loss"] = float(await loss.item())
                loss.dispose()
                await backend.end_step()
                if fired.first("batch_end", epoch * steps + batch):
                    await call_hook(all_callbacks, "on_batch_end", batch, logs)
                if guard is not None:
                    await guard.after_step(all_callbacks)
                await asyncio.sleep(0)  # let other tasks of this event loop run
                if model.stop_training:
                    break
            start_batch = 0
            await _raise_if_bad(model, state, epoch)
            epoch_logs = await _read_logs(model, state)
            if val is not None:
                epoch_logs.update(await _evaluate_arrays(model, *val, batch_size, prefix="val_"))
            self._cursor.update(epoch=epoch + 1, batch=0)
            if fired.first("epoch_end", epoch):
                if verbose:
                    shown = " - ".join(f"{k}: {v:.4f}" for k, v in epoch_logs.items())
                    print(f"Epoch {epoch + 1}/{epochs} - {shown}")
                await call_hook(all_callbacks, "on_epoch_end", epoch, epoch_logs)
            if model.stop_training:
                break

    async def train_on_batch(
        self, x: Any, y: Any, return_dict: bool = False
    ) -> Tensor | dict[str, float]:
        """One training step on one batch, through fit's machinery; see Sequential.train_on_batch."""
        model = self.model
        _require_compiled(model)
        device = self.device_step()
        xb: Any
        yb: Any
        if isinstance(x, Tensor) or isinstance(y, Tensor):
            xb, yb = _device_batch(model, device, x, y)
        else:
            xb, yb = await _prepare(model, x, y)
            assert yb is not None
            if len(xb) == 0:
                raise ValueError("x: no samples to train on")
        check_cap("max_batch_size", xb.shape[0], DEFAULT_LIMITS, "the batch size")
        state = device.state
        if return_dict:
            state.reset()
        device.reset_ok()
        loss = device.step(xb, yb, own_loss=True, micro=device.micro_batch(xb.shape[0]))
        if xb is not x and isinstance(xb, Tensor):  # a cast or reshape made here
            xb.dispose()
        if yb is not y and isinstance(yb, Tensor):
            yb.dispose()
        await device.backend.end_step()
        if not return_dict:
            return loss
        loss.dispose()
        return await _read_logs(model, state)

    async def evaluate(
        self, x: Any, y: Any, batch_size: int = 32, verbose: int = 0
    ) -> dict[str, float]:
        """Mean loss and metrics over (x, y) in inference mode: {"loss": ..., "accuracy": ...}."""
        model = self.model
        _require_compiled(model)
        batch_size = _check_int(batch_size, "batch_size", 1)
        check_cap("max_batch_size", batch_size, DEFAULT_LIMITS, "the batch size")
        xa, ya = await _prepare(model, x, y)
        assert ya is not None
        _check_caps(model, len(xa), batch_size)
        # Sums over batches: evaluating in batches that fit changes nothing but the order.
        logs = await _evaluate_arrays(model, xa, ya, min(batch_size, max_batch_size(model)))
        if verbose:
            print(" - ".join(f"{k}: {v:.4f}" for k, v in logs.items()))
        return logs

    async def predict(self, x: Any, batch_size: int = 32) -> Tensor:
        """Model outputs for x, computed batch by batch and concatenated into one tensor."""
        model = self.model
        batch_size = _check_int(batch_size, "batch_size", 1)
        check_cap("max_batch_size", batch_size, DEFAULT_LIMITS, "the batch size")
        source: Tensor | np.ndarray
        if isinstance(x, Tensor):
            # A tensor stays where it is: batches are device slices, never a readback of the input.
            source = _device_input(model, x)
        else:
            source, _ = await _prepare(model, x, None)
        samples = source.shape[0]
        if samples == 0:
            raise ValueError("x: no samples to predict")
        _check_caps(model, samples, batch_size)
        batch_size = min(batch_size, max_batch_size(model))  # rows of the output do not mix
        forward = self.forward_passes()
        parts: list[Tensor] = []
        for start in range(0, samples, batch_size):
            # One batch covering every sample is the source itself: no slice copy on the device.
            whole = start == 0 and samples <= batch_size
            parts += forward(source if whole else source[start : start + batch_size])
            if start + batch_size < samples:  # the page's other tasks run between batches
                await asyncio.sleep(0)
        if source is not x and isinstance(source, Tensor):  # a cast made here
            source.dispose()
        if len(parts) == 1:
            return parts[0]
        out = F.concat(parts, axis=0)
        for part in parts:
            part.dispose()
        return out

    def _resume_cursor(
        self, state: FitState, batch_size: int, samples: int, shuffle: bool
    ) -> tuple[int, int, int]:
        saved = self._resume
        if saved is None:
            raise ValueError("fit(resume=True) needs model.load_checkpoint(blob) first")
        for key, value in (("batch_size", batch_size), ("samples", samples), ("shuffle", shuffle)):
            if saved.get(key) != value:
                raise ValueError(
                    f"fit(resume=True): {key}={value!r} differs from the checkpoint's {saved.get(key)!r}"
                )
        if saved["batch"] > 0:
            with tidy():
                for var, value in zip(state.variables(), saved["accumulators"], strict=True):
                    var.assign(tensor(value))
            state.seen = saved["seen"]
        self._resume = None
        return saved["epoch"], saved["batch"], saved["seed"]


def _close_all(replayers: dict[Any, ForwardReplayer]) -> None:
    """Closes the recorded forward passes (freeing the buffers only they hold) and forgets them."""
    for replayer in replayers.values():
        replayer.close()
    replayers.clear()
