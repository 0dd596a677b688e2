"""Recorded cpu train steps replayed by the SIMD module (wasmtime here, as Pyodide would run it):
the replayed steps give the bits of the same steps run eagerly, op by op."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import layers, optimizers, replay, runtime
from py_in_browser.backends import cpu
from tests_unit.wasm_simd import BUILDS, WasmSimd, native_simd

STEPS = 5
XOR_X = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32)
XOR_Y = np.array([[0], [1], [1], [0]], dtype=np.float32)


@pytest.fixture(scope="module", params=BUILDS)
def simd(request: pytest.FixtureRequest) -> WasmSimd:
    return native_simd(request.param)


@pytest.fixture
def with_simd(simd: WasmSimd, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The cpu backend as in Pyodide: its kernels and its recordings use the module."""
    monkeypatch.setattr(cpu, "SIMD", simd.kernels)
    yield


def xor_mlp() -> tuple[pib.Sequential, np.ndarray, np.ndarray]:
    """W1 of the benchmark: 2-4-1, mse, SGD, batch 4."""
    model = pib.Sequential(
        [layers.Dense(4, activation="relu", input_shape=(2,)), layers.Dense(1, "sigmoid")], seed=1
    )
    model.compile(optimizer=optimizers.SGD(0.1), loss="mse")
    return model, XOR_X, XOR_Y


def softmax_mlp() -> tuple[pib.Sequential, np.ndarray, np.ndarray]:
    """W2 shrunk: softmax cross-entropy on int labels, Adam."""
    rng = np.random.default_rng(2)
    model = pib.Sequential(
        [layers.Dense(8, activation="relu", input_shape=(12,)), layers.Dense(3)], seed=2
    )
    model.compile(
        optimizer=optimizers.Adam(0.01),
        loss=pib.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x = rng.uniform(-1, 1, (6, 12)).astype(np.float32)
    return model, x, rng.integers(0, 3, 6).astype(np.int32)


def small_cnn() -> tuple[pib.Sequential, np.ndarray, np.ndarray]:
    """W3 shrunk: convolution, max pooling, dense; Adam. 5 filters: a merged bias and relu
    (epilogues.py) runs over whole vectors and a tail."""
    rng = np.random.default_rng(3)
    model = pib.Sequential(
        [
            layers.Conv2D(5, 3, activation="relu", padding="same", input_shape=(6, 6, 2)),
            layers.MaxPool2D(2),
            layers.Flatten(),
            layers.Dense(2),
        ],
        seed=3,
    )
    model.compile(
        optimizer=optimizers.Adam(0.01),
        loss=pib.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x = rng.uniform(-1, 1, (2, 6, 6, 2)).astype(np.float32)
    return model, x, rng.integers(0, 2, 2).astype(np.int32)


def train(
    make: Callable[[], tuple[pib.Sequential, np.ndarray, np.ndarray]], replayed: bool
) -> tuple[list[np.ndarray], list[np.ndarray], int]:
    """Losses and final weights of STEPS train_on_batch steps, and how many were replayed."""
    replay.ENABLED = replayed
    try:
        model, x, y = make()
        before = runtime.current_backend().memory_stats()["steps_replayed"]

        async def steps() -> tuple[list[np.ndarray], list[np.ndarray]]:
            losses = []
            for _ in range(STEPS):
                loss = await model.train_on_batch(x, y)
                losses.append(await loss.numpy())
                loss.dispose()
            return losses, list(await model.get_weights())

        losses, weights = asyncio.run(steps())
        done = runtime.current_backend().memory_stats()["steps_replayed"] - before
        return losses, weights, done
    finally:
        replay.ENABLED = True


@pytest.mark.usefixtures("with_simd")
@pytest.mark.parametrize("make", [xor_mlp, softmax_mlp, small_cnn], ids=["W1", "W2", "W3"])
def test_replayed_steps_give_the_eager_steps_bits(make: Any) -> None:
    eager_losses, eager_weights, none = train(make, replayed=False)
    losses, weights, replayed = train(make, replayed=True)
    assert none == 0
    assert replayed == STEPS - 2  # two recordings that agree, then replays
    for got, want in zip([*losses, *weights], [*eager_losses, *eager_weights], strict=True):
        np.testing.assert_array_equal(got, want)


def dropout_mlp() -> tuple[pib.Sequential, np.ndarray, np.ndarray]:
    """Dropout's mask is drawn by numpy (the counter hash), outside the module."""
    model = pib.Sequential(
        [layers.Dense(4, "relu", input_shape=(2,)), layers.Dropout(0.5), layers.Dense(1)], seed=1
    )
    model.compile(optimizer=optimizers.SGD(0.1), loss="mse")
    return model, XOR_X, XOR_Y


@pytest.mark.usefixtures("with_simd")
def test_a_step_computed_partly_outside_the_module_stays_eager() -> None:
    eager_losses, eager_weights, _ = train(dropout_mlp, replayed=False)
    losses, weights, replayed = train(dropout_mlp, replayed=True)
    assert replayed == 0
    for got, want in zip([*losses, *weights], [*eager_losses, *eager_weights], strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.usefixtures("with_simd")
@pytest.mark.parametrize("as_tensor", [False, True])
def test_replayed_predictions_give_the_eager_bits_and_follow_the_weights(as_tensor: bool) -> None:
    """predict's forward passes replay from the third call; each result stays the caller's,
    and training between calls (weights moved to new buffers, or updated in place by replayed
    steps) shows in the next replayed prediction."""

    def predictions(replayed: bool) -> tuple[list[np.ndarray], int]:
        replay.ENABLED = replayed
        try:
            model, x, y = small_cnn()
            before = runtime.current_backend().memory_stats()["steps_replayed"]

            async def calls() -> list[np.ndarray]:
                inputs = pib.tensor(x) if as_tensor else x
                held = [await model.predict(inputs) for _ in range(4)]
                for _ in range(3):
                    (await model.train_on_batch(x, y)).dispose()
                held += [await model.predict(inputs) for _ in range(2)]
                return [await t.numpy() for t in held]

            outputs = asyncio.run(calls())
            return outputs, runtime.current_backend().memory_stats()["steps_replayed"] - before
        finally:
            replay.ENABLED = True

    eager, none = predictions(replayed=False)
    replayed, count = predictions(replayed=True)
    assert none == 0 and count == 4 + 1  # predictions 3, 4, 5, 6 and the third train step
    assert not np.array_equal(eager[0], eager[-1])  # training moved the predictions
    for got, want in zip(replayed, eager, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.usefixtures("with_simd")
def test_replayed_steps_skip_a_non_finite_batch_as_eager_steps_do() -> None:
    """A NaN batch (tensors: host arrays are checked for NaN first) among replayed steps
    changes nothing (the gated update), as eagerly."""
    bad = XOR_X.copy()
    bad[1, 0] = np.nan
    batches = [XOR_X, XOR_X, XOR_X, bad, XOR_X, XOR_X]

    def run(replayed: bool) -> tuple[list[np.ndarray], int]:
        replay.ENABLED = replayed
        try:
            model, _, y = xor_mlp()
            before = runtime.current_backend().memory_stats()["steps_replayed"]

            async def steps() -> list[np.ndarray]:
                yt = pib.tensor(y)
                losses = [
                    await (await model.train_on_batch(pib.tensor(x), yt)).numpy() for x in batches
                ]
                return losses + list(await model.get_weights())

            values = asyncio.run(steps())
            return values, runtime.current_backend().memory_stats()["steps_replayed"] - before
        finally:
            replay.ENABLED = True

    (eager, _), (replayed, count) = run(False), run(True)
    assert count == len(batches) - 2 and np.isnan(replayed[3])
    for got, want in zip(replayed, eager, strict=True):
        np.testing.assert_array_equal(got, want)
