"""Tape autograd, tensors and memory accounting."""

import asyncio

import numpy as np
import pytest

import py_in_browser as pib


def read(t: pib.Tensor) -> np.ndarray:
    return asyncio.run(t.numpy())


def test_broadcast_add_gradient_goes_through_expand() -> None:
    x = pib.Variable(np.ones((2, 3)))
    b = pib.Variable(np.arange(3.0))
    with pib.GradientTape() as tape:
        y = pib.sum((x + b) * 2.0)
    gx, gb = tape.gradient(y, [x, b])
    np.testing.assert_allclose(read(gx), np.full((2, 3), 2.0))
    np.testing.assert_allclose(read(gb), np.full(3, 4.0))  # summed over the broadcast axis


def test_grad_function_and_unconnected_sources() -> None:
    f = pib.grad(lambda a, b: pib.sum(a * a * b))
    a, b = pib.tensor([1.0, 2.0]), pib.tensor([3.0, 4.0])
    ga, gb = f(a, b)
    np.testing.assert_allclose(read(ga), [6.0, 16.0])
    np.testing.assert_allclose(read(gb), [1.0, 4.0])
    w, unused = pib.Variable([1.0]), pib.Variable([2.0])
    with pib.GradientTape() as tape:
        out = pib.sum(w * 3.0)
    assert tape.gradient(out, [w, unused])[1] is None


def test_non_persistent_tape_is_single_use() -> None:
    w = pib.Variable([1.0])
    with pib.GradientTape() as tape:
        out = pib.sum(w * w)
    tape.gradient(out, w)
    with pytest.raises(RuntimeError, match="only once"):
        tape.gradient(out, w)


def test_tidy_frees_intermediates_and_keeps_returned() -> None:
    before = pib.memory()["num_tensors"]
    a = pib.tensor(np.ones((4, 4)))

    @pib.tidy
    def work() -> pib.Tensor:
        return pib.exp(a * 2.0) + 1.0

    result = work()
    assert pib.memory()["num_tensors"] == before + 2
    with pib.tidy():
        kept = pib.keep(a * 3.0)
        _ = a * 4.0
    assert pib.memory()["num_tensors"] == before + 3
    np.testing.assert_allclose(read(kept), 3.0)
    for t in (a, result, kept):
        t.dispose()
    assert pib.memory()["num_tensors"] == before
    with pytest.raises(RuntimeError, match="disposed"):
        read(a)


def test_tensor_basics_and_errors() -> None:
    t = pib.tensor([[1, 2, 3], [4, 5, 6]])
    assert (t.shape, t.dtype, t.size, t.ndim) == ((2, 3), "float32", 6, 2)
    np.testing.assert_allclose(read(t[1, 1:]), [5.0, 6.0])
    np.testing.assert_allclose(read(-t.T @ t), -(read(t).T @ read(t)))
    with pytest.raises(ValueError, match="cannot be broadcast"):
        pib.add(t, pib.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="truth value"):
        bool(t)
    with pytest.raises(TypeError, match="dtype must be one of"):
        pib.tensor([1], dtype="float16")


def test_gradients_of_gradients_flow_through_fused_activation_gradients() -> None:
    """sigmoid's and tanh's gradients are fused programs; their own gradient (the fused VJP)
    gives the analytic second derivatives."""
    x = np.array([-1.5, -0.2, 0.4, 2.0])
    s, t = 1 / (1 + np.exp(-x)), np.tanh(x)
    xt = pib.tensor(x, dtype="float64")
    with pib.GradientTape() as outer:
        outer.watch(xt)
        with pib.GradientTape() as inner:
            inner.watch(xt)
            total = pib.sum(pib.sigmoid(xt)) + pib.sum(pib.tanh(xt))
        first = inner.gradient(total, xt)
        first_total = pib.sum(first)
    second = outer.gradient(first_total, xt)
    np.testing.assert_allclose(asyncio.run(first.numpy()), s * (1 - s) + 1 - t * t, rtol=1e-12)
    want = s * (1 - s) * (1 - 2 * s) - 2 * t * (1 - t * t)
    np.testing.assert_allclose(asyncio.run(second.numpy()), want, rtol=1e-10)


def test_a_fused_input_read_only_through_comparisons_gets_a_zero_gradient() -> None:
    from py_in_browser import fusion

    x = pib.tensor(np.array([-1.0, 0.5, 2.0]), dtype="float64")
    with pib.GradientTape() as tape:
        tape.watch(x)
        steps = pib.fused(lambda v: fusion.where(fusion.less(v, 0.0), 1.0, 2.0), x)
        total = pib.sum(steps)
    np.testing.assert_array_equal(asyncio.run(tape.gradient(total, x).numpy()), [0.0, 0.0, 0.0])
