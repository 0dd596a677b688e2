"""The same training scripts give the same per-epoch losses in Pyodide (cpu backend) as in CPython."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from py_in_browser.testing import workloads
from tests_e2e.engine_page import EnginePage

TOLERANCE = 1e-5
# Small enough for CI's time, large enough that every layer type trains for several steps.
RUNS = {
    "xor": ("run_xor", {"epochs": 300}),
    "mlp": ("run_mlp", {"epochs": 3}),
    "cnn": ("run_cnn", {"train_samples": 64, "test_samples": 32, "epochs": 3}),
}


@pytest.fixture(scope="module")
def page_query() -> str:
    return "?backend=cpu"


def in_cpython(function: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The CPython run, on a thread of its own: Playwright's sync API owns this thread's loop."""
    with ThreadPoolExecutor(1) as pool:
        result: dict[str, Any] = pool.submit(
            asyncio.run, getattr(workloads, function)(**kwargs)
        ).result()
    return result


@pytest.mark.parametrize("name", list(RUNS))
def test_browser_losses_match_cpython(engine_page: EnginePage, name: str) -> None:
    function, kwargs = RUNS[name]
    expected = in_cpython(function, kwargs)
    got = engine_page.run(
        f"from py_in_browser.testing import workloads\nawait workloads.{function}(**{kwargs!r})"
    )
    assert engine_page.run("pib.get_backend()") == "cpu"
    assert len(got["losses"]) == len(expected["losses"])
    np.testing.assert_allclose(got["losses"], expected["losses"], rtol=0, atol=TOLERANCE)
    if name == "cnn":
        print(
            f"cnn seconds per epoch: pyodide {got['seconds_per_epoch']:.2f}, "
            f"cpython {expected['seconds_per_epoch']:.2f}"
        )


def test_xor_converges_in_the_browser(engine_page: EnginePage) -> None:
    got = engine_page.run(
        "from py_in_browser.testing import workloads\nawait workloads.run_xor(epochs=1000)"
    )
    assert got["losses"][-1] < 0.05


def test_bad_input_is_a_clear_python_error_in_the_browser(engine_page: EnginePage) -> None:
    message = engine_page.run(
        "from py_in_browser import layers\n"
        "m = pib.Sequential([layers.Dense(2, input_shape=(3,))])\n"
        "m.compile(optimizer='sgd', loss='mse')\n"
        "try:\n"
        "    await m.fit(np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32), batch_size=0)\n"
        "except ValueError as exc:\n"
        "    err = str(exc)\n"
        "err"
    )
    assert "batch_size" in message
