"""The WebGPU runtime's pure parts in CPython: buffer pool reuse rules, command encoding, the
recording signature that decides whether a train step may be replayed, and the order in which
command lists, reads and recording drops reach bridge.js (over a fake bridge of bytearrays)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from py_in_browser import fusion
from py_in_browser.backends import OutSpec
from py_in_browser.backends.webgpu.backend import WebGPUBackend, device_bytes
from py_in_browser.backends.webgpu.buffers import BufferPool, GpuHandle, size_class
from py_in_browser.backends.webgpu.commands import (
    ARGUMENTS,
    CREATE,
    DISPATCH,
    DISPATCH_BINDINGS,
    DISPATCH_HEADER,
    WRITE,
    CommandList,
    dispatch_record,
)
from py_in_browser.backends.webgpu.plan import DeviceLimits
from py_in_browser.backends.webgpu.recording import Recording, RecordingBuilder, signature


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


class _Bridge:
    """bridge.js as the backend drives it, over a GPU of bytearrays: CREATE makes a buffer, WRITE
    fills it, a read of a buffer not created fails as the browser's does; flushWhenCompiled sends
    its list only once `compiled` is set (a kernel still compiling)."""

    def __init__(self) -> None:
        self.buffers: dict[int, bytearray] = {}
        self.compiled = asyncio.Event()
        self.dropped: list[int] = []
        self.events: list[tuple[str, list[int]]] = []  # ("dispatch", buffer ids) / ("read", [id])

    def definePipeline(self, *args: object) -> None:
        pass

    def defineLabel(self, *args: object) -> None:
        pass

    def record(self, *args: object) -> None:
        pass

    def dropRecording(self, recording_id: int) -> None:
        self.dropped.append(recording_id)

    def flush(self, words: np.ndarray, blob: np.ndarray, profiling: bool) -> int:
        i = 0
        while i < len(words):
            op = int(words[i])
            if op == CREATE:
                self.buffers[int(words[i + 1])] = bytearray(int(words[i + 2]))
            elif op == WRITE:
                buffer_id, offset, size = (int(w) for w in words[i + 1 : i + 4])
                self.buffers[buffer_id][:size] = blob[offset : offset + size].tobytes()
            if op == DISPATCH:  # kernels do not run here: only what reads depend on
                count = int(words[i + DISPATCH_BINDINGS])
                pairs = words[i + DISPATCH_HEADER : i + DISPATCH_HEADER + 2 * count]
                self.events.append(("dispatch", [int(b) for b in pairs[::2]]))
                i += DISPATCH_HEADER + 2 * count
            else:
                i += 1 + len(ARGUMENTS[op])
        return 0

    async def flushWhenCompiled(self, words: np.ndarray, blob: np.ndarray, profiling: bool) -> int:
        await self.compiled.wait()
        return self.flush(words, blob, profiling)

    async def read(self, buffer_id: int, nbytes: int) -> Any:
        self.events.append(("read", [buffer_id]))
        if buffer_id not in self.buffers:
            raise TypeError("copyBufferToBuffer: parameter 1 is not of type 'GPUBuffer'")
        data = np.frombuffer(bytes(self.buffers[buffer_id][:nbytes]), np.uint8)
        return SimpleNamespace(assign_to=lambda out: out.__setitem__(..., data))


def test_reads_and_drops_wait_for_a_list_going_out_in_parts() -> None:
    """A list waiting for a kernel keeps what follows it waiting: a read gathered beside it (as
    checkpoint.save reads weights) sees the buffer made after the uncompiled dispatch, with its
    bytes, and a recording is dropped in JS only after the lists that may replay it."""

    async def scenario() -> tuple[list[np.ndarray], list[int], list[int]]:
        backend, bridge = WebGPUBackend(), _Bridge()
        backend.engine = bridge
        x = backend.upload(np.arange(4, dtype=np.float32))
        spec = OutSpec((4,), "float32", ((4,), (4,)), ("float32", "float32"))
        y = backend.run("add", [x, x], {}, spec)  # its kernel has not compiled yet
        late = backend.upload(np.array([1.5, -2.0, 3.25], np.float32))
        reads = asyncio.gather(backend.download(y), backend.download(late))
        await asyncio.sleep(0)  # both reads asked for while the list waits
        recording = Recording(7, (), (), (), frozenset(), None, 0)
        backend.drop_recording(recording)
        dropped_while_waiting = list(bridge.dropped)
        bridge.compiled.set()
        return list(await reads), dropped_while_waiting, bridge.dropped

    (_, late), dropped_while_waiting, dropped = asyncio.run(scenario())
    assert late.tolist() == [1.5, -2.0, 3.25]
    assert dropped_while_waiting == [] and dropped == [7]


def _registered_group(size: int) -> fusion.Group:
    """The first registered group of `size` rules for one variable (3: the default Adam's w, m
    and v; 2: SGD with momentum's w and velocity)."""
    return next(g for g in fusion.common_groups() if len(g) == size and "var" in g[0][1])


def _operands(backend: WebGPUBackend, group: fusion.Group, handles: dict[str, GpuHandle]) -> None:
    """Uploads the tensors a registered group's rules read that `handles` lacks, by name:
    scalars and the gate of shape (), the rest (5,)."""
    kinds = dict(fusion.common_programs())
    for program, names in group:
        for name, kind in zip(names, kinds[program], strict=True):
            if name not in handles:
                shape = () if kind in ("scalar", "gate") else (5,)
                dtype = bool if kind == "gate" else np.float32
                handles[name] = backend.upload(np.ones(shape, dtype=dtype))


def _group_calls(
    backend: WebGPUBackend, group: fusion.Group, handles: dict[str, GpuHandle]
) -> list[GpuHandle]:
    """Runs a registered group's rules as an optimizer does on the tensors named in `handles`
    (_operands uploads those missing); their outputs."""
    _operands(backend, group, handles)
    outputs = []
    for program, names in group:
        inputs = [handles[n] for n in names]
        spec = OutSpec(
            (5,), "float32", tuple(h.shape for h in inputs), tuple(h.dtype for h in inputs)
        )
        outputs.append(backend.run("fused", inputs, {"program": program}, spec))
    return outputs


@pytest.mark.parametrize(("bindings", "kernels"), [(10, 1), (8, 3)])
def test_an_adam_update_is_one_kernel_per_variable_where_the_device_binds_enough(
    bindings: int, kernels: int
) -> None:
    """Adam's three rules for a variable, called back to back, go out as one kernel reading
    w, m, v, g, the two step scalars and the gate once and writing the three outputs, where
    the device binds 10 storage buffers (SwiftShader's limit); with WebGPU's default 8 as three
    kernels. An op after them that reads their outputs is dispatched after them; a recording
    holds them though an input (made before it) and an output were freed before they went out;
    reading an output sends its kernel first; every buffer is released at the end."""

    async def scenario() -> tuple[list[tuple[str, list[int]]], list[int], list[int]]:
        backend, bridge = WebGPUBackend(), _Bridge()
        backend.engine = bridge
        backend.device_limits = DeviceLimits(max_storage_buffers=bindings)
        bridge.compiled.set()  # every kernel compiled: lists go out whole
        handles: dict[str, GpuHandle] = {}
        _operands(backend, _registered_group(3), handles)  # made before the step
        backend.flush()
        bridge.events.clear()
        backend.begin_recording()  # as in a recorded train step
        outputs = _group_calls(backend, _registered_group(3), handles)
        assert not bridge.events  # held back so far
        backend.free(handles["grad"])  # tensors freed while their calls wait
        backend.free(outputs[0])
        add = OutSpec((5,), "float32", ((5,), (5,)), ("float32", "float32"))
        total = backend.run("add", [outputs[1], outputs[2]], {}, add)
        recording = backend.finish_recording([], [], [total])
        assert recording.dispatches == kernels + 1
        await backend.download(total)
        events = list(bridge.events)
        ids = [h.id for h in handles.values()], [o.id for o in outputs]
        backend.drop_recording(recording)
        for handle in [*handles.values(), *outputs[1:], total]:
            if handle is not handles["grad"]:
                backend.free(handle)
        assert not backend.pool.refs  # retains and releases balance
        return events, *ids

    events, inputs, outputs = asyncio.run(scenario())
    dispatched = [ids for kind, ids in events if kind == "dispatch"]
    assert len(dispatched) == kernels + 1
    if kernels == 1:
        assert dispatched[0] == [*inputs, *outputs]  # each input bound once, then w, m, v
    else:
        assert [ids[-1] for ids in dispatched[:3]] == outputs
    assert dispatched[-1][:2] == outputs[1:] and events[-1][0] == "read"


def test_two_variables_of_one_size_update_as_one_kernel_each() -> None:
    """SGD with momentum's two rules for one variable, then for another of the same size: a
    run stops where its registered group ends, so each variable is one kernel (the second
    variable's weight rule does not join the first's run and leave its velocity alone)."""

    async def scenario() -> list[list[int]]:
        backend, bridge = WebGPUBackend(), _Bridge()
        backend.engine = bridge
        backend.device_limits = DeviceLimits(max_storage_buffers=10)
        bridge.compiled.set()
        shared: dict[str, GpuHandle] = {}
        first = _group_calls(backend, _registered_group(2), shared)
        second = {k: v for k, v in shared.items() if v.shape == ()}  # the same gate and scalars
        _group_calls(backend, _registered_group(2), second)
        backend.flush()
        assert next(ids for _, ids in bridge.events)[-2:] == [h.id for h in first]
        return [ids for kind, ids in bridge.events if kind == "dispatch"]

    assert len(asyncio.run(scenario())) == 2


def _conv_layer(backend: WebGPUBackend) -> tuple[list[GpuHandle], list[GpuHandle]]:
    """A Conv2D layer with bias and relu as the engine calls the backend (conv2d, the bias
    reshaped and expanded to a row view, add, relu), on a 6x6 RGB input, 8 channels: the
    operands (x, w, bias) and the layer's tensors (y, z, a)."""
    geo = {"strides": (1, 1), "pads": ((1, 1), (1, 1))}
    x = backend.upload(np.ones((1, 6, 6, 3), np.float32))
    w = backend.upload(np.ones((3, 3, 3, 8), np.float32))
    bias = backend.upload(np.ones(8, np.float32))
    shape = (1, 6, 6, 8)
    y = backend.run(
        "conv2d", [x, w], geo, OutSpec(shape, "float32", (x.shape, w.shape), ("float32",) * 2)
    )
    row = backend.run(
        "reshape",
        [bias],
        {"shape": (1, 1, 1, 8)},
        OutSpec((1, 1, 1, 8), "float32", ((8,),), ("float32",)),
    )
    view = backend.run(
        "expand", [row], {"shape": shape}, OutSpec(shape, "float32", ((1, 1, 1, 8),), ("float32",))
    )
    z = backend.run(
        "add", [y, view], {}, OutSpec(shape, "float32", (shape, shape), ("float32",) * 2)
    )
    a = backend.run("relu", [z], {}, OutSpec(shape, "float32", (shape,), ("float32",)))
    backend.free(row)
    backend.free(view)
    return [x, w, bias], [y, z, a]


def test_a_conv_layers_bias_and_relu_are_applied_by_its_kernel() -> None:
    """conv2d, the add of a bias row to its output and relu of that go out as one kernel
    writing the relu's output (binding x, w, that output, the bias). y and z are computed only
    when read: freed unread, never; y read later, by its own kernel before its reader; inside a
    recording they stay out of it (the recorded step is one kernel), and a recording after it
    computes those still held first. A layer freed whole while it waits is no error, and every
    buffer is released at the end."""
    square = OutSpec((1, 6, 6, 8), "float32", ((1, 6, 6, 8),) * 2, ("float32",) * 2)
    one = OutSpec((1, 6, 6, 8), "float32", ((1, 6, 6, 8),), ("float32",))

    async def scenario() -> None:
        backend, bridge = WebGPUBackend(), _Bridge()
        backend.engine = bridge
        bridge.compiled.set()

        def dispatched() -> list[list[int]]:
            found = [ids for kind, ids in bridge.events if kind == "dispatch"]
            bridge.events.clear()
            return found

        (x, w, bias), (y, z, a) = _conv_layer(backend)
        backend.free(y)
        backend.free(z)  # as inference does, right after each is used
        product = backend.run("mul", [a, a], {}, square)
        await backend.download(product)
        assert dispatched() == [[x.id, w.id, a.id, bias.id], [a.id, a.id, product.id]]
        alive = [x, w, bias, a, product]

        (x, w, bias), (y, z, a) = _conv_layer(backend)
        product = backend.run("mul", [a, a], {}, square)
        negated = backend.run("neg", [y], {}, one)
        backend.free(z)
        await backend.download(negated)
        assert dispatched() == [
            [x.id, w.id, a.id, bias.id],
            [a.id, a.id, product.id],
            [x.id, w.id, y.id],  # y's own convolution, before its reader
            [y.id, negated.id],
        ]
        alive += [x, w, bias, y, a, product, negated]

        backend.begin_recording()
        (x, w, bias), (y, z, a) = _conv_layer(backend)
        recording = backend.finish_recording([], [], [a])
        assert recording.dispatches == 1
        backend.begin_recording()  # y and z, still held, are computed before it starts
        backend.abort_recording()
        backend.flush()
        assert dispatched() == [
            [x.id, w.id, a.id, bias.id],
            [x.id, w.id, y.id],
            [x.id, w.id, z.id, bias.id],
        ]
        backend.drop_recording(recording)
        alive += [x, w, bias, y, z, a]

        backend.begin_recording()  # a layer whose every tensor is freed while it waits
        operands, layer = _conv_layer(backend)
        for handle in layer:
            backend.free(handle)
        backend.drop_recording(backend.finish_recording([], [], []))
        for handle in [*operands, *alive]:
            backend.free(handle)
        assert not backend.pool.refs  # retains and releases balance

    asyncio.run(scenario())
