"""resilience.py in CPython: a model rebuilt from its host copies on a new backend after its old
one was retired (what a device loss in the browser leads to; tests_e2e/test_recovery_calls.py
loses real devices), and hand-made tensors of the retired backend failing alone and clearly."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import backends, resilience, runtime
from py_in_browser.tensor import LostTensorError


@pytest.fixture
def fresh_backend() -> Iterator[None]:
    """The test may retire the active backend: a new cpu backend before and after it."""
    runtime.use_backend(backends.BACKENDS["cpu"].factory(None))
    yield
    runtime.use_backend(backends.BACKENDS["cpu"].factory(None))


def model() -> pib.Sequential:
    net = pib.Sequential(
        [pib.layers.Dense(5, activation="relu", input_shape=(4,)), pib.layers.Dense(3)], seed=1
    )
    net.build()
    rng = np.random.Generator(np.random.PCG64(1))
    net.set_weights([rng.standard_normal(w.shape).astype(np.float32) for w in net.weights])
    return net


def replace_backend() -> None:
    """What a recovery does once the device is back: the old backend retired, a new one active."""
    resilience.retire(runtime.current_backend())
    runtime.use_backend(backends.BACKENDS["cpu"].factory(None))


async def predict(net: pib.Sequential, x: np.ndarray) -> np.ndarray:
    return await (await net.predict(x)).numpy()


def test_a_model_is_rebuilt_from_its_host_copies_on_the_new_backend(fresh_backend: None) -> None:
    async def run() -> None:
        net = model()
        x = np.random.Generator(np.random.PCG64(2)).standard_normal((7, 4)).astype(np.float32)
        want = await predict(net, x)
        old = runtime.current_backend()
        replace_backend()
        got = await predict(net, x)
        np.testing.assert_array_equal(got, want)
        assert all(w.backend is runtime.current_backend() is not old for w in net.weights)

    asyncio.run(run())


def test_a_hand_made_tensor_of_a_retired_backend_fails_clearly_and_alone(
    fresh_backend: None,
) -> None:
    async def run() -> None:
        kept = pib.tensor(np.ones((2, 3), np.float32))
        replace_backend()
        clear = r"tensor of shape \(2, 3\).*create it again"
        with pytest.raises(LostTensorError, match=clear):
            kept * 2.0
        with pytest.raises(LostTensorError, match=clear):
            await kept.numpy()
        assert "lost" in repr(kept)
        kept.dispose()  # frees nothing on the lost device, raises nothing
        assert float(await pib.sum(pib.tensor([1.0, 2.0]) * 2.0).item()) == 6.0

    asyncio.run(run())
