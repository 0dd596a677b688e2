"""Batches over the device limits run as micro-batches with the full batch's update; the shared
caps stop oversized work before it starts.

The cpu backend enforces limits={"max_allocation_bytes": n} on every tensor it allocates, the way
WebGL2 enforces MAX_TEXTURE_SIZE (tests_e2e/test_runtime_limits_in_chromium.py runs that case).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import layers, limits, runtime

# (64, 8, 8, 4) float32 batches take 65536 bytes; this limit fits 16 examples of the widest tensor.
LIMIT = 16 * 8 * 8 * 4 * 4


@pytest.fixture(autouse=True)
def restore_backend() -> Iterator[None]:
    previous = runtime._state.copy()
    yield
    runtime._state.update(previous)


def cnn(batch_norm: bool = False) -> pib.Sequential:
    stack: list[layers.Layer] = [
        layers.Conv2D(4, 3, padding="same", activation="relu", input_shape=(8, 8, 2))
    ]
    if batch_norm:
        stack.append(layers.BatchNormalization())
    stack += [layers.Flatten(), layers.Dense(3, activation="softmax")]
    model = pib.Sequential(stack, seed=3)
    model.compile(optimizer=pib.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    return model


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((128, 8, 8, 2)).astype(np.float32), rng.integers(0, 3, 128)


async def trained(limit: int | None, batch_norm: bool = False) -> tuple[list[np.ndarray], dict]:
    await pib.init("cpu", limits=None if limit is None else {"max_allocation_bytes": limit})
    model = cnn(batch_norm)
    history = await model.fit(*data(), epochs=2, batch_size=64, shuffle=True, seed=1)
    return await model.get_weights(), history.params


def test_max_batch_size_is_the_largest_batch_whose_tensors_fit() -> None:
    asyncio.run(pib.init("cpu", limits={"max_allocation_bytes": LIMIT}))
    assert pib.max_batch_size(cnn()) == 16  # the conv output (b, 8, 8, 4) is the widest tensor
    asyncio.run(pib.init("cpu"))
    assert pib.max_batch_size(cnn()) == limits.DEFAULT_LIMITS.max_batch_size


def test_micro_batches_give_the_full_batch_update() -> None:
    full, full_params = asyncio.run(trained(None))
    micro, micro_params = asyncio.run(trained(LIMIT))
    assert "micro_batch_size" not in full_params and micro_params["micro_batch_size"] == 16
    for a, b in zip(full, micro, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    # The limit is real: one pass over the whole batch cannot allocate its conv output.
    with pytest.raises(ValueError, match="max_allocation_bytes"):
        pib.zeros((64, 8, 8, 4)) + 1.0


def test_evaluate_and_predict_split_batches_the_same_way() -> None:
    x, y = data()
    asyncio.run(pib.init("cpu"))
    model = cnn()
    want_eval = asyncio.run(model.evaluate(x, y, batch_size=64))
    want = asyncio.run(asyncio.run(model.predict(x, batch_size=64)).numpy())
    weights = asyncio.run(model.get_weights())
    asyncio.run(pib.init("cpu", limits={"max_allocation_bytes": LIMIT}))
    model = cnn()
    model.set_weights(weights)
    got_eval = asyncio.run(model.evaluate(x, y, batch_size=64))
    np.testing.assert_allclose(got_eval["loss"], want_eval["loss"], rtol=1e-6)
    got = asyncio.run(asyncio.run(model.predict(x, batch_size=64)).numpy())
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_batch_normalization_uses_per_micro_batch_statistics() -> None:
    """The documented behaviour: each micro-batch is normalised with its own statistics and
    moves the moving mean once (as Keras' virtual_batch_size), so one step of 64 examples in
    micro-batches of 16 applies the momentum four times, once per micro-batch mean."""
    asyncio.run(pib.init("cpu", limits={"max_allocation_bytes": LIMIT}))
    model = cnn(batch_norm=True)
    x, y = data()
    asyncio.run(model.fit(x[:64], y[:64], epochs=1, batch_size=64, shuffle=False))
    bn = model.layers[1]
    assert isinstance(bn, layers.BatchNormalization)
    # The micro-batches ran the conv with the initial weights: recompute its outputs with them.
    asyncio.run(pib.init("cpu"))
    fresh = cnn(batch_norm=True)
    fresh.build()
    initial = fresh.layers[0]
    conv_out = [
        asyncio.run(initial(pib.tensor(x[i : i + 16]), training=False).numpy())
        for i in range(0, 64, 16)
    ]
    moving = np.zeros(4)
    for out in conv_out:
        moving = 0.99 * moving + 0.01 * out.mean(axis=(0, 1, 2))
    got = asyncio.run(bn.moving_mean.numpy())
    np.testing.assert_allclose(got, moving, rtol=1e-5, atol=1e-6)
    one_pass = 0.99 * np.zeros(4) + 0.01 * np.concatenate(conv_out).mean(axis=(0, 1, 2))
    assert not np.allclose(got, one_pass, rtol=1e-4, atol=1e-7)


def test_an_example_that_cannot_fit_is_an_error_before_training() -> None:
    asyncio.run(pib.init("cpu", limits={"max_allocation_bytes": 4096}))
    # One example's conv output, (1, 5, 5, 64), takes 6400 bytes; its weights take 512.
    model = pib.Sequential([layers.Conv2D(64, 1, input_shape=(5, 5, 1))], seed=0)
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(pib.ExampleTooLargeError, match=r"layer 'conv2d.*max_allocation_bytes"):
        asyncio.run(model.fit(np.zeros((4, 5, 5, 1)), np.zeros((4, 5, 5, 64)), batch_size=2))


def test_a_weight_that_cannot_fit_names_its_layer() -> None:
    asyncio.run(pib.init("cpu", limits={"max_allocation_bytes": 8192}))
    model = pib.Sequential([layers.Dense(2, input_shape=(4,)), layers.Dense(2000)], seed=0)
    with pytest.raises(ValueError, match="max_allocation_bytes"):
        pib.max_batch_size(model)  # building the 2 x 2000 kernel is refused by the backend


def test_caps_refuse_oversized_training_before_any_step() -> None:
    asyncio.run(pib.init("cpu"))
    model = cnn()
    x, y = data()
    with pytest.raises(pib.LimitExceededError, match="max_epochs=10,000"):
        asyncio.run(model.fit(x, y, epochs=10_001))
    with pytest.raises(pib.LimitExceededError, match="max_batch_size=1,024"):
        asyncio.run(model.fit(x, y, batch_size=2048))
    assert not model.built  # refused before the weights were made
    with pytest.raises(pib.LimitExceededError, match="max_batch_size"):
        asyncio.run(model.predict(x, batch_size=4096))
    big = pib.Sequential([layers.Dense(5000, input_shape=(1000,))], seed=0)  # 5,005,000 params
    big.compile(optimizer="sgd", loss="mse")
    with pytest.raises(pib.LimitExceededError, match="max_params=4,000,000"):
        asyncio.run(big.fit(np.zeros((2, 1000)), np.zeros((2, 5000))))


def test_python_cannot_allocate_without_bound() -> None:
    gc.collect()  # earlier tests' tensors in reference cycles would be freed during the count
    before = pib.memory()["num_tensors"]
    with pytest.raises(pib.LimitExceededError, match="max_tensor_bytes=536,870,912"):
        pib.zeros((100_000, 100_000))
    huge_view = np.broadcast_to(np.float32(1), (1 << 28,))  # 1 GiB as float32, no host memory
    with pytest.raises(pib.LimitExceededError, match="max_tensor_bytes"):
        pib.tensor(huge_view)
    with pytest.raises(pib.LimitExceededError, match="max_tensor_bytes"):
        pib.ones((1 << 28, 1))
    assert pib.memory()["num_tensors"] == before
    small = limits.Limits(max_live_tensor_bytes=1000)
    with pytest.raises(pib.LimitExceededError, match="max_live_tensor_bytes=1,000"):
        limits.check_allocation((100,), 4, live_bytes=800, limits=small)
