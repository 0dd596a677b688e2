"""Primitive random_uniform on the cpu backend: bit-identical to the plain-Python oracle, bits that
look random (mean, per-bit balance, neighbouring indices, counters and streams independent), and
Dropout drawing its masks from it with a device-side counter."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import layers
from py_in_browser.testing.op_cases import random_uniform_reference

# 2^16 draws: each statistic below is a few standard deviations wide at this size, and the
# whole module runs in about a second.
N = 2**16
SIGMAS = 5.0


def draw(shape: Any, **kwargs: Any) -> np.ndarray:
    async def run() -> np.ndarray:
        await pib.init("cpu")
        with pib.tidy():
            return await pib.random_uniform(shape, **kwargs).numpy()

    return asyncio.run(run())


def top_bits(values: np.ndarray, bits: int = 24) -> np.ndarray:
    """The integers m of values m * 2^-bits (exact: values are float32 multiples of 2^-bits)."""
    m = values.astype(np.float64) * 2.0**bits
    assert np.array_equal(m, np.floor(m)) and m.min() >= 0 and m.max() < 2**bits
    return m.astype(np.int64)


@pytest.mark.parametrize(
    ("seed", "stream", "counter", "bits"),
    [
        (0, 0, 0, 24),
        (7, 1, 1, 24),
        (2**32 - 1, 2**32 - 1, 2**24 - 1, 24),
        (123, 4, 99, 22),
        (5, 6, 7, 11),
        (5, 6, 7, 1),
    ],
)
def test_bits_equal_the_reference_exactly(seed: int, stream: int, counter: int, bits: int) -> None:
    shape = (3, 37, 11)
    got = draw(shape, seed=seed, stream=stream, counter=counter, bits=bits)
    want = random_uniform_reference(counter, shape, seed, stream, bits)
    assert got.dtype == np.float32 and got.shape == shape
    assert np.array_equal(got.astype(np.float64), want)
    assert got.min() >= 0.0 and got.max() < 1.0


def test_counter_as_device_tensor_float_or_int_gives_the_same_draw() -> None:
    async def run() -> list[np.ndarray]:
        await pib.init("cpu")
        out = []
        for counter in (pib.tensor(41.0), pib.tensor(41, dtype="int32"), 41):
            out.append(await pib.random_uniform((64,), seed=3, counter=counter).numpy())
        return out

    a, b, c = asyncio.run(run())
    assert np.array_equal(a, b) and np.array_equal(a, c)


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="counter must be an int in"):
        draw((2,), counter=2**24)
    with pytest.raises(ValueError, match="seed must be an int in"):
        draw((2,), seed=-1)
    with pytest.raises(ValueError, match="bits must be an int in"):
        draw((2,), bits=25)

    async def vector_counter() -> None:
        await pib.init("cpu")
        pib.random_uniform((2,), counter=pib.tensor([1.0, 2.0]))

    with pytest.raises(TypeError, match="counter must be a float32 or int32 scalar"):
        asyncio.run(vector_counter())


def test_mean_and_per_bit_balance() -> None:
    values = draw((N,), seed=1, stream=2, counter=3)
    mean_sd = math.sqrt(1 / 12 / N)
    assert abs(values.mean() - 0.5) < SIGMAS * mean_sd, values.mean()
    m = top_bits(values)
    ones = np.array([((m >> b) & 1).mean() for b in range(24)])
    assert np.all(np.abs(ones - 0.5) < SIGMAS * math.sqrt(0.25 / N)), ones


def chi_square_pairs(a: np.ndarray, b: np.ndarray, cells: int = 16) -> float:
    """Chi-square of the joint histogram of (a, b) in cells x cells bins against independence."""
    ia, ib = (np.floor(v * cells).astype(np.int64) for v in (a, b))
    counts = np.bincount(ia * cells + ib, minlength=cells * cells)
    expected = len(a) / cells**2
    return float(((counts - expected) ** 2 / expected).sum())


def assert_independent(a: np.ndarray, b: np.ndarray) -> None:
    # cells^2 - 1 = 255 degrees of freedom: mean 255, standard deviation sqrt(510) = 22.6.
    chi2 = chi_square_pairs(a, b)
    assert abs(chi2 - 255) < SIGMAS * math.sqrt(510), chi2
    r = np.corrcoef(a, b)[0, 1]
    assert abs(r) < SIGMAS / math.sqrt(len(a)), r


def test_neighbouring_indices_are_independent() -> None:
    values = draw((2 * N,), seed=9, stream=0, counter=0)
    assert_independent(values[0::2], values[1::2])  # disjoint pairs (i, i + 1)
    # The low bits of neighbours too: an index-only hash with weak mixing fails here first.
    low = (top_bits(values) & 0xFF) / 256.0
    assert_independent(low[0::2], low[1::2])


def test_neighbouring_counters_and_streams_are_independent() -> None:
    base = draw((N,), seed=4, stream=1, counter=10)
    assert_independent(base, draw((N,), seed=4, stream=1, counter=11))
    assert_independent(base, draw((N,), seed=4, stream=2, counter=10))
    assert_independent(base, draw((N,), seed=5, stream=1, counter=10))
    # Not a shifted copy either (the failure mode of a one-round keyed hash).
    shifted = draw((N,), seed=4, stream=1, counter=11)
    assert len(np.intersect1d(base, shifted)) < 0.01 * N


def dropout_model(seed: int = 0) -> pib.Sequential:
    model = pib.Sequential(
        [
            layers.Dense(32, input_shape=(8,)),
            layers.Dropout(0.25),
            layers.Dense(2),
        ],
        seed=seed,
    )
    model.compile(optimizer="sgd", loss=pib.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def dropout_of(model: pib.Sequential) -> layers.Dropout:
    (layer,) = [la for la in model.layers if isinstance(la, layers.Dropout)]
    return layer


def test_dropout_masks_come_from_the_primitive_and_advance_per_call() -> None:
    async def run() -> tuple[list[np.ndarray], int, list[Any]]:
        await pib.init("cpu")
        layer = layers.Dropout(0.25, seed=3)
        ones = pib.ones((16, 64))
        outs = [await layer(ones, training=True).numpy() for _ in range(2)]
        inference = await layer(ones, training=False).numpy()
        assert np.array_equal(inference, np.ones((16, 64), np.float32))
        return outs, await layer.draw_count(), list(layer.seed)

    (first, second), count, (_, stream) = asyncio.run(run())
    assert count == 2
    for k, out in enumerate((first, second)):
        draw_k = random_uniform_reference(k, (16, 64), 3, stream, layers.DROPOUT_BITS)
        want = np.where(draw_k < 0.25, 0.0, np.float32(1 / 0.75))
        assert np.array_equal(out, want.astype(np.float32))
    assert abs((first == 0).mean() - 0.25) < 0.05
    assert not np.array_equal(first, second)


def test_fit_masks_are_seeded_and_reproducible() -> None:
    x = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)

    async def losses(model_seed: int) -> tuple[list[float], int]:
        await pib.init("cpu")
        model = dropout_model(model_seed)
        history = await model.fit(x, y, epochs=3, batch_size=16, seed=1)
        return history.history["loss"], await dropout_of(model).draw_count()

    a, draws = asyncio.run(losses(0))
    b, _ = asyncio.run(losses(0))
    c, _ = asyncio.run(losses(1))
    assert a == b
    assert a != c
    assert draws == 12  # one mask per train step: 3 epochs of 4 batches


def test_a_non_finite_step_does_not_advance_the_draw_counter() -> None:
    x = np.ones((4, 8), np.float32)
    y = np.ones((4, 1), np.float32)

    async def run() -> tuple[int, int]:
        await pib.init("cpu")
        model = pib.Sequential([layers.Dropout(0.5, input_shape=(8,)), layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        await model.train_on_batch(x, y)
        before = await dropout_of(model).draw_count()
        await model.train_on_batch(x, y * np.float32(1e30))  # squares to Inf in the mse loss
        return before, await dropout_of(model).draw_count()

    before, after = asyncio.run(run())
    assert (before, after) == (1, 1)


def test_draw_counter_is_device_state_not_a_weight() -> None:
    async def run() -> tuple[int, list[str]]:
        await pib.init("cpu")
        model = dropout_model()
        model.build((8,))
        return len(await model.get_weights()), [
            v.name for layer in model.layers for v in layer.state_variables()
        ]

    weights, state = asyncio.run(run())
    assert weights == 4  # two Dense kernels and biases, as Keras counts them
    assert len(state) == 1 and state[0].endswith("/draws")
