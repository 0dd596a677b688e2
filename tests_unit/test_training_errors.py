"""Bad input gets a clear error naming the argument; a NaN loss stops fit with good weights kept."""

import asyncio

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import layers


def classifier(loss: str = "sparse_categorical_crossentropy") -> pib.Sequential:
    model = pib.Sequential([layers.Dense(3, activation="softmax", input_shape=(4,))])
    model.compile(optimizer="sgd", loss=loss, metrics=["accuracy"])
    return model


X = np.ones((6, 4), dtype=np.float32)
Y = np.array([0, 1, 2, 0, 1, 2])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"x": np.ones((6, 5))}, r"x: expected shape \(samples, \*\(4,\)\)"),
        ({"y": Y[:5]}, "x has 6, y has 5"),
        ({"x": np.where(np.eye(6, 4) > 0, np.nan, 1.0)}, "x contains NaN or Inf"),
        ({"y": np.array([0, 1, 2, 0, 1, 3])}, r"labels must be in \[0, 3\)"),
        ({"y": np.array([0, 1, 2, 0, 1, -1])}, r"labels must be in \[0, 3\)"),
        ({"batch_size": 0}, "batch_size must be an int >= 1"),
        ({"epochs": -1}, "epochs must be an int >= 0"),
        ({"validation_split": 1.5}, r"validation_split must be in \[0, 1\)"),
    ],
)
def test_fit_rejects_bad_input(kwargs: dict, match: str) -> None:
    args = {"x": X, "y": Y, **kwargs}
    with pytest.raises(ValueError, match=match):
        asyncio.run(classifier().fit(args.pop("x"), args.pop("y"), **args))


def test_non_finite_targets_and_wrong_target_shape() -> None:
    with pytest.raises(ValueError, match="y contains NaN or Inf"):
        asyncio.run(classifier("categorical_crossentropy").fit(X, np.full((6, 3), np.inf)))
    with pytest.raises(ValueError, match=r"y: expected targets of shape \(samples, \*\(3,\)\)"):
        asyncio.run(classifier("categorical_crossentropy").fit(X, np.ones((6, 2))))


def test_unknown_names_list_the_valid_ones() -> None:
    model = pib.Sequential([layers.Dense(1, input_shape=(2,))])
    with pytest.raises(ValueError, match=r"loss: unknown 'hinge'.*'mse'"):
        model.compile(optimizer="sgd", loss="hinge")
    with pytest.raises(ValueError, match=r"optimizer: unknown 'lbfgs'.*'adam'"):
        model.compile(optimizer="lbfgs", loss="mse")
    with pytest.raises(ValueError, match=r"activation: unknown 'swishy'.*'relu'"):
        layers.Dense(2, activation="swishy")
    with pytest.raises(ValueError, match="metrics: unknown 'f1'"):
        model.compile(optimizer="sgd", loss="mse", metrics=["f1"])
        asyncio.run(model.fit(np.ones((2, 2)), np.ones((2, 1))))


def test_fit_before_compile_is_explained() -> None:
    model = pib.Sequential([layers.Dense(1, input_shape=(2,))])
    with pytest.raises(RuntimeError, match="compile"):
        asyncio.run(model.fit(np.ones((2, 2)), np.ones((2, 1))))


def test_nan_loss_stops_training_and_keeps_last_good_weights() -> None:
    x = np.ones((8, 2), dtype=np.float32)
    y = np.ones((8, 1), dtype=np.float32)
    y[6:] = 1e30  # batch 3 (samples 6 and 7) squares to Inf in the mse loss
    model = pib.Sequential([layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer="sgd", loss="mse")

    good = pib.Sequential([layers.Dense(1, input_shape=(2,))])
    good.compile(optimizer="sgd", loss="mse")
    asyncio.run(good.fit(x[:6], y[:6], epochs=1, batch_size=2, shuffle=False))
    want = asyncio.run(good.get_weights())

    with pytest.raises(pib.NonFiniteLossError, match="weights are those after step 3"):
        asyncio.run(model.fit(x, y, epochs=3, batch_size=2, shuffle=False))
    for got, expected in zip(asyncio.run(model.get_weights()), want, strict=True):
        assert np.array_equal(got, expected)
    assert np.all(np.isfinite(asyncio.run(model.get_weights())[0]))
