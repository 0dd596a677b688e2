"""TrainableModel: what the training modules (callbacks, replay, training, checkpoint) use of a model.

Sequential implements it. A Protocol rather than the class itself because model.py builds on those
modules (its fit, evaluate and checkpoints delegate to them): they sit below it, and are still
type-checked against exactly the part of the model they touch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from .nn.layers import Layer
from .nn.losses import Loss
from .nn.metrics import Accuracy
from .optimizers import Optimizer
from .tensor import Tensor, Variable


class TrainableModel(Protocol):
    """A compiled stack of layers as fit, train_on_batch, replay, checkpoints and callbacks see it."""

    layers: list[Layer]
    seed: int
    optimizer: Optimizer | None
    loss: Loss | None
    # Keras' callback protocol: a callback sets it to end fit after the current batch.
    stop_training: bool

    @property
    def built(self) -> bool: ...

    @property
    def input_shape(self) -> tuple[int, ...] | None: ...

    @property
    def output_shape(self) -> tuple[int, ...]: ...

    @property
    def weights(self) -> list[Variable]: ...

    @property
    def trainable_weights(self) -> list[Variable]: ...

    def build(self, input_shape: Sequence[int] | None = None) -> None: ...

    def __call__(self, x: Any, training: bool = False) -> Tensor: ...

    def resolved_metrics(self) -> list[Accuracy]: ...

    async def get_weights(self) -> list[np.ndarray]: ...

    def set_weights(self, weights: Sequence[Any]) -> None: ...

    async def save_checkpoint(self) -> bytes: ...
