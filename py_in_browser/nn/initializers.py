"""Seeded weight initializers (glorot_uniform, he_normal, zeros, ones) returning numpy arrays.

Seed scheme: weight j of layer i in a model seeded s draws from
np.random.Generator(np.random.PCG64([s, i, j])), so weights do not depend on creation order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Initializer = Callable[[tuple[int, ...], np.random.Generator], np.ndarray]


def fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) as Keras computes them for dense (in, out) and conv (h, w, in, out)."""
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = int(np.prod(shape[:-2], dtype=np.int64))
    return shape[-2] * receptive, shape[-1] * receptive


def glorot_uniform(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    fan_in, fan_out = fans(shape)
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, shape).astype(np.float32)


def he_normal(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Truncated normal (redrawn beyond 2 sigma) with Keras' stddev correction 0.87962566."""
    fan_in, _ = fans(shape)
    stddev = np.sqrt(2.0 / fan_in) / 0.87962566103423978
    values = rng.standard_normal(shape)
    outside = np.abs(values) > 2
    while outside.any():
        values[outside] = rng.standard_normal(int(outside.sum()))
        outside = np.abs(values) > 2
    return (values * stddev).astype(np.float32)


def zeros(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return np.zeros(shape, dtype=np.float32)


def ones(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return np.ones(shape, dtype=np.float32)


INITIALIZERS: dict[str, Initializer] = {
    "glorot_uniform": glorot_uniform,
    "he_normal": he_normal,
    "zeros": zeros,
    "ones": ones,
}


def get(initializer: str | Initializer) -> Initializer:
    if callable(initializer):
        return initializer
    if initializer not in INITIALIZERS:
        raise ValueError(
            f"initializer: unknown {initializer!r}; expected one of {sorted(INITIALIZERS)}"
        )
    return INITIALIZERS[initializer]


def rng_for(seed: int, layer_index: int, weight_index: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([seed, layer_index, weight_index]))
