"""The WebGPU runtime's pure parts in CPython: buffer pool reuse rules, command encoding, and the
recording signature that decides whether a train step may be replayed."""

from __future__ import annotations

import numpy as np
import pytest

from py_in_browser.backends.webgpu.backend import device_bytes
from py_in_browser.backends.webgpu.buffers import BufferPool, GpuHandle, size_class
from py_in_browser.backends.webgpu.commands import (
    CREATE,
    DISPATCH,
    WRITE,
    CommandList,
    dispatch_record,
)
from py_in_browser.backends.webgpu.recording import RecordingBuilder, signature


def test_size_classes_cover_the_request_with_bounded_waste() -> None:
    for nbytes in (1, 4, 17, 1000, 65536, 65537, 10_000_000):
        capacity = size_class(nbytes)
        assert capacity >= nbytes and capacity >= 16
        assert capacity <= max(16, 2 * nbytes, nbytes + 65536)


def test_a_freed_buffer_is_reused_only_after_its_submit_completed() -> None:
    pool = BufferPool()
    first, fresh = pool.acquire(100)
    assert fresh
    pool.release(first, serial=3)
    assert pool.acquire(100) != (first, False)  # submit 3 still running: a new id
    pool.reclaim(2)
    assert pool.acquire(120)[0] != first
    pool.reclaim(3)
    assert pool.acquire(128) == (first, False)  # same size class, its submit done


def test_retained_buffers_outlive_their_tensor() -> None:
    pool = BufferPool()
    buffer_id, _ = pool.acquire(64)
    pool.retain(buffer_id)  # a recording keeps it
    pool.release(buffer_id, serial=1)
    pool.reclaim(10)
    assert pool.stats()["gpu_bytes_in_use"] == 64
    pool.release(buffer_id, serial=11)
    pool.reclaim(11)
    assert pool.stats()["gpu_bytes_in_use"] == 0
    assert pool.acquire(64) == (buffer_id, False)


def test_commands_keep_blob_offsets_aligned_for_write_buffer() -> None:
    commands = CommandList()
    commands.create(1, 16)
    commands.write(1, b"\x01\x02\x03")
    commands.write(1, b"\x04" * 8)
    commands.dispatch(dispatch_record(0, -1, (2, 1, 1), [(1, 12)]))
    words, blob = commands.take()
    assert words.dtype == np.int32 and blob.dtype == np.uint8
    assert list(words[:3]) == [CREATE, 1, 16]
    assert list(words[3:7]) == [WRITE, 1, 0, 4]
    assert list(words[7:11]) == [WRITE, 1, 4, 8]
    assert list(words[11:]) == [DISPATCH, 0, -1, 2, 1, 1, 1, 1, 12]
    assert len(commands) == 0 and commands.dispatches == 0


def test_device_bytes_refuses_float64_and_stores_bool_as_u32() -> None:
    with pytest.raises(TypeError, match="float64"):
        device_bytes(np.zeros(2))
    assert bytes(device_bytes(np.array([True, False]))) == b"\x01\0\0\0\0\0\0\0"


def _step(builder: RecordingBuilder, words: list[int], uploads: dict[int, bytes]) -> None:
    builder.words += words
    builder.uploads.update(uploads)


def _recorded(ids: dict[str, int], constant: bytes) -> tuple[object, ...]:
    """y = x * c + w; w' = y: a step with an input, a constant, a state variable and a temp."""
    builder = RecordingBuilder()
    x, c, w, y = (ids[k] for k in "xcwy")
    _step(
        builder, dispatch_record(0, 0, (1, 1, 1), [(x, 4), (c, 4), (w, 4), (y, 4)]), {c: constant}
    )
    handle = lambda i: GpuHandle(i, 4, (1,), "float32")  # noqa: E731
    return signature(builder, [handle(x)], [(handle(w), handle(y))], [handle(y)])


def test_recordings_agree_when_only_buffer_ids_differ() -> None:
    one = _recorded({"x": 1, "c": 2, "w": 3, "y": 4}, b"\0\0\x80?")
    two = _recorded({"x": 11, "c": 12, "w": 13, "y": 14}, b"\0\0\x80?")
    assert one == two


def test_recordings_differ_when_a_host_constant_changes() -> None:
    # e.g. a dropout mask drawn on the host: replaying would reuse a stale one
    one = _recorded({"x": 1, "c": 2, "w": 3, "y": 4}, b"\0\0\x80?")
    two = _recorded({"x": 1, "c": 2, "w": 3, "y": 4}, b"\0\0\0@")
    assert one != two
