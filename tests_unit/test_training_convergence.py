"""Convergence of the shared workloads (the same scripts the browser e2e tests run)."""

import asyncio

from py_in_browser.testing import workloads


def test_xor_reaches_low_loss() -> None:
    result = asyncio.run(workloads.run_xor(epochs=1000, seed=1))
    assert result["losses"][-1] < 0.05
    assert result["accuracy"][-1] == 1.0


def test_mlp_on_blobs_learns() -> None:
    result = asyncio.run(workloads.run_mlp(epochs=10))
    assert result["losses"][-1] < result["losses"][0] / 3
    assert result["accuracy"][-1] >= 0.9


def test_cnn_on_synthetic_images_generalises() -> None:
    result = asyncio.run(workloads.run_cnn(train_samples=256, test_samples=128, epochs=8))
    assert result["test_accuracy"] >= 0.95, result
    assert result["losses"][-1] < result["losses"][0]


def test_synthetic_images_are_deterministic() -> None:
    a_x, a_y = workloads.synthetic_images(8, 64, seed=3)
    b_x, b_y = workloads.synthetic_images(8, 64, seed=3)
    assert a_x.shape == (8, 64, 64, 3) and a_x.dtype.name == "float32"
    assert (a_x == b_x).all() and (a_y == b_y).all()
    assert set(workloads.synthetic_images(64, 32, seed=0)[1]) == {0, 1, 2, 3}
