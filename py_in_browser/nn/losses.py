"""Losses with Keras semantics (mean over the batch); probabilities by default, logits optional."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import autograd, fusion
from .. import functional as F
from ..tensor import Tensor, tensor

_EPS = 1e-7  # Keras' backend epsilon: probabilities are clipped to [eps, 1 - eps]


class Loss:
    """Callable loss(y_true, y_pred) -> scalar tensor; also validates targets on the host.

    Every loss is a mean over the batch (Keras's "sum_over_batch_size"). `from_logits`: the
    predictions are raw scores instead of probabilities (more accurate, and fused on the GPU).
    `Sequential.compile` takes a Loss or its name (see `get`).

    Example:
        >>> loss = pib.losses.MeanSquaredError()
        >>> await loss(pib.tensor([[1.0], [3.0]]), pib.tensor([[2.0], [3.0]])).item()
        0.5
    """

    name = "loss"
    target_dtype = "float32"

    def __init__(self, from_logits: bool = False) -> None:
        self.from_logits = from_logits

    def __call__(self, y_true: Tensor, y_pred: Tensor) -> Tensor:
        raise NotImplementedError

    def check_targets(self, y: np.ndarray, output_shape: tuple[int, ...]) -> None:
        """Raises ValueError when y cannot be a target for outputs of shape
        ``(batch, *output_shape)``."""
        if y.shape[1:] != output_shape:
            raise ValueError(
                f"y: expected targets of shape (samples, *{output_shape}) for loss {self.name!r}, "
                f"got {y.shape}"
            )


def _squared_error(count: float) -> Callable[..., fusion.Value]:
    """A term of the mean squared error over `count` elements."""
    return lambda p, t: (p - t) * (p - t) * (1.0 / count)


class MeanSquaredError(Loss):
    """mean((y_pred - y_true)^2) as one fused program and one sum (one kernel for its gradient).

    The mean runs over every element, after broadcasting y_true against y_pred. Names: "mse",
    "mean_squared_error".

    Example:
        >>> mse = pib.losses.MeanSquaredError()
        >>> await mse(pib.tensor([[0.0, 1.0]]), pib.tensor([[1.0, 3.0]])).item()
        2.5
    """

    name = "mse"

    def __call__(self, y_true: Tensor, y_pred: Tensor) -> Tensor:
        target = F.broadcast_to(y_true, F.broadcast_shapes(y_true.shape, y_pred.shape))
        pred = F.broadcast_to(y_pred, target.shape)
        return F.sum(F.fused(_squared_error(float(np.prod(pred.shape))), pred, target))


class BinaryCrossentropy(Loss):
    """-mean(y * log(p) + (1 - y) * log(1 - p)) over every element, for targets y in [0, 1].

    Probabilities p are clipped to [1e-7, 1 - 1e-7] first (Keras's epsilon). With
    from_logits=True, p = sigmoid(x) is folded in as ``max(x, 0) - x * y + log(1 + exp(-|x|))``,
    which never overflows. Name: "binary_crossentropy".

    Example:
        >>> bce = pib.losses.BinaryCrossentropy()
        >>> y, p = pib.tensor([1.0, 0.0]), pib.tensor([0.9, 0.2])
        >>> round(await bce(y, p).item(), 4)  # -(log 0.9 + log 0.8) / 2
        0.1643
    """

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


def _shifted_exp(x: fusion.Value, row_max: fusion.Value) -> fusion.Value:
    return fusion.exp(x - row_max)


def _weighted_terms(rows: float) -> Callable[..., fusion.Value]:
    """target * -log_softmax(x) / rows, with log_softmax = x - max - log(sum exp(x - max))."""
    return lambda t, x, m, s: t * (m + fusion.log(s) - x) * (1.0 / rows)


def _masked_terms(rows: float, classes: float) -> Callable[..., fusion.Value]:
    """The same for a bool mask target (sparse labels): a row's terms add up to its
    logsumexp minus its masked logits, so no row count of the mask is needed."""
    return lambda t, x, m, s: (
        (m + fusion.log(s)) * (1.0 / (rows * classes)) - fusion.where(t, x, 0.0) * (1.0 / rows)
    )


def _masked_gradient(rows: float) -> Callable[..., fusion.Value]:
    """d(loss)/d(logits) for a mask target: g * (softmax(x) - mask) / rows."""
    return lambda t, x, m, s, g: (
        g * (fusion.exp(x - m) / s - fusion.where(t, 1.0, 0.0)) * (1.0 / rows)
    )


def _weighted_gradient(rows: float) -> Callable[..., fusion.Value]:
    """d(loss)/d(logits) for float targets: g * (softmax(x) * row sum of t - t) / rows."""
    return lambda t, x, m, s, k, g: g * (fusion.exp(x - m) / s * k - t) * (1.0 / rows)


def _target_gradient(rows: float) -> Callable[..., fusion.Value]:
    """d(loss)/d(float targets): g * -log_softmax(x) / rows."""
    return lambda x, m, s, g: g * (m + fusion.log(s) - x) * (1.0 / rows)


def _row_max_and_sum(logits: Tensor) -> tuple[Tensor, Tensor]:
    """The rows' (gradient-free) max and their sum of exp(x - max), as broadcast views."""
    shape = logits.shape
    row_max = F.broadcast_to(F.stop_gradient(F.max(logits, -1, keepdims=True)), shape)
    total = F.sum(F.fused(_shifted_exp, logits, row_max), -1, keepdims=True)
    return row_max, F.broadcast_to(total, shape)


def softmax_cross_entropy(target: Tensor, logits: Tensor) -> Tensor:
    """mean over rows of sum_j target_j * -log_softmax(logits)_j. `target` is float weights or
    a bool one-hot mask of the logits' shape (a mask row's loss is its logsumexp minus its
    masked logits).

    The forward pass is two reductions and two fused programs (the rows' max and sum read in
    place as broadcast views) and one sum; the backward pass is one fused program, softmax
    minus the target (plus the targets' row sum for float targets), not the op-by-op
    gradient. Under an outer tape (a gradient of a gradient) that kernel reads the rows' max
    and sum recomputed in recorded ops, so its own gradient is exact.

    Example:
        >>> logits = pib.tensor([[0.0, 0.0], [0.0, 0.0]])
        >>> target = pib.tensor([[0.0, 1.0], [1.0, 0.0]])
        >>> round(await pib.losses.softmax_cross_entropy(target, logits).item(), 4)  # log 2
        0.6931
    """
    shape = logits.shape
    rows = float(np.prod(shape[:-1], dtype=np.int64))
    masked = target.dtype == "bool"
    with autograd.paused():
        row_max, total = _row_max_and_sum(logits)
        terms = _masked_terms(rows, float(shape[-1])) if masked else _weighted_terms(rows)
        loss = F.sum(F.fused(terms, target, logits, row_max, total))
    if not autograd.active_tapes:
        return loss

    def rows_now() -> tuple[Tensor, Tensor]:
        # The forward's views when nothing records; recorded anew when an outer tape does.
        return _row_max_and_sum(logits) if autograd.recording() else (row_max, total)

    def vjp(g: Tensor) -> list[Callable[[], Tensor] | None]:
        filled = F.broadcast_to(g, shape)

        def logits_gradient() -> Tensor:
            m, s = rows_now()
            if masked:
                return F.fused(_masked_gradient(rows), target, logits, m, s, filled)
            k = F.broadcast_to(F.sum(target, -1, keepdims=True), shape)
            return F.fused(_weighted_gradient(rows), target, logits, m, s, k, filled)

        def target_gradient() -> Tensor:
            m, s = rows_now()
            return F.fused(_target_gradient(rows), logits, m, s, filled)

        return [None if masked else target_gradient, logits_gradient]

    autograd.record_composite((target, logits), loss, vjp)
    return loss


# Every training step with a logits loss runs these, forward and backward (see fusion.py).
fusion.register_common(fusion.trace(_squared_error(1.0), 2), ("full", "full"), "filled", wrt=(0,))
# Softmax cross-entropy on logits with class labels (the mask) is the typical classifier's loss
# (fusion.typical_programs); its gradient programs are its own (softmax_cross_entropy's VJP).
for _fn, _kinds, _typical in (
    (_shifted_exp, ("full", "rows"), True),
    (_masked_terms(1.0, 1.0), ("mask", "full", "rows", "rows"), True),
    (_masked_gradient(1.0), ("mask", "full", "rows", "rows", "filled"), True),
    (_weighted_terms(1.0), ("full", "full", "rows", "rows"), False),
    (_weighted_gradient(1.0), ("full", "full", "rows", "rows", "rows", "filled"), False),
    (_target_gradient(1.0), ("full", "rows", "rows", "filled"), False),
):
    fusion.register_common(fusion.trace(_fn, len(_kinds)), _kinds, typical=_typical)


class CategoricalCrossentropy(Loss):
    """mean over rows of -sum_j y_j * log(p_j), for one-hot (or soft) targets y.

    As Keras: each row of probabilities is divided by its sum, then clipped to [1e-7, 1 - 1e-7].
    With from_logits=True, log(p) = log_softmax(logits) (`softmax_cross_entropy`). Name:
    "categorical_crossentropy".

    Example:
        >>> cce = pib.losses.CategoricalCrossentropy()
        >>> y, p = pib.tensor([[0.0, 1.0]]), pib.tensor([[0.2, 0.8]])
        >>> round(await cce(y, p).item(), 4)  # -log 0.8
        0.2231
    """

    name = "categorical_crossentropy"

    def __call__(self, y_true: Tensor, y_pred: Tensor) -> Tensor:
        if self.from_logits:
            return softmax_cross_entropy(y_true, y_pred)
        return F.mean(F.neg(F.sum(F.mul(y_true, self._log_probs(y_pred)), axis=-1)))

    def _log_probs(self, y_pred: Tensor) -> Tensor:
        # Keras renormalises probabilities, then clips before the log.
        p = F.div(y_pred, F.sum(y_pred, axis=-1, keepdims=True))
        return F.log(F.clip(p, _EPS, 1.0 - _EPS))


class SparseCategoricalCrossentropy(CategoricalCrossentropy):
    """`CategoricalCrossentropy` with integer class labels of shape (batch,) or (batch, 1).

    fit checks the labels are integers in [0, classes). Name: "sparse_categorical_crossentropy".

    Example:
        >>> scce = pib.losses.SparseCategoricalCrossentropy(from_logits=True)
        >>> labels, logits = pib.tensor([1], dtype="int32"), pib.tensor([[0.0, 0.0]])
        >>> round(await scce(labels, logits).item(), 4)  # log 2
        0.6931
    """

    name = "sparse_categorical_crossentropy"
    target_dtype = "int32"

    def __call__(self, y_true: Tensor, y_pred: Tensor) -> Tensor:
        labels = F.reshape(y_true, (y_true.shape[0],))
        if self.from_logits:  # the one-hot target as a bool mask, never a float tensor
            ramp = tensor(np.arange(y_pred.shape[-1]), dtype=labels.dtype)
            return softmax_cross_entropy(F.equal(F.reshape(labels, (-1, 1)), ramp), y_pred)
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
    """A Loss as is, or a new one from its name (probabilities, not logits); unknown names
    raise ValueError listing the valid ones.

    Example:
        >>> type(pib.losses.get("mse")).__name__
        'MeanSquaredError'
    """
    if isinstance(loss, Loss):
        return loss
    if isinstance(loss, str) and loss in LOSSES:
        return LOSSES[loss]()
    raise ValueError(f"loss: unknown {loss!r}; expected a Loss or one of {sorted(LOSSES)}")
