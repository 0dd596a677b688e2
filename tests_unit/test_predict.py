"""predict: batches of a Tensor input are device slices; the results equal those of an array input."""

import asyncio

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import layers


def small_model() -> pib.Sequential:
    model = pib.Sequential(
        [layers.Dense(3, activation="relu", input_shape=(4,)), layers.Dense(2)], seed=3
    )
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_tensor_input_is_sliced_on_the_device_and_matches_arrays() -> None:
    model = small_model()
    x = np.random.Generator(np.random.PCG64(0)).standard_normal((5, 4)).astype(np.float32)
    from_array = asyncio.run(asyncio.run(model.predict(x, batch_size=2)).numpy())
    xt = pib.tensor(x)
    backend = xt.backend
    downloaded = backend.bytes_downloaded
    out = asyncio.run(model.predict(xt, batch_size=2))
    assert backend.bytes_downloaded == downloaded, "predict read its input tensor back"
    np.testing.assert_array_equal(asyncio.run(out.numpy()), from_array)
    assert not xt.is_disposed


def test_tensor_input_of_the_wrong_shape_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"x: expected shape \(samples, \*\(4,\)\)"):
        asyncio.run(small_model().predict(pib.tensor(np.zeros((2, 5), np.float32))))
