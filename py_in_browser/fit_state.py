"""FitState: the device-side accumulators of one fit (or evaluate), shared by training and replay."""

from __future__ import annotations

from . import functional as F
from .runtime import tidy
from .tensor import Variable


class FitState:
    """Device-side accumulators of one fit: the ok flag, the loss sum and metric hit counts."""

    def __init__(self, num_metrics: int) -> None:
        self.ok = Variable(True, trainable=False, name="fit/ok", dtype="bool")
        self.loss_sum = Variable(0.0, trainable=False, name="fit/loss_sum")
        self.metric_sums = [
            Variable(0.0, trainable=False, name=f"fit/metric_{i}") for i in range(num_metrics)
        ]
        self.seen = 0

    def variables(self) -> list[Variable]:
        return [self.loss_sum, *self.metric_sums]

    def reset(self) -> None:
        with tidy():
            for v in self.variables():
                v.assign(F.zeros(()))
        self.seen = 0

    def dispose(self) -> None:
        for v in (self.ok, *self.variables()):
            v.dispose()
