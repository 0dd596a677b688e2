"""Training workloads that CPython tests and the in-browser e2e tests both run: XOR, an MLP on
Gaussian blobs and a small CNN on a synthetic 4-class image set. Each returns per-epoch losses.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import py_in_browser as pib
from py_in_browser import layers, optimizers

IMAGE_CLASSES = ("horizontal stripes", "vertical stripes", "diagonal stripes", "square")


def xor_data() -> tuple[np.ndarray, np.ndarray]:
    x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32)
    return x, np.array([[0], [1], [1], [0]], dtype=np.float32)


def xor_model(seed: int = 1) -> pib.Sequential:
    model = pib.Sequential(
        [
            layers.Dense(4, activation="relu", input_shape=(2,)),
            layers.Dense(1, activation="sigmoid"),
        ],
        seed=seed,
    )
    model.compile(optimizer=optimizers.SGD(0.1), loss="mse", metrics=["accuracy"])
    return model


async def run_xor(epochs: int = 1000, seed: int = 1) -> dict[str, Any]:
    """XOR with Dense(4, relu) -> Dense(1, sigmoid), SGD 0.1, mse, batch 4."""
    x, y = xor_data()
    model = xor_model(seed)
    history = await model.fit(x, y, epochs=epochs, batch_size=4, shuffle=False)
    return {"losses": history.history["loss"], "accuracy": history.history["accuracy"]}


def blobs(samples: int = 256, classes: int = 3, features: int = 4, seed: int = 0):
    """Gaussian clusters, one per class, with unit noise."""
    rng = np.random.Generator(np.random.PCG64(seed))
    centers = rng.normal(0.0, 3.0, (classes, features))
    labels = rng.integers(0, classes, samples)
    x = centers[labels] + rng.standard_normal((samples, features))
    return x.astype(np.float32), labels.astype(np.int32)


async def run_mlp(epochs: int = 5, seed: int = 0) -> dict[str, Any]:
    """Dense(16, relu) -> Dense(3, softmax), Adam(0.01), sparse categorical crossentropy."""
    x, y = blobs(seed=seed)
    model = pib.Sequential(
        [
            layers.Dense(16, activation="relu", input_shape=(4,)),
            layers.Dense(3, activation="softmax"),
        ],
        seed=seed,
    )
    model.compile(
        optimizer=optimizers.Adam(0.01),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    history = await model.fit(x, y, epochs=epochs, batch_size=32, seed=seed)
    return {"losses": history.history["loss"], "accuracy": history.history["accuracy"]}


def synthetic_images(
    samples: int, size: int = 64, seed: int = 0, noise: float = 0.35
) -> tuple[np.ndarray, np.ndarray]:
    """(samples, size, size, 3) float32 images in [about -1, 2] and int32 labels in [0, 4).

    Classes (IMAGE_CLASSES): horizontal, vertical and diagonal stripes with a random period,
    phase and colour, and a filled square at a random place; Gaussian noise on every pixel.
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    labels = rng.integers(0, len(IMAGE_CLASSES), samples).astype(np.int32)
    rows, cols = np.mgrid[0:size, 0:size].astype(np.float32)
    images = np.empty((samples, size, size, 3), dtype=np.float32)
    for i, label in enumerate(labels):
        period = rng.uniform(size / 10, size / 5)
        phase = rng.uniform(0, 2 * np.pi)
        if label == 3:
            side = int(rng.integers(size // 4, size // 2))
            top, left = rng.integers(0, size - side, 2)
            pattern = np.zeros((size, size), dtype=np.float32)
            pattern[top : top + side, left : left + side] = 1.0
        else:
            coord = (rows, cols, (rows + cols) / np.sqrt(2))[label]
            pattern = (np.sin(2 * np.pi * coord / period + phase) > 0).astype(np.float32)
        colour = rng.uniform(0.4, 1.0, 3).astype(np.float32)
        images[i] = pattern[..., None] * colour + noise * rng.standard_normal((size, size, 3))
    return images, labels


def small_cnn(size: int = 64, seed: int = 0) -> pib.Sequential:
    """conv(8, stride 2) -> max pool -> conv(16) -> max pool -> global average -> dense(4)."""
    model = pib.Sequential(
        [
            layers.Conv2D(
                8, 3, strides=2, padding="same", activation="relu", input_shape=(size, size, 3)
            ),
            layers.MaxPool2D(2),
            layers.Conv2D(16, 3, padding="same", activation="relu"),
            layers.MaxPool2D(2),
            layers.GlobalAveragePooling2D(),
            layers.Dense(4, activation="softmax"),
        ],
        seed=seed,
    )
    model.compile(
        optimizer=optimizers.Adam(0.01),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


async def run_cnn(
    train_samples: int = 256,
    test_samples: int = 128,
    epochs: int = 8,
    size: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """Trains small_cnn on synthetic_images; reports losses, held-out accuracy and epoch time."""
    x, y = synthetic_images(train_samples, size, seed=seed)
    x_test, y_test = synthetic_images(test_samples, size, seed=seed + 1)
    model = small_cnn(size, seed)
    start = time.perf_counter()
    history = await model.fit(x, y, epochs=epochs, batch_size=32, seed=seed)
    seconds = time.perf_counter() - start
    result = await model.evaluate(x_test, y_test)
    return {
        "losses": history.history["loss"],
        "test_accuracy": result["accuracy"],
        "seconds_per_epoch": seconds / max(epochs, 1),
    }
