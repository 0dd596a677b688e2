"""Accuracy metrics as per-batch correct counts, summed on device and read back per epoch."""

from __future__ import annotations

from .. import functional as F
from ..tensor import Tensor
from . import losses


class Accuracy:
    """Counts correct predictions in a batch; kind is 'binary', 'categorical' or 'sparse'.

    fit and evaluate sum `correct` over an epoch on the device and report count / samples under
    `name`. binary: y_pred > threshold equals y_true (per element, averaged per sample);
    categorical: argmax of y_pred equals argmax of one-hot y_true; sparse: argmax of y_pred
    equals the integer label.

    Example:
        >>> acc = pib.metrics.Accuracy("sparse")
        >>> labels = pib.tensor([1, 0], dtype="int32")
        >>> await acc.correct(labels, pib.tensor([[0.2, 0.8], [0.3, 0.7]])).item()
        1.0
    """

    def __init__(self, kind: str, name: str = "accuracy", threshold: float = 0.5) -> None:
        self.kind, self.name, self.threshold = kind, name, threshold

    def correct(self, y_true: Tensor, y_pred: Tensor) -> Tensor:
        """Number of correct samples in the batch, as a float32 scalar (binary: mean per sample)."""
        if self.kind == "binary":
            predicted = F.cast(F.greater(y_pred, self.threshold), y_pred.dtype)
            hits = F.cast(F.equal(predicted, F.cast(y_true, y_pred.dtype)), "float32")
            per_sample = F.mean(hits, axis=tuple(range(1, hits.ndim))) if hits.ndim > 1 else hits
            return F.sum(per_sample)
        if self.kind == "categorical":
            truth = F.argmax(y_true, axis=-1)
        else:
            truth = F.reshape(F.cast(y_true, "int32"), (y_true.shape[0],))
        return F.sum(F.cast(F.equal(F.argmax(y_pred, axis=-1), truth), "float32"))


_ALIASES = {
    "binary_accuracy": "binary",
    "categorical_accuracy": "categorical",
    "sparse_categorical_accuracy": "sparse",
}


def get(metric: str | Accuracy, loss: losses.Loss, output_shape: tuple[int, ...]) -> Accuracy:
    """Resolves "accuracy"/"acc" from the loss and output shape, as Keras does.

    Sparse for SparseCategoricalCrossentropy, categorical for CategoricalCrossentropy, binary
    for BinaryCrossentropy or a single output, else categorical. "binary_accuracy",
    "categorical_accuracy" and "sparse_categorical_accuracy" name a kind directly.

    Example:
        >>> pib.metrics.get("accuracy", pib.losses.get("mse"), (1,)).kind
        'binary'
    """
    if isinstance(metric, Accuracy):
        return metric
    if metric in _ALIASES:
        return Accuracy(_ALIASES[metric], name=metric)
    if metric not in ("accuracy", "acc"):
        valid = ["accuracy", "acc", *_ALIASES]
        raise ValueError(f"metrics: unknown {metric!r}; expected one of {valid}")
    if isinstance(loss, losses.SparseCategoricalCrossentropy):
        kind = "sparse"
    elif isinstance(loss, losses.CategoricalCrossentropy):
        kind = "categorical"
    elif isinstance(loss, losses.BinaryCrossentropy) or output_shape[-1:] == (1,):
        kind = "binary"
    else:
        kind = "categorical"
    return Accuracy(kind, name=metric)
