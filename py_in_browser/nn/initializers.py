"""Seeded weight initializers (glorot_uniform, he_normal, zeros, ones) returning numpy arrays.

Seed scheme: weight j of layer i in a model seeded s draws from
np.random.Generator(np.random.PCG64([s, i, j])), so weights do not depend on creation order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Initializer = Callable[[tuple[int, ...], np.random.Generator], np.ndarray]


def fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) as Keras computes them for dense (in, out) and conv (h, w, in, out).

    Example:
        >>> pib.initializers.fans((3, 3, 16, 32))  # 3 * 3 * 16, 3 * 3 * 32
        (144, 288)
    """
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = int(np.prod(shape[:-2], dtype=np.int64))
    return shape[-2] * receptive, shape[-1] * receptive


def glorot_uniform(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Uniform on [-limit, limit], limit = sqrt(6 / (fan_in + fan_out)) (Dense's and Conv2D's
    default kernel initializer).

    Example:
        >>> w = pib.initializers.glorot_uniform((100, 50), np.random.default_rng(0))
        >>> bool(np.abs(w).max() <= np.sqrt(6 / 150)), w.dtype
        (True, dtype('float32'))
    """
    fan_in, fan_out = fans(shape)
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, shape).astype(np.float32)


def he_normal(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Truncated normal (redrawn beyond 2 sigma) with Keras' stddev correction 0.87962566.

    The standard deviation before truncation is sqrt(2 / fan_in) / 0.87962566, so that of the
    truncated values is sqrt(2 / fan_in).

    Example:
        >>> w = pib.initializers.he_normal((1000, 10), np.random.default_rng(0))
        >>> limit = 2 * np.sqrt(2 / 1000) / 0.87962566
        >>> bool(np.abs(w).max() <= limit), round(float(w.std()), 3)
        (True, 0.045)
    """
    fan_in, _ = fans(shape)
    stddev = np.sqrt(2.0 / fan_in) / 0.87962566103423978
    values = rng.standard_normal(shape)
    outside = np.abs(values) > 2
    while outside.any():
        values[outside] = rng.standard_normal(int(outside.sum()))
        outside = np.abs(values) > 2
    return (values * stddev).astype(np.float32)


def zeros(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """All zeros, float32 (the default bias initializer).

    Example:
        >>> pib.initializers.zeros((2,), np.random.default_rng(0))
        array([0., 0.], dtype=float32)
    """
    return np.zeros(shape, dtype=np.float32)


def ones(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """All ones, float32.

    Example:
        >>> pib.initializers.ones((2,), np.random.default_rng(0))
        array([1., 1.], dtype=float32)
    """
    return np.ones(shape, dtype=np.float32)


INITIALIZERS: dict[str, Initializer] = {
    "glorot_uniform": glorot_uniform,
    "he_normal": he_normal,
    "zeros": zeros,
    "ones": ones,
}


def get(initializer: str | Initializer) -> Initializer:
    """The initializer for a name (glorot_uniform, he_normal, zeros, ones), a function
    (shape, rng) -> array as is; unknown names raise ValueError listing the valid ones.

    Example:
        >>> pib.initializers.get("ones") is pib.initializers.ones
        True
    """
    if callable(initializer):
        return initializer
    if initializer not in INITIALIZERS:
        raise ValueError(
            f"initializer: unknown {initializer!r}; expected one of {sorted(INITIALIZERS)}"
        )
    return INITIALIZERS[initializer]


def rng_for(seed: int, layer_index: int, weight_index: int) -> np.random.Generator:
    """The generator weight `weight_index` of layer `layer_index` in a model seeded `seed`
    draws from: PCG64([seed, layer_index, weight_index]).

    Example:
        >>> a = pib.initializers.rng_for(0, 1, 0).uniform()
        >>> a == pib.initializers.rng_for(0, 1, 0).uniform()
        True
    """
    return np.random.Generator(np.random.PCG64([seed, layer_index, weight_index]))
