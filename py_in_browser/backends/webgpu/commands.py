"""The WebGPU command stream: the int32 command list plus byte blob that bridge.js turns into one
command encoder and one submit. Its layout (opcodes, argument words) is defined here and sent
to bridge.js at start-up.
"""

from __future__ import annotations

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
