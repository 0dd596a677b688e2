"""Activation functions by name, as Keras resolves `activation="relu"`."""

from __future__ import annotations

from collections.abc import Callable

from .. import functional as F
from ..tensor import Tensor

Activation = Callable[[Tensor], Tensor]


def linear(x: Tensor) -> Tensor:
    """The identity, f(x) = x: what ``activation=None`` means.

    Example:
        >>> x = pib.tensor([-1.0])
        >>> pib.activations.linear(x) is x
        True
    """
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
    """The activation function for a name, a function as is; None means linear; unknown names
    raise ValueError listing the valid ones.

    Names: linear, relu, leaky_relu, sigmoid, tanh, softmax, log_softmax, gelu (each the
    function of the same name in the package, e.g. `py_in_browser.functional.relu`).

    Example:
        >>> pib.activations.get("relu") is pib.relu
        True
        >>> await pib.activations.get("sigmoid")(pib.tensor([0.0])).numpy()
        array([0.5], dtype=float32)
    """
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
    """The name `get` knows an activation by, else its __name__ (as Sequential.summary shows).

    Example:
        >>> pib.activations.name_of(pib.gelu)
        'gelu'
    """
    for name, fn in ACTIVATIONS.items():
        if fn is activation:
            return name
    return getattr(activation, "__name__", "custom")
