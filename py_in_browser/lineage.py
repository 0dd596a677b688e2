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
it is read.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from . import autograd
from .backends import Backend
from .tensor import Tensor, apply_op

# Numbers lineages and reads in the order they began: a read that began after a lineage was made
# covers its work (the queue runs in order).
_serial = itertools.count(1)
# id(backend) -> serial of the latest read on it that succeeded. A lineage keeps its backend
# alive, so no other backend can reuse the id while a lineage asks.
_read_upto: dict[int, int] = {}


class Lineage:
    """How to compute one tensor again on the current backend."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.serial = next(_serial)

    def open(self) -> bool:
        """Whether the work behind the tensor may not have run on a live device: no read on its
        backend succeeded since it was queued (or that device is lost)."""
        backend = self.backend
        return backend.retired or backend.is_lost() or _read_upto.get(id(backend), 0) < self.serial

    def lost(self) -> bool:
        """Whether the tensor's device is known to be lost: compute it again before reading."""
        return self.backend.retired or self.backend.is_lost()

    async def recompute(self) -> Tensor:
        """A new tensor with the value, computed on the current backend."""
        raise NotImplementedError

    def derived(self, op: str, inputs: list[Tensor], attrs: dict[str, Any]) -> Lineage:
        """The lineage of op's result on `inputs` (one of them has this lineage)."""
        return OpLineage(self.backend, op, inputs, attrs)


class CallLineage(Lineage):
    """The index-th tensor that a guarded call gives (a graph model can give several)."""

    def __init__(self, backend: Backend, rerun: Callable[[], Awaitable[Any]], index: int) -> None:
        super().__init__(backend)
        self.rerun, self.index = rerun, index

    async def recompute(self) -> Tensor:
        given = tensors_of(await self.rerun())
        for i, t in enumerate(given):
            if i != self.index:
                t.dispose()
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

    async def recompute(self) -> Tensor:
        inputs: list[Tensor] = []
        made: list[Tensor] = []
        try:
            for item in self.inputs:
                if isinstance(item, Tensor):
                    inputs.append(item)
                    continue
                made.append(await item.recompute() if isinstance(item, Lineage) else item())
                inputs.append(made[-1])
            with autograd.paused():  # computing a value again is not a step of a tape
                return apply_op(self.op, inputs, self.attrs)
        finally:
            for t in made:
                t.dispose()


def _source(t: Tensor) -> Tensor | Lineage | Callable[[], Tensor]:
    """Where a recomputed op takes input t from: its open lineage, its host data, or t itself."""
    if t._lineage is not None and t._lineage.open():
        return t._lineage
    return t._remake if t._remake is not None else t


def tensors_of(result: Any) -> list[Tensor]:
    """The tensors a call gave: itself, or those of a list (a graph model's node values)."""
    items = result if isinstance(result, list | tuple) else [result]
    return [t for t in items if isinstance(t, Tensor)]


def attach(result: Any, backend: Backend, rerun: Callable[[], Awaitable[Any]]) -> None:
    """Gives each device tensor of a guarded call's result the lineage `rerun` (the call again)."""
    for index, t in enumerate(tensors_of(result)):
        if t._storage is not None and t._storage.backend is backend:
            t._lineage = CallLineage(backend, rerun, index)


async def read(t: Tensor) -> Any:
    """Reads t (Tensor.numpy's download); success settles every lineage of its backend made
    before this read began, t's own included."""
    serial = next(_serial)
    storage = t._live_storage()
    values = await storage.backend.download(storage.handle)
    key = id(storage.backend)
    _read_upto[key] = max(_read_upto.get(key, 0), serial)
    t._lineage = None
    return values
