"""The models the interop tests export and compare (TF.js in the browser, onnxruntime in CPython):
built the same way in CPython and Pyodide, with every weight drawn from a seeded generator so
batch normalization's moving statistics are not the trivial 0 and 1."""

from __future__ import annotations

import numpy as np

from .. import Sequential
from .. import layers as L


def mlp() -> Sequential:
    return Sequential(
        [
            L.Dense(32, activation="relu", input_shape=(20,)),
            L.Dropout(0.2),
            L.Dense(16, activation="tanh"),
            L.Dense(3, activation="softmax"),
        ],
        name="mlp",
        seed=1,
    )


def gesture_cnn() -> Sequential:
    """The app's gesture classifier shape: conv, batch norm, pooling, dropout, dense."""
    return Sequential(
        [
            L.Conv2D(8, 3, activation="relu", padding="same", input_shape=(16, 16, 3)),
            L.BatchNormalization(),
            L.MaxPool2D(2),
            L.Conv2D(16, 3, activation="relu", padding="same"),
            L.BatchNormalization(),
            L.MaxPool2D(2),
            L.Dropout(0.25),
            L.Flatten(),
            L.Dense(32, activation="relu"),
            L.Dropout(0.5),
            L.Dense(4, activation="softmax"),
        ],
        name="gesture_cnn",
        seed=2,
    )


def every_layer() -> Sequential:
    """The layer types and activations the first two leave out: strides, "same" pooling,
    global pooling, standalone activations, gelu, sigmoid, leaky_relu, log_softmax."""
    return Sequential(
        [
            L.Conv2D(6, 3, strides=2, padding="same", activation="gelu", input_shape=(9, 9, 2)),
            L.MaxPool2D(3, strides=1, padding="same"),
            L.AveragePooling2D(2, padding="same"),
            L.Activation("leaky_relu"),
            L.BatchNormalization(center=False),
            L.GlobalAveragePooling2D(),
            L.Dense(5, activation="sigmoid"),
            L.Dense(4, use_bias=False),
            L.Activation("log_softmax"),
        ],
        name="every_layer",
        seed=3,
    )


MODELS = {"mlp": mlp, "gesture_cnn": gesture_cnn, "every_layer": every_layer}


def randomize(model: Sequential, seed: int = 0) -> None:
    """Sets every weight to a seeded draw: U(-0.5, 0.5), moving variances U(0.5, 1.5)."""
    model.build()
    rng = np.random.default_rng(seed)
    model.set_weights(
        [
            rng.uniform(0.5, 1.5, var.shape).astype(np.float32)
            if var.name.endswith("moving_variance")
            else rng.uniform(-0.5, 0.5, var.shape).astype(np.float32)
            for var in model.weights
        ]
    )


def inputs(model: Sequential, count: int = 5, seed: int = 7) -> np.ndarray:
    """`count` examples for `model`, normal draws."""
    assert model.input_shape is not None
    shape = (count, *model.input_shape)
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def build(kind: str) -> tuple[Sequential, np.ndarray]:
    """One of MODELS with randomized weights, and its inputs."""
    model = MODELS[kind]()
    randomize(model)
    return model, inputs(model)
