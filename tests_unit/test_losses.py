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


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def test_soft_targets_get_both_gradients_of_the_logits_cross_entropy() -> None:
    """Float targets whose rows do not sum to 1: the logits' gradient is softmax times the row
    sum minus the target, and the targets get -log_softmax (the one-kernel VJP's other half)."""
    rng = np.random.default_rng(11)
    logits, weights = rng.standard_normal((4, 3)) * 2, rng.uniform(0, 2, (4, 3))
    x, t = pib.tensor(logits, dtype="float64"), pib.tensor(weights, dtype="float64")
    with pib.GradientTape() as tape:
        tape.watch(x, t)
        loss = losses.softmax_cross_entropy(t, x)
    dx, dt = (asyncio.run(d.numpy()) for d in tape.gradient(loss, [x, t]))
    log_probs = _log_softmax(logits)
    expected_dx = np.exp(log_probs) * weights.sum(-1, keepdims=True) - weights
    assert abs(float(asyncio.run(loss.numpy())) + np.sum(weights * log_probs) / 4) < 1e-12
    np.testing.assert_allclose(dx, expected_dx / 4, atol=1e-12)
    np.testing.assert_allclose(dt, -log_probs / 4, atol=1e-12)


@pytest.mark.parametrize("sparse", [True, False])
def test_logits_cross_entropy_has_exact_second_derivatives(sparse: bool) -> None:
    """A gradient of the gradient (an outer tape): the Hessian-vector product of the loss, per
    row (diag(p) - p p^T) v / rows, so the one-kernel VJP's own gradient is exact."""
    rng = np.random.default_rng(5)
    logits, direction = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    labels = rng.integers(0, 4, 3)
    x = pib.tensor(logits, dtype="float64")
    loss_fn = (losses.SparseCategoricalCrossentropy if sparse else losses.CategoricalCrossentropy)(
        from_logits=True
    )
    target = pib.tensor(labels, dtype="int32") if sparse else pib.tensor(np.eye(4)[labels])
    with pib.GradientTape() as outer:
        outer.watch(x)
        with pib.GradientTape() as inner:
            inner.watch(x)
            loss = loss_fn(pib.cast(target, "float64") if not sparse else target, x)
        along = pib.sum(inner.gradient(loss, x) * pib.tensor(direction, dtype="float64"))
    hessian_times_direction = asyncio.run(outer.gradient(along, x).numpy())
    p = np.exp(_log_softmax(logits))
    expected = p * direction - p * np.sum(p * direction, -1, keepdims=True)
    np.testing.assert_allclose(hessian_times_direction, expected / 3, atol=1e-12)
