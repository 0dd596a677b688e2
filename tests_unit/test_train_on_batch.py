"""model.train_on_batch: fit's step on one batch, lazily returned loss, shared state, clear errors."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import layers, optimizers

RNG = np.random.default_rng(0)
X = RNG.standard_normal((48, 6)).astype(np.float32)
Y = RNG.integers(0, 3, 48).astype(np.int32)
BATCH = 16


def mlp(optimizer: Any = None) -> pib.Sequential:
    model = pib.Sequential(
        [layers.Dense(8, activation="relu", input_shape=(6,)), layers.Dense(3)], seed=3
    )
    model.compile(
        optimizer=optimizer or optimizers.Adam(0.01),
        loss=pib.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def batches(epochs: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [
        (X[i : i + BATCH], Y[i : i + BATCH]) for _ in range(epochs) for i in range(0, 48, BATCH)
    ]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.mark.parametrize("as_tensors", [False, True])
@pytest.mark.parametrize("optimizer", ["adam", "sgd_momentum", "rmsprop"])
def test_steps_give_fits_weights_bit_for_bit(as_tensors: bool, optimizer: str) -> None:
    def make() -> pib.Sequential:
        opt = {
            "adam": lambda: optimizers.Adam(0.01),
            "sgd_momentum": lambda: optimizers.SGD(0.1, momentum=0.9),
            "rmsprop": lambda: optimizers.RMSprop(0.01),
        }[optimizer]()
        return mlp(opt)

    fitted = make()
    run(fitted.fit(X, Y, epochs=2, batch_size=BATCH, shuffle=False))
    stepped = make()

    async def steps() -> None:
        for xa, ya in batches(2):
            batch: tuple[Any, Any] = (xa, ya)
            if as_tensors:
                batch = (pib.tensor(xa), pib.tensor(ya, dtype="int32"))
            loss = await stepped.train_on_batch(*batch)
            assert isinstance(loss, pib.Tensor) and loss.shape == ()
            loss.dispose()

    run(steps())
    for a, b in zip(run(fitted.get_weights()), run(stepped.get_weights()), strict=True):
        np.testing.assert_array_equal(a, b)


def test_loss_is_the_batch_loss_and_return_dict_reads_it() -> None:
    model, twin = mlp(), mlp()
    loss = run(model.train_on_batch(X[:BATCH], Y[:BATCH]))
    logs = run(twin.train_on_batch(X[:BATCH], Y[:BATCH], return_dict=True))
    assert isinstance(logs, dict) and set(logs) == {"loss", "accuracy"}
    assert float(run(loss.numpy())) == pytest.approx(logs["loss"], rel=1e-6)
    # The loss is the one before the update, as Keras reports it.
    expected = run(mlp().evaluate(X[:BATCH], Y[:BATCH], batch_size=BATCH))
    assert logs == pytest.approx(expected, rel=1e-6)


def test_fit_after_train_on_batch_continues_from_its_weights_and_shares_the_trainer() -> None:
    model, reference = mlp(), mlp()
    run(model.train_on_batch(X[:BATCH], Y[:BATCH]))
    step = model._trainer.device_step()
    run(model.fit(X[BATCH:], Y[BATCH:], epochs=1, batch_size=BATCH, shuffle=False))
    assert model._trainer.device_step() is step
    run(reference.fit(X, Y, epochs=1, batch_size=BATCH, shuffle=False))
    for a, b in zip(run(model.get_weights()), run(reference.get_weights()), strict=True):
        np.testing.assert_array_equal(a, b)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    assert model._trainer.device_step() is not step  # compile drops it (and its recordings)


def test_a_nan_batch_changes_nothing_and_later_batches_train() -> None:
    model = mlp()
    run(model.train_on_batch(X[:BATCH], Y[:BATCH]))
    before = run(model.get_weights())
    bad = pib.tensor(np.full((BATCH, 6), np.nan, np.float32))
    loss = run(model.train_on_batch(bad, pib.tensor(Y[:BATCH], dtype="int32")))
    assert np.isnan(run(loss.numpy()))
    for a, b in zip(before, run(model.get_weights()), strict=True):
        np.testing.assert_array_equal(a, b)
    assert model.optimizer is not None and model.optimizer.iterations is not None
    assert int(run(model.optimizer.iterations.numpy())) == 1
    run(model.train_on_batch(X[:BATCH], Y[:BATCH]))
    assert int(run(model.optimizer.iterations.numpy())) == 2


def test_repeated_steps_leak_no_tensors() -> None:
    model = mlp()
    xt, yt = pib.tensor(X[:BATCH]), pib.tensor(Y[:BATCH], dtype="int32")

    async def steps(n: int) -> None:
        for _ in range(n):
            (await model.train_on_batch(xt, yt)).dispose()
            (await model.train_on_batch(X[:BATCH], Y[:BATCH])).dispose()

    run(steps(2))
    gc.collect()  # earlier tests' garbage must not be counted here
    before = pib.memory()
    run(steps(20))
    gc.collect()  # garbage of these steps shows up in num_collected_by_gc
    after = pib.memory()
    for key in ("num_tensors", "num_bytes", "num_collected_by_gc"):
        assert after[key] == before[key], key


def test_targets_are_cast_and_reshaped_like_fits() -> None:
    model = pib.Sequential([layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer="sgd", loss="mse")
    twin = pib.Sequential([layers.Dense(1, input_shape=(2,))])
    twin.compile(optimizer="sgd", loss="mse")
    x = np.array([[0, 1], [1, 0]], np.float32)
    y = np.array([1, 0])  # (n,) int targets for a (n, 1) float output
    run(model.train_on_batch(pib.tensor(x), pib.tensor(y, dtype="int32")))
    run(twin.train_on_batch(x, y))
    for a, b in zip(run(model.get_weights()), run(twin.get_weights()), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("x", "y", "match"),
    [
        (np.ones((4, 5), np.float32), Y[:4], r"x: expected shape \(samples, \*\(6,\)\)"),
        (X[:4], Y[:3], "x has 4, y has 3"),
        (np.full((4, 6), np.inf, np.float32), Y[:4], "x contains NaN or Inf"),
        (X[:4], np.array([0, 1, 2, 3]), r"labels must be in \[0, 3\)"),
        (pib.tensor(np.ones((4, 5), np.float32)), Y[:4], r"x: expected shape"),
        (pib.tensor(X[:4]), pib.tensor(Y[:3], dtype="int32"), "x has 4, y has 3"),
        (pib.tensor(X[:4]), pib.tensor(np.zeros((4, 3), np.float32)), "sparse labels"),
    ],
)
def test_bad_batches_are_clear_errors(x: Any, y: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        run(mlp().train_on_batch(x, y))


def test_needs_compile() -> None:
    model = pib.Sequential([layers.Dense(1, input_shape=(2,))])
    with pytest.raises(RuntimeError, match="compile"):
        run(model.train_on_batch(np.ones((2, 2)), np.ones((2, 1))))
