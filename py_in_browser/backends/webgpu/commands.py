"""The Python side of the WebGPU command stream: buffer ids pooled by size class, and the int32
command list plus byte blob that bridge.js turns into one command encoder and one submit. The
stream's layout (opcodes, argument words) is defined here and sent to bridge.js at start-up.

Python owns buffer ids and their reuse, so an op returns its handle at once without asking JS;
JS only creates the GPUBuffer the first time an id appears (a CREATE command).
"""

from __future__ import annotations

from collections import defaultdict, deque

import numpy as np

# Opcodes of the command stream, and the words that follow each opcode, in order. A DISPATCH's
# `bindings` word counts the (buffer id, byte size) pairs after it; its `pipeline` word is the
# pipeline id | the label id (the op a profile shows) << LABEL_SHIFT.
CREATE, WRITE, PARAMS, DISPATCH, COPY, REPLAY, DESTROY = 1, 2, 3, 4, 5, 6, 7
OPCODES = {
    "CREATE": CREATE,
    "WRITE": WRITE,
    "PARAMS": PARAMS,
    "DISPATCH": DISPATCH,
    "COPY": COPY,
    "REPLAY": REPLAY,
    "DESTROY": DESTROY,
}
ARGUMENTS = {
    CREATE: ("buffer", "capacity"),
    WRITE: ("buffer", "offset", "size"),  # bytes of the blob at offset
    PARAMS: ("params", "offset", "size"),
    DISPATCH: ("pipeline", "params", "x", "y", "z", "bindings"),  # params -1: none
    COPY: ("source", "target", "size"),
    REPLAY: ("recording",),
    DESTROY: ("buffer",),
}
LABEL_SHIFT = 16
# Where a DISPATCH record's binding count is, and its words before the binding pairs.
DISPATCH_BINDINGS = 1 + ARGUMENTS[DISPATCH].index("bindings")
DISPATCH_HEADER = 1 + len(ARGUMENTS[DISPATCH])


def protocol() -> dict[str, object]:
    """The command stream's layout as bridge.js's createEngine takes it."""
    return {
        "opcodes": OPCODES,
        "arguments": {name: ARGUMENTS[code] for name, code in OPCODES.items()},
        "label_shift": LABEL_SHIFT,
    }


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


class CommandList:
    """Commands waiting for the next flush: int32 words plus a blob of upload data and params."""

    def __init__(self) -> None:
        self.words: list[int] = []
        self.blob = bytearray()
        self.dispatches = 0

    def __len__(self) -> int:
        return len(self.words)

    def _append_data(self, data: bytes | memoryview) -> tuple[int, int]:
        offset = len(self.blob)
        self.blob += data
        size = len(data)
        self.blob += b"\0" * (-size % 4)  # writeBuffer wants 4-byte aligned offsets and sizes
        return offset, size + (-size % 4)

    def create(self, buffer_id: int, capacity: int) -> None:
        self.words += (CREATE, buffer_id, capacity)

    def write(self, buffer_id: int, data: bytes | memoryview) -> None:
        offset, size = self._append_data(data)
        self.words += (WRITE, buffer_id, offset, size)

    def params(self, params_id: int, data: bytes) -> None:
        offset, size = self._append_data(data)
        self.words += (PARAMS, params_id, offset, size)

    def copy(self, source: int, target: int, nbytes: int) -> None:
        self.words += (COPY, source, target, nbytes)

    def destroy(self, buffer_id: int) -> None:
        self.words += (DESTROY, buffer_id)

    def replay(self, recording_id: int) -> None:
        self.words += (REPLAY, recording_id)

    def dispatch(self, record: list[int]) -> None:
        """Appends a record made by `dispatch_record`."""
        self.words += record
        self.dispatches += 1

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """The words and blob as numpy arrays (read zero-copy by the bridge); empties the list."""
        words = np.array(self.words, dtype=np.int32)
        blob = np.frombuffer(bytes(self.blob), dtype=np.uint8)
        self.words, self.blob, self.dispatches = [], bytearray(), 0
        return words, blob


def dispatch_record(
    pipeline_id: int,
    params_id: int,
    workgroups: tuple[int, int, int],
    bindings: list[tuple[int, int]],
) -> list[int]:
    """DISPATCH words (ARGUMENTS[DISPATCH]): pipeline word, params (-1: none), workgroups, then
    (buffer id, byte size) pairs."""
    words = [DISPATCH, pipeline_id, params_id, *workgroups, len(bindings)]
    for buffer_id, nbytes in bindings:
        words += (buffer_id, nbytes)
    return words
