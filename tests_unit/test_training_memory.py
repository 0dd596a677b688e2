"""Training must not leak tensors: every temporary is freed by tidy, not by garbage collection."""

import asyncio
import gc

import numpy as np

import py_in_browser as pib
from py_in_browser import layers


def test_200_training_steps_leave_tensor_count_unchanged() -> None:
    rng = np.random.Generator(np.random.PCG64(0))
    x = rng.standard_normal((40, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 3, 40)
    model = pib.Sequential(
        [
            layers.Conv2D(4, 3, padding="same", activation="relu", input_shape=(8, 8, 1)),
            layers.BatchNormalization(),
            layers.MaxPool2D(2),
            layers.Dropout(0.2),
            layers.Flatten(),
            layers.Dense(3, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    asyncio.run(model.fit(x, y, epochs=1, batch_size=4))  # builds weights and optimizer slots
    gc.collect()  # drop garbage from earlier tests so only this fit can change the counts
    before = pib.memory()

    asyncio.run(model.fit(x, y, epochs=20, batch_size=4, validation_split=0.0))  # 200 steps
    after = pib.memory()

    assert after["num_tensors"] == before["num_tensors"]
    assert after["num_bytes"] == before["num_bytes"]
    assert after["num_collected_by_gc"] == before["num_collected_by_gc"]
