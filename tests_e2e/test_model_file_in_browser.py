"""The model file written in the browser (Pyodide, on a GPU backend) is the one CPython reads:
same layers, same weights, same predictions, and the reverse."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import layers
from py_in_browser.model import loads
from tests_e2e.engine_page import EnginePage

BUILD = """
import base64
from py_in_browser import layers
model = pib.Sequential([
    layers.Conv2D(4, 3, activation="relu", input_shape=(8, 8, 1)),
    layers.BatchNormalization(),
    layers.MaxPool2D(2),
    layers.Flatten(),
    layers.Dropout(0.2),
    layers.Dense(3, activation="softmax"),
], seed=5)
x = np.linspace(-1, 1, 2 * 64, dtype=np.float32).reshape(2, 8, 8, 1)
blob = await model.save(labels=["a", "b", "c"])
[pib.get_backend(), base64.b64encode(blob).decode(), (await (await model.predict(x)).numpy()).tolist()]
"""


def in_cpython(make: Callable[[], Awaitable[Any]]) -> Any:
    """Runs the engine's coroutine in CPython: in a thread, since Playwright's loop owns this one."""

    async def run() -> Any:
        return await make()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=webgl2"


def test_saved_in_the_browser_loads_in_cpython(engine_page: EnginePage) -> None:
    backend, encoded, predicted = engine_page.run(BUILD)
    assert backend == "webgl2"
    model, header = loads(base64.b64decode(encoded))
    assert header.labels == ["a", "b", "c"]
    x = np.linspace(-1, 1, 2 * 64, dtype=np.float32).reshape(2, 8, 8, 1)
    ours = in_cpython(lambda: _predict(model, x))
    np.testing.assert_allclose(ours, np.array(predicted), atol=1e-5)


def test_saved_in_cpython_loads_in_the_browser(engine_page: EnginePage) -> None:
    model = pib.Sequential([layers.Dense(3, activation="tanh", input_shape=(4,)), layers.Dense(2)])
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    expected = in_cpython(lambda: _predict(model, x))
    encoded = base64.b64encode(in_cpython(model.save)).decode()
    got = engine_page.run(
        f"import base64\nloaded = await pib.load_model(base64.b64decode('{encoded}'))\n"
        f"(await (await loaded.predict(np.arange(8, dtype=np.float32).reshape(2, 4) / 8)).numpy()).tolist()"
    )
    np.testing.assert_allclose(np.array(got), expected, atol=1e-5)


async def _predict(model: pib.Sequential, x: np.ndarray) -> np.ndarray:
    return await (await model.predict(x)).numpy()
