"""How to compute a device tensor again when its device may have been lost before it was made.

A guarded call (resilience.py: predict, a graph model's run, ...) hands its device tensors back at
once, before the device has run the work. A GPU lost inside the call is reported by the browser
only later (WebGPU's device.lost settles after the work it aborted), so the call cannot tell then
whether its results are real. It used to wait for a fence first: a round trip to the GPU per
call, and then the caller's read (of the result, or of an argmax or softmax made from it) was a
second one. A read is itself such a fence: it fails when the device went away before the queue
reached it. So each tensor a guarded call gives carries its *lineage*, the call to run again, and
ops on it pass a lineage on to their result (the op, applied again to its inputs computed again).
A read that fails because the device was lost recovers the backend, computes the tensor again
through its lineage and reads that (resilience.read_recovering). A read that succeeds proves the
work queued before it ran on a live device: lineages made before it are no longer passed on to
new ops (`open`), so chains stay as short as the time between reads; a tensor keeps its own until
it is read. Once settled, a lineage is not used even if the device is lost later: the value was
made, and is lost with its device like any tensor (LostTensorError), as is a call's result whose
model changed since the call (set_weights, a training step): running the call again then would
give another value.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from .backends import Backend
from .tensor import Tensor, apply_op

# Numbers lineages and reads in the order they began: a read that began after a lineage was made
# covers its work (the queue runs in order).
_serial = itertools.count(1)
# id(backend) -> serial of the latest read on it that succeeded. A lineage keeps its backend
# alive, so no other backend can reuse the id while a lineage asks.
_read_upto: dict[int, int] = {}
# Ops a lineage passes through at most: a longer chain (a value updated in a loop without a read)
# is not computed again; its end fails like a tensor made by hand.
MAX_DEPTH = 64
# Values computed again during one read, by id(lineage) (or id(rerun) for a call's results), so
# a value two ops use (softmax's input) is computed once.
Memo = dict[int, Any]


class Lineage:
    """How to compute one tensor again on the current backend."""

    depth = 0

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.serial = next(_serial)

    def open(self) -> bool:
        """Whether no read on the backend succeeded since the work was queued (one that did
        proves it ran on a live device): ops on the tensor pass an open lineage on."""
        return _read_upto.get(id(self.backend), 0) < self.serial

    def lost(self) -> bool:
        """Whether the tensor's device is known to be lost: compute it again before reading."""
        return self.backend.retired or self.backend.is_lost()

    def usable(self) -> bool:
        """Whether computing the value again would give it (see the module's docstring)."""
        return self.open()

    async def recompute(self, memo: Memo) -> Tensor:
        """The value, computed on the current backend: a tensor `memo` owns (whoever made the
        memo disposes its tensors, or takes their storage)."""
        raise NotImplementedError

    def derived(self, op: str, inputs: list[Tensor], attrs: dict[str, Any]) -> Lineage | None:
        """The lineage of op's result on `inputs` (one of them has this lineage); None past
        MAX_DEPTH ops."""
        lineage = OpLineage(self.backend, op, inputs, attrs)
        return lineage if lineage.depth <= MAX_DEPTH else None


class CallLineage(Lineage):
    """The index-th tensor that a guarded call gives (a graph model can give several).
    `version` tells whether the state the call read (a model's weights) changed since."""

    def __init__(
        self,
        backend: Backend,
        rerun: Callable[[], Awaitable[Any]],
        index: int,
        version: Callable[[], int],
    ) -> None:
        super().__init__(backend)
        self.rerun, self.index, self.version = rerun, index, version
        self.at_version = version()

    def usable(self) -> bool:
        return super().usable() and self.version() == self.at_version

    async def recompute(self, memo: Memo) -> Tensor:
        key = id(self.rerun)
        if key not in memo:
            memo[key] = tensors_of(await self.rerun())
        given: list[Tensor] = memo[key]
        return given[self.index]


class OpLineage(Lineage):
    """An op's result: its inputs with an open lineage are computed again, the others (weights,
    tensors made by hand) are used as they are, but for small constants, made again from their
    host data (Tensor._remake)."""

    def __init__(
        self, backend: Backend, op: str, inputs: list[Tensor], attrs: dict[str, Any]
    ) -> None:
        super().__init__(backend)
        self.op, self.attrs = op, attrs
        self.inputs = [_source(t) for t in inputs]
        self.depth = 1 + max((i.depth for i in self.inputs if isinstance(i, Lineage)), default=0)

    def usable(self) -> bool:
        return super().usable() and all(i.usable() for i in self.inputs if isinstance(i, Lineage))

    async def recompute(self, memo: Memo) -> Tensor:
        if id(self) in memo:
            made: Tensor = memo[id(self)]
            return made
        inputs: list[Tensor] = []
        remade: list[Tensor] = []
        try:
            for item in self.inputs:
                if isinstance(item, Lineage):
                    inputs.append(await item.recompute(memo))
                elif isinstance(item, Tensor):
                    inputs.append(item)
                else:
                    remade.append(item())
                    inputs.append(remade[-1])
            memo[id(self)] = apply_op(self.op, inputs, self.attrs)
        finally:
            for t in remade:
                t.dispose()
        return memo[id(self)]


def _source(t: Tensor) -> Tensor | Lineage | Callable[[], Tensor]:
    """Where a recomputed op takes input t from: its open lineage, its host data, or t itself."""
    if t._lineage is not None and t._lineage.open():
        return t._lineage
    return t._remake if t._remake is not None else t


def tensors_of(result: Any) -> list[Tensor]:
    """The tensors a call gave: itself, or those of a list (a graph model's node values)."""
    items = result if isinstance(result, list | tuple) else [result]
    return [t for t in items if isinstance(t, Tensor)]


def attach(
    result: Any,
    backend: Backend,
    rerun: Callable[[], Awaitable[Any]],
    version: Callable[[], int],
) -> None:
    """Gives each device tensor of a guarded call's result the lineage `rerun` (the call again)."""
    for index, t in enumerate(tensors_of(result)):
        if t._storage is not None and t._storage.backend is backend:
            t._lineage = CallLineage(backend, rerun, index, version)


def dispose_memo(memo: Memo) -> None:
    """Frees what a recompute made (tensors whose storage was taken are empty already)."""
    for value in memo.values():
        for t in value if isinstance(value, list) else [value]:
            t.dispose()


async def read(t: Tensor) -> Any:
    """Reads t (Tensor.numpy's download); success settles every lineage of its backend made
    before this read began, t's own included (not a read of an empty tensor, which touches no
    device)."""
    serial = next(_serial)
    storage = t._live_storage()
    values = await storage.backend.download(storage.handle)
    if t.size:
        key = id(storage.backend)
        _read_upto[key] = max(_read_upto.get(key, 0), serial)
        t._lineage = None
    return values
