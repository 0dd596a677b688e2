"""Losses against their numpy definitions."""

import asyncio

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser.nn import losses


@pytest.mark.parametrize("sparse", [True, False])
def test_logits_cross_entropy_matches_the_log_softmax_form(sparse: bool) -> None:
    """The fused softmax cross-entropy gives the op-by-op form's loss and logits gradient."""
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((6, 5)) * 3
    labels = rng.integers(0, 5, 6)
    onehot = np.eye(5)[labels]
    loss_fn = (losses.SparseCategoricalCrossentropy if sparse else losses.CategoricalCrossentropy)(
        from_logits=True
    )
    x = pib.tensor(logits, dtype="float64")
    target = pib.tensor(labels, dtype="int32") if sparse else pib.tensor(onehot, dtype="float64")
    with pib.GradientTape() as tape:
        tape.watch(x)
        loss = loss_fn(target, x)
    grad = asyncio.run(tape.gradient(loss, x).numpy())
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    assert abs(float(asyncio.run(loss.numpy())) + np.mean(np.sum(onehot * log_probs, -1))) < 1e-12
    np.testing.assert_allclose(grad, (np.exp(log_probs) - onehot) / 6, atol=1e-12)


def test_mean_squared_error_and_its_gradient() -> None:
    rng = np.random.default_rng(3)
    pred, true = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    x = pib.tensor(pred, dtype="float64")
    with pib.GradientTape() as tape:
        tape.watch(x)
        loss = losses.MeanSquaredError()(pib.tensor(true, dtype="float64"), x)
    grad = asyncio.run(tape.gradient(loss, x).numpy())
    assert abs(float(asyncio.run(loss.numpy())) - np.mean((pred - true) ** 2)) < 1e-12
    np.testing.assert_allclose(grad, 2 * (pred - true) / pred.size, atol=1e-12)
