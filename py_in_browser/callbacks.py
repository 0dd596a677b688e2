"""Training callbacks: the base hooks, History, EarlyStopping and UI-friendly progress reporting.

Hooks may be plain methods or coroutines (fit awaits them), so a callback can `await
model.save_checkpoint()`. on_batch_end receives the batch loss only when the callback sets
`wants_batch_logs = True`; otherwise losses stay on the device until the epoch ends.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

from .trainable import TrainableModel

Logs = dict[str, Any]


class Callback:
    """Base class of fit's callbacks: override the hooks you need (plain or ``async def``).

    fit calls, in order: on_train_begin, then per epoch on_epoch_begin, on_batch_end after each
    step, on_epoch_end with the epoch's mean loss and metrics (and ``val_`` ones), and finally
    on_train_end; on_runtime_event when the GPU device is lost and fit recovers (a GPU backend
    only). `self.model` is the model being trained; setting
    ``self.model.stop_training = True`` ends fit after the current batch.

    Example:
        >>> class PrintLoss(pib.Callback):
        ...     def on_epoch_end(self, epoch, logs):
        ...         print(epoch, round(logs["loss"], 4))
        >>> dense = pib.layers.Dense(1, kernel_initializer="zeros", input_shape=(1,))
        >>> model = pib.Sequential([dense])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> x = y = np.ones((4, 1))
        >>> history = await model.fit(x, y, epochs=2, callbacks=[PrintLoss()])
        0 1.0
        1 0.9216
    """

    wants_batch_logs = False

    def __init__(self) -> None:
        self.model: TrainableModel | None = None

    def set_model(self, model: TrainableModel) -> None:
        """Called by fit before training: the model the hooks act on."""
        self.model = model

    def on_train_begin(self, logs: Logs) -> Any:
        """Before the first epoch; logs is empty."""

    def on_train_end(self, logs: Logs) -> Any:
        """After the last epoch (or an early stop); logs is empty."""

    def on_epoch_begin(self, epoch: int, logs: Logs) -> Any:
        """Before epoch `epoch` (counted from 0); logs is empty."""

    def on_epoch_end(self, epoch: int, logs: Logs) -> Any:
        """After epoch `epoch`: logs holds "loss", each metric, and ``val_`` ones with validation."""

    def on_batch_end(self, batch: int, logs: Logs) -> Any:
        """After each step: logs holds "batch" and "size", plus the batch "loss" (a readback)
        when `wants_batch_logs` is True."""

    def on_runtime_event(self, event: Logs) -> Any:
        """A runtime event during fit (pib.runtime_events' dicts): "context_lost" /
        "device_lost" (with "fit_step", the training step reached), "context_restored",
        "backend_switched", "paused", "resumed"; fit keeps training through each."""


async def call_hook(callbacks: list[Callback], hook: str, *args: Any) -> None:
    for cb in callbacks:
        result = getattr(cb, hook)(*args)
        if inspect.isawaitable(result):
            await result


class History(Callback):
    """history.history[name] holds one float per epoch; history.epoch the epoch indices.

    fit always records one and returns it (also as ``model.history``); history.params holds
    epochs, steps per epoch and batch_size.

    Example:
        >>> model = pib.Sequential([pib.layers.Dense(1, input_shape=(2,))])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> history = await model.fit(np.ones((8, 2)), np.ones((8, 1)), epochs=3, batch_size=4)
        >>> history.epoch, len(history.history["loss"]), history.params["steps"]
        ([0, 1, 2], 3, 2)
    """

    def __init__(self) -> None:
        super().__init__()
        self.history: dict[str, list[float]] = {}
        self.epoch: list[int] = []
        self.params: dict[str, Any] = {}

    def on_epoch_end(self, epoch: int, logs: Logs) -> None:
        self.epoch.append(epoch)
        for key, value in logs.items():
            self.history.setdefault(key, []).append(value)


class EarlyStopping(Callback):
    """Stops when `monitor` has not improved by min_delta for `patience` epochs.

    An epoch improves when the monitored log is below the best so far by more than min_delta
    (above, for mode "max"; mode "auto" maximizes names containing "acc"). After `patience`
    epochs in a row without improvement fit stops; with restore_best_weights the weights of the
    best epoch are put back. `stopped_epoch` is the epoch it stopped at (None if it did not).
    The default monitor, "val_loss", needs validation_split or validation_data.

    Example:
        >>> model = pib.Sequential([pib.layers.Dense(1, input_shape=(1,))])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> stop = pib.EarlyStopping(monitor="loss", min_delta=10.0)  # nothing improves by 10
        >>> x = y = np.ones((4, 1))
        >>> history = await model.fit(x, y, epochs=5, callbacks=[stop])
        >>> stop.stopped_epoch, len(history.epoch)
        (1, 2)
    """

    def __init__(
        self,
        monitor: str = "val_loss",
        min_delta: float = 0.0,
        patience: int = 0,
        mode: str = "auto",
        restore_best_weights: bool = False,
    ) -> None:
        super().__init__()
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"EarlyStopping mode must be 'auto', 'min' or 'max', got {mode!r}")
        self.monitor, self.min_delta, self.patience = monitor, abs(min_delta), patience
        maximize = mode == "max" or (mode == "auto" and "acc" in monitor)
        self.sign = -1.0 if maximize else 1.0
        self.restore_best_weights = restore_best_weights
        self.best = math.inf
        self.wait = 0
        self.stopped_epoch: int | None = None
        self.best_weights: list[Any] | None = None

    def on_train_begin(self, logs: Logs) -> None:
        self.best, self.wait, self.stopped_epoch, self.best_weights = math.inf, 0, None, None

    async def on_epoch_end(self, epoch: int, logs: Logs) -> None:
        if self.monitor not in logs:
            raise KeyError(
                f"EarlyStopping monitors {self.monitor!r} but logs only have {sorted(logs)}"
            )
        assert self.model is not None
        score = self.sign * float(logs[self.monitor])
        if score < self.best - self.min_delta:
            self.best, self.wait = score, 0
            if self.restore_best_weights:
                self.best_weights = await self.model.get_weights()
            return
        self.wait += 1
        if self.wait > self.patience:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.best_weights is not None:
                self.model.set_weights(self.best_weights)


class LambdaCallback(Callback):
    """Wraps plain functions: LambdaCallback(on_epoch_end=lambda epoch, logs: ...).

    Keyword arguments name hooks of `Callback` (on_train_begin, on_train_end, on_epoch_begin,
    on_epoch_end, on_batch_end, on_runtime_event) and take the same arguments; passing on_batch_end turns on
    batch losses.

    Example:
        >>> model = pib.Sequential([pib.layers.Dense(1, input_shape=(1,))])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> seen = []
        >>> log_batches = pib.LambdaCallback(on_batch_end=lambda batch, logs: seen.append(batch))
        >>> x = y = np.ones((6, 1))
        >>> history = await model.fit(x, y, batch_size=2, callbacks=[log_batches])
        >>> seen
        [0, 1, 2]
    """

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        super().__init__()
        allowed = {
            "on_train_begin",
            "on_train_end",
            "on_epoch_begin",
            "on_epoch_end",
            "on_batch_end",
            "on_runtime_event",
        }
        unknown = set(hooks) - allowed
        if unknown:
            raise ValueError(
                f"LambdaCallback: unknown hooks {sorted(unknown)}; use {sorted(allowed)}"
            )
        for name, fn in hooks.items():
            setattr(self, name, fn)
        self.wants_batch_logs = "on_batch_end" in hooks


class ProgressCallback(Callback):
    """Calls report(dict) for a UI: {"event": "batch"|"epoch"|"end", "epoch", "batch", "logs"}.

    Batch events come every `every_batches` batches (each one costs a loss readback on a GPU);
    set every_batches=0 for epoch events only. `report` may be a coroutine function.

    Example:
        >>> model = pib.Sequential([pib.layers.Dense(1, input_shape=(1,))])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> events = []
        >>> progress = pib.ProgressCallback(events.append, every_batches=0)
        >>> x = y = np.ones((4, 1))
        >>> history = await model.fit(x, y, epochs=2, callbacks=[progress])
        >>> [(e["event"], e["epoch"]) for e in events]
        [('epoch', 0), ('epoch', 1), ('end', 1)]
    """

    def __init__(self, report: Callable[[dict[str, Any]], Any], every_batches: int = 1) -> None:
        super().__init__()
        self.report, self.every_batches = report, every_batches
        self.wants_batch_logs = every_batches > 0
        self.epoch = 0

    def on_epoch_begin(self, epoch: int, logs: Logs) -> None:
        self.epoch = epoch

    def on_batch_end(self, batch: int, logs: Logs) -> Any:
        if self.every_batches and (batch + 1) % self.every_batches == 0:
            return self.report(
                {"event": "batch", "epoch": self.epoch, "batch": batch, "logs": logs}
            )
        return None

    def on_epoch_end(self, epoch: int, logs: Logs) -> Any:
        return self.report({"event": "epoch", "epoch": epoch, "batch": None, "logs": logs})

    def on_train_end(self, logs: Logs) -> Any:
        return self.report({"event": "end", "epoch": self.epoch, "batch": None, "logs": logs})
