"""Storage buffers on the Python side: ids pooled by size class, and the handles (tensors) on them.

Python owns buffer ids and their reuse, so an op returns its handle at once without asking JS;
JS only creates the GPUBuffer the first time an id appears (a CREATE command).
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuHandle:
    """A tensor's storage buffer: pool id, bytes bound for it, and how to read it back.

    `strides` is None for a dense row-major tensor; a broadcast view (views.py) has element
    strides into buffer `id`, which may then be smaller than its shape says."""

    id: int
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...] | None = None


_SMALL_CLASS_LIMIT = 1 << 16


def size_class(nbytes: int) -> int:
    """Capacity a request of `nbytes` is served from: powers of two up to 64 KiB, then 64 KiB steps
    (so large tensors waste little and stay under maxBufferSize)."""
    nbytes = max(16, nbytes)
    if nbytes <= _SMALL_CLASS_LIMIT:
        return 1 << (nbytes - 1).bit_length()
    return -(-nbytes // _SMALL_CLASS_LIMIT) * _SMALL_CLASS_LIMIT


class BufferPool:
    """Buffer ids with reference counts; a buffer whose count drops to zero becomes reusable only
    after the submit that may still use it (`serial`) has completed on the GPU."""

    def __init__(self) -> None:
        self._next_id = 1
        self.capacity: dict[int, int] = {}
        self.refs: dict[int, int] = {}
        self._free: defaultdict[int, list[int]] = defaultdict(list)
        self._pending: deque[tuple[int, int]] = deque()  # (serial, id), serials ascending
        self._idle_since: dict[int, int] = {}  # free id -> the reclaim round that freed it
        self._round = 0

    def acquire(self, nbytes: int) -> tuple[int, bool]:
        """An id of capacity >= nbytes with one reference; True when JS must create it first."""
        capacity = size_class(nbytes)
        free = self._free[capacity]
        if free:
            buffer_id, fresh = free.pop(), False
            del self._idle_since[buffer_id]
        else:
            buffer_id, fresh = self._next_id, True
            self._next_id += 1
            self.capacity[buffer_id] = capacity
        self.refs[buffer_id] = 1
        return buffer_id, fresh

    def retain(self, buffer_id: int) -> None:
        self.refs[buffer_id] += 1

    def release(self, buffer_id: int, serial: int) -> None:
        """Drops a reference; at zero the id waits for submit `serial` before it can be reused."""
        self.refs[buffer_id] -= 1
        if self.refs[buffer_id] == 0:
            del self.refs[buffer_id]
            self._pending.append((serial, buffer_id))

    def reclaim(self, completed_serial: int) -> None:
        """Moves ids whose last possible use has completed back to their free lists."""
        self._round += 1
        while self._pending and self._pending[0][0] <= completed_serial:
            _, buffer_id = self._pending.popleft()
            self._free[self.capacity[buffer_id]].append(buffer_id)
            self._idle_since[buffer_id] = self._round

    def trim(self, max_idle_rounds: int, free_budget: int) -> list[int]:
        """Forgets free ids unused for more than `max_idle_rounds` reclaims, and the longest idle
        ones while free capacity exceeds `free_budget` bytes; returns them (JS destroys them).
        A training step reuses its buffers every round, so only what a past workload left goes."""
        idle = sorted(self._idle_since.items(), key=lambda item: item[1])
        free_bytes = sum(self.capacity[i] for i, _ in idle)
        dropped = []
        for buffer_id, since in idle:
            if self._round - since <= max_idle_rounds and free_bytes <= free_budget:
                break
            free_bytes -= self.capacity[buffer_id]
            dropped.append(buffer_id)
        for buffer_id in dropped:
            self._free[self.capacity[buffer_id]].remove(buffer_id)
            del self._idle_since[buffer_id], self.capacity[buffer_id]
        return dropped

    def stats(self) -> dict[str, int]:
        allocated = sum(self.capacity.values())
        live = sum(self.capacity[i] for i in self.refs)
        return {
            "gpu_buffers": len(self.capacity),
            "gpu_bytes_allocated": allocated,
            "gpu_bytes_in_use": live,
            "gpu_bytes_pending_free": sum(self.capacity[i] for _, i in self._pending),
            "gpu_bytes_free": sum(self.capacity[i] for i in self._idle_since),
        }
