"""Losses with Keras semantics (mean over the batch); probabilities by default, logits optional."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import functional as F
from ..tensor import Tensor

_EPS = 1e-7  # Keras' backend epsilon: probabilities are clipped to [eps, 1 - eps]


class Loss:
    """Callable loss(y_true, y_pred) -> scalar tensor; also validates targets on the host."""

    name = "loss"
    target_dtype = "float32"

    def __init__(self, from_logits: bool = False) -> None:
        self.from_logits = from_logits

    def __call__(self, y_true: Tensor, y_pred: Tensor) -> Tensor:
        raise NotImplementedError

    def check_targets(self, y: np.ndarray, output_shape: tuple[int, ...]) -> None:
        """Raises ValueError when y cannot be a target for outputs of shape (batch, *output_shape)."""
        if y.shape[1:] != output_shape:
            raise ValueError(
                f"y: expected targets of shape (samples, *{output_shape}) for loss {self.name!r}, "
                f"got {y.shape}"
            )


class MeanSquaredError(Loss):
    name = "mse"

    def __call__(self, y_true: Tensor, y_pred: Tensor) -> Tensor:
        return F.mean(F.square(F.sub(y_pred, y_true)))


class BinaryCrossentropy(Loss):
    name = "binary_crossentropy"

    def __call__(self, y_true: Tensor, y_pred: Tensor) -> Tensor:
        if self.from_logits:
            # max(x, 0) - x z + log(1 + exp(-|x|)): never overflows.
            per = F.add(
                F.sub(F.relu(y_pred), F.mul(y_pred, y_true)),
                F.log(F.add(F.exp(F.neg(F.abs(y_pred))), 1.0)),
            )
            return F.mean(per)
        p = F.clip(y_pred, _EPS, 1.0 - _EPS)
        per = F.add(F.mul(y_true, F.log(p)), F.mul(F.sub(1.0, y_true), F.log(F.sub(1.0, p))))
        return F.neg(F.mean(per))


class CategoricalCrossentropy(Loss):
    name = "categorical_crossentropy"

    def __call__(self, y_true: Tensor, y_pred: Tensor) -> Tensor:
        return F.mean(F.neg(F.sum(F.mul(y_true, self._log_probs(y_pred)), axis=-1)))

    def _log_probs(self, y_pred: Tensor) -> Tensor:
        if self.from_logits:
            return F.log_softmax(y_pred, axis=-1)
        # Keras renormalises probabilities, then clips before the log.
        p = F.div(y_pred, F.sum(y_pred, axis=-1, keepdims=True))
        return F.log(F.clip(p, _EPS, 1.0 - _EPS))


class SparseCategoricalCrossentropy(CategoricalCrossentropy):
    name = "sparse_categorical_crossentropy"
    target_dtype = "int32"

    def __call__(self, y_true: Tensor, y_pred: Tensor) -> Tensor:
        labels = F.reshape(y_true, (y_true.shape[0],))
        onehot = F.one_hot(labels, y_pred.shape[-1], dtype=y_pred.dtype)
        return super().__call__(onehot, y_pred)

    def check_targets(self, y: np.ndarray, output_shape: tuple[int, ...]) -> None:
        if y.ndim not in (1, 2) or (y.ndim == 2 and y.shape[1] != 1):
            raise ValueError(
                f"y: sparse labels must have shape (samples,) or (samples, 1), got {y.shape}"
            )
        classes = output_shape[-1]
        if not np.all(np.equal(np.mod(y, 1), 0)):
            raise ValueError("y: sparse labels must be integers")
        if y.size and (y.min() < 0 or y.max() >= classes):
            raise ValueError(
                f"y: labels must be in [0, {classes}) for a model with {classes} outputs; "
                f"got range [{y.min()}, {y.max()}]"
            )


LOSSES: dict[str, type[Loss]] = {
    "mse": MeanSquaredError,
    "mean_squared_error": MeanSquaredError,
    "binary_crossentropy": BinaryCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
}


def get(loss: Any) -> Loss:
    if isinstance(loss, Loss):
        return loss
    if isinstance(loss, str) and loss in LOSSES:
        return LOSSES[loss]()
    raise ValueError(f"loss: unknown {loss!r}; expected a Loss or one of {sorted(LOSSES)}")
