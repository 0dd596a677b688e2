"""resilience.py in CPython: a model rebuilt from its host copies on a new backend after its old
one was retired (what a device loss in the browser leads to; tests_e2e/test_recovery_calls.py
loses real devices), and hand-made tensors of the retired backend failing alone and clearly."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

import py_in_browser as pib
from py_in_browser import backends, lineage, resilience, runtime
from py_in_browser.tensor import REMADE_DEPTH, LostTensorError


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


def test_results_and_what_is_made_from_them_are_computed_again_after_a_loss(
    fresh_backend: None,
) -> None:
    """A guarded call's tensors carry their lineage (lineage.py; guarded attaches it where the
    backend can lose its device, so here by hand on the cpu): after the backend is retired,
    reading the result, an op made from it before the loss, and one made from it after the loss
    all give the values of a run without a loss, on the new backend."""

    async def run() -> None:
        net = model()
        x = np.random.Generator(np.random.PCG64(3)).standard_normal((6, 4)).astype(np.float32)
        want = await predict(net, x)

        async def call() -> pib.Tensor:
            return await net.predict(x)

        scores = await call()
        lineage.attach(scores, runtime.current_backend(), call, lambda: 0)
        before = pib.argmax(scores * 2.0 - 1.0, axis=-1)
        replace_backend()
        after = pib.softmax(scores + pib.full((6, 3), 0.5))
        np.testing.assert_array_equal(await before.numpy(), np.argmax(want * 2.0 - 1.0, axis=-1))
        shifted = want + 0.5
        soft = np.exp(shifted - shifted.max(-1, keepdims=True))
        np.testing.assert_allclose(await after.numpy(), soft / soft.sum(-1, keepdims=True), 1e-6)
        np.testing.assert_array_equal(await scores.numpy(), want)
        fresh = runtime.current_backend()
        assert before.backend is after.backend is scores.backend is fresh
        assert before._lineage is None and scores._lineage is None  # read: settled

    asyncio.run(run())


def test_a_read_settles_the_lineages_made_before_it(fresh_backend: None) -> None:
    """Once a read on the backend succeeds, the work queued before it ran on a live device: ops
    on a result no longer carry its lineage, and a later loss loses the result like any tensor."""

    async def run() -> None:
        net = model()
        x = np.ones((2, 4), np.float32)
        scores = await net.predict(x)
        lineage.attach(scores, runtime.current_backend(), lambda: net.predict(x), lambda: 0)
        kept = pib.tensor(np.ones((2, 3), np.float32) * np.arange(1, 4, dtype=np.float32)[None])
        summed = scores + kept
        assert summed._lineage is not None
        await pib.tensor([1.0]).numpy()  # no lineage: settles nothing
        assert (scores * 1.0)._lineage is not None
        await summed.numpy()
        assert (scores * 1.0)._lineage is None  # settled by the read of summed
        replace_backend()
        with pytest.raises(LostTensorError, match=r"tensor of shape \(2, 3\)"):
            await scores.numpy()

    asyncio.run(run())


def test_what_cannot_be_computed_again_fails_clearly(fresh_backend: None) -> None:
    """A large operand made by hand on the lost device, or a model whose weights changed since
    the call, make a result fail as a tensor made by hand does, not give another value."""

    async def run() -> None:
        net = model()
        x = np.ones((2, 4), np.float32)
        scores = await net.predict(x)
        lineage.attach(scores, runtime.current_backend(), lambda: net.predict(x), lambda: 0)
        joined = pib.concat([scores, pib.tensor(np.ones((2, 30), np.float32))], axis=1)
        changed = await net.predict(x)
        state = net.device_state
        lineage.attach(
            changed, runtime.current_backend(), lambda: net.predict(x), lambda: state.changes
        )
        net.set_weights([np.zeros(w.shape, np.float32) for w in net.weights])
        replace_backend()
        with pytest.raises(LostTensorError, match=r"tensor of shape \(2, 30\)"):
            await joined.numpy()
        with pytest.raises(LostTensorError, match=r"tensor of shape \(2, 3\)"):
            await changed.numpy()

    asyncio.run(run())


def test_a_lost_result_is_computed_once_per_read_and_feeds_a_later_call(
    fresh_backend: None,
) -> None:
    """softmax reads its input twice: the call behind it runs again once. A result lost before
    it is passed to another guarded call (predict) is computed again first, and an op between a
    result lost since and a new tensor gives a value whichever operand comes first."""

    async def run() -> None:
        net = model()
        x = np.random.Generator(np.random.PCG64(5)).standard_normal((4, 4)).astype(np.float32)
        want = await predict(net, x)
        runs = [0]

        async def call() -> pib.Tensor:
            runs[0] += 1
            return await net.predict(x)

        scores = await call()
        lineage.attach(scores, runtime.current_backend(), call, lambda: 0)
        soft = pib.softmax(scores + 0.5)
        replace_backend()
        later = pib.tensor(np.ones((4, 3), np.float32) * 2.0)
        mixed = [later + scores, scores + later]
        runs[0] = 0
        shifted = np.exp(want + 0.5 - (want + 0.5).max(-1, keepdims=True))
        got = await soft.numpy()
        np.testing.assert_allclose(got, shifted / shifted.sum(-1, keepdims=True), 1e-6)
        assert runs[0] == 1
        for m in mixed:
            np.testing.assert_array_equal(await m.numpy(), want + 2.0)
        head = pib.Sequential([pib.layers.Dense(2, input_shape=(3,))], seed=2)
        head.build()
        fed = await head.predict(scores)  # scores itself was never read: computed again here
        np.testing.assert_allclose(
            await fed.numpy(), await predict(head, want), rtol=1e-6, atol=1e-6
        )

    asyncio.run(run())


def test_constants_are_remade_from_host_data_only_for_a_few_ops() -> None:
    """Small tensors made from host data, and ops on them, can be made again (what a lineage
    uses for a scalar operand on the lost device); a constant updated in a loop is not remade
    through its whole history."""
    one = pib.tensor(1.0)
    assert one._remake is not None and pib.tensor(np.ones(17, np.float32))._remake is None
    counted = one
    for _ in range(REMADE_DEPTH):
        counted = counted + 1.0
    assert counted._remake is not None
    again = counted._remake()
    assert float(asyncio.run(again.item())) == 1.0 + REMADE_DEPTH
    assert (counted + 1.0)._remake is None
    assert pib.Variable(1.0)._remake is None  # mutable: never remade from its first value
