"""Activation functions by name, as Keras resolves `activation="relu"`."""

from __future__ import annotations

from collections.abc import Callable

from .. import functional as F
from ..tensor import Tensor

Activation = Callable[[Tensor], Tensor]


def linear(x: Tensor) -> Tensor:
    return x


ACTIVATIONS: dict[str, Activation] = {
    "linear": linear,
    "relu": F.relu,
    "leaky_relu": F.leaky_relu,
    "sigmoid": F.sigmoid,
    "tanh": F.tanh,
    "softmax": F.softmax,
    "log_softmax": F.log_softmax,
    "gelu": F.gelu,
}


def get(activation: str | Activation | None) -> Activation:
    """None means linear; unknown names raise ValueError listing the valid ones."""
    if activation is None:
        return linear
    if callable(activation):
        return activation
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(
            f"activation: unknown {activation!r}; expected one of {sorted(ACTIVATIONS)}"
        )
    return ACTIVATIONS[activation]


def name_of(activation: Activation) -> str:
    for name, fn in ACTIVATIONS.items():
        if fn is activation:
            return name
    return getattr(activation, "__name__", "custom")
