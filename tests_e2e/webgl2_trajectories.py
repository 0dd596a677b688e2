"""Per-step loss trajectories of small workloads, run the same way in a page and in CPython."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

import py_in_browser as pib
from py_in_browser.testing import workloads


def _mlp() -> pib.Sequential:
    model = pib.Sequential(
        [
            pib.layers.Dense(16, activation="relu", input_shape=(4,)),
            pib.layers.Dense(3, activation="softmax"),
        ],
        seed=0,
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


def setup(name: str) -> tuple[pib.Sequential, np.ndarray, np.ndarray, int]:
    """Model, data and batch size of a workload; every one runs 2 or 1 steps per epoch."""
    if name == "xor":
        x, y = workloads.xor_data()
        return workloads.xor_model(seed=1), x, y, 4
    if name == "mlp":
        x, y = workloads.blobs(samples=64)
        return _mlp(), x, y, 32
    x, y = workloads.synthetic_images(16, size=16)
    return workloads.small_cnn(size=16), x, y, 8


async def trajectory(name: str, steps: int = 20) -> dict[str, Any]:
    """Per-step losses (read by a batch-logs callback) and the trained weights."""
    model, x, y, batch = setup(name)
    losses: list[float] = []
    record = pib.LambdaCallback(on_batch_end=lambda b, logs: losses.append(logs["loss"]))
    epochs = steps * batch // len(x)
    await model.fit(x, y, epochs=epochs, batch_size=batch, shuffle=False, callbacks=[record])
    return {"losses": losses, "weights": [w.tolist() for w in await model.get_weights()]}


def on_cpu(name: str, steps: int = 20) -> dict[str, Any]:
    """The CPython cpu run, on its own thread (Playwright's sync API owns this thread's loop)."""
    with ThreadPoolExecutor(1) as pool:
        result: dict[str, Any] = pool.submit(asyncio.run, trajectory(name, steps)).result()
    return result
