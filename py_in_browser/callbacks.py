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
    wants_batch_logs = False

    def __init__(self) -> None:
        self.model: TrainableModel | None = None

    def set_model(self, model: TrainableModel) -> None:
        self.model = model

    def on_train_begin(self, logs: Logs) -> Any: ...

    def on_train_end(self, logs: Logs) -> Any: ...

    def on_epoch_begin(self, epoch: int, logs: Logs) -> Any: ...

    def on_epoch_end(self, epoch: int, logs: Logs) -> Any: ...

    def on_batch_end(self, batch: int, logs: Logs) -> Any: ...


async def call_hook(callbacks: list[Callback], hook: str, *args: Any) -> None:
    for cb in callbacks:
        result = getattr(cb, hook)(*args)
        if inspect.isawaitable(result):
            await result


class History(Callback):
    """history.history[name] holds one float per epoch; history.epoch the epoch indices."""

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
    """Stops when `monitor` has not improved by min_delta for `patience` epochs."""

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
    """Wraps plain functions: LambdaCallback(on_epoch_end=lambda epoch, logs: ...)."""

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        super().__init__()
        allowed = {
            "on_train_begin",
            "on_train_end",
            "on_epoch_begin",
            "on_epoch_end",
            "on_batch_end",
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
    set every_batches=0 for epoch events only.
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
