"""A test-only backend running the webgpu kernel plans natively with wgpu-py (Vulkan/lavapipe).

It executes exactly what the browser runtime executes (the same WGSL, bindings, params and
workgroup counts), one command encoder per op, so kernels are tested without a browser.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from py_in_browser.backends import Backend, OutSpec
from py_in_browser.backends.webgpu import kernels, views
from py_in_browser.backends.webgpu.plan import BufferRef, DeviceLimits, Dispatch

NAME = "wgpu-native"

# What each dtype is stored as on the GPU: bool as u32 0/1, 4 bytes per element.
_STORED = {"float32": np.float32, "int32": np.int32, "bool": np.uint32}


@dataclass
class NativeHandle:
    buffer: Any  # wgpu.GPUBuffer
    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...] | None = None  # a broadcast view of `buffer` (views.py)


def request_device() -> Any:
    """The wgpu device, or an AssertionError saying why there is none (tests must not skip)."""
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    import wgpu

    reason: Exception | None = None
    adapter: Any = None
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception as exc:  # wgpu raises when no Vulkan/Metal/D3D driver is installed
        reason = exc
    if adapter is None:
        raise AssertionError(
            f"wgpu-py found no GPU adapter ({reason}); install a Vulkan driver, e.g. "
            "mesa-vulkan-drivers (lavapipe), to run the WGSL kernel tests"
        )
    # As bridge.js: the adapter's own storage-buffer limit, which group kernels may need.
    name = "max-storage-buffers-per-shader-stage"
    return adapter.request_device_sync(required_limits={name: adapter.limits[name]})


class WgpuNativeBackend(Backend):
    """Buffers are wgpu storage buffers; pipelines are cached by the dispatch key."""

    name = NAME

    def __init__(self, device: Any, limits: DeviceLimits | None = None) -> None:
        super().__init__()
        self.device = device
        self.device_limits = limits or DeviceLimits()
        self.pipelines: dict[str, Any] = {}
        self.dispatch_count = 0
        self.refs: dict[int, int] = {}  # id(buffer) -> handles on it (reshape and expand alias)

    def _buffer(self, nbytes: int) -> Any:
        import wgpu

        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        buffer = self.device.create_buffer(size=max(4, nbytes), usage=usage)
        self.refs[id(buffer)] = 1
        return buffer

    def upload(self, array: np.ndarray) -> NativeHandle:
        dtype = str(array.dtype) if array.dtype != np.bool_ else "bool"
        if dtype not in _STORED:
            raise TypeError(f"{NAME}: dtype {dtype} is not supported (WebGPU has no f64)")
        stored = np.ascontiguousarray(array, dtype=_STORED[dtype])
        handle = NativeHandle(self._buffer(stored.nbytes), tuple(array.shape), dtype)
        if stored.nbytes:
            self.device.queue.write_buffer(handle.buffer, 0, stored.tobytes())
        return handle

    async def download(self, handle: NativeHandle) -> np.ndarray:
        if handle.strides is not None:
            dense = self._materialize(handle)
            try:
                return await self.download(dense)
            finally:
                self.free(dense)
        raw = self.device.queue.read_buffer(handle.buffer)
        count = int(np.prod(handle.shape, dtype=np.int64))
        values = np.frombuffer(raw, dtype=_STORED[handle.dtype], count=count)
        return values.astype(np.bool_ if handle.dtype == "bool" else values.dtype).reshape(
            handle.shape
        )

    def free(self, handle: NativeHandle) -> None:
        self.refs[id(handle.buffer)] -= 1
        if not self.refs[id(handle.buffer)]:
            del self.refs[id(handle.buffer)]
            handle.buffer.destroy()

    def _alias(self, source: NativeHandle, shape: Any, strides: Any) -> NativeHandle:
        self.refs[id(source.buffer)] += 1
        return NativeHandle(source.buffer, tuple(shape), source.dtype, strides)

    def _materialize(self, view: NativeHandle) -> NativeHandle:
        assert view.strides is not None
        plan = views.materialize_plan(view.dtype, view.shape, view.strides, self.device_limits)
        return self._execute(plan, [view], view.shape, view.dtype)

    def _pipeline(self, dispatch: Dispatch) -> Any:
        pipeline = self.pipelines.get(dispatch.key)
        if pipeline is None:
            module = self.device.create_shader_module(code=dispatch.wgsl)
            pipeline = self.device.create_compute_pipeline(
                layout="auto", compute={"module": module, "entry_point": "main"}
            )
            self.pipelines[dispatch.key] = pipeline
        return pipeline

    def run(self, op: str, inputs: list[Any], attrs: dict[str, Any], out: OutSpec) -> Any:
        """As the browser runtime: reshape aliases, expand is a view that some kernels read
        in place, other kernels get views materialized."""
        if op == "reshape" and inputs[0].strides is None:
            return self._alias(inputs[0], out.shape, None)
        if op == "expand":
            src = inputs[0]
            strides = views.expand_strides(src.shape, src.strides, out.shape)
            return self._alias(src, out.shape, strides)
        temporaries = []
        if any(h.strides is not None for h in inputs):
            if kernels.reads_views_in_place(op):
                attrs = {**attrs, "input_strides": tuple(h.strides for h in inputs)}
            else:
                dense = {id(h): self._materialize(h) for h in inputs if h.strides is not None}
                temporaries = list(dense.values())
                inputs = [dense.get(id(h), h) for h in inputs]
        plan = kernels.plan(op, attrs, out, self.device_limits)
        result = self._execute(plan, inputs, out.shape, out.dtype)
        for handle in temporaries:
            self.free(handle)
        return result

    def _execute(self, plan: Any, inputs: list[Any], shape: Any, dtype: str) -> NativeHandle:
        return self.execute(plan, inputs, [(shape, dtype)])[0]

    def execute(
        self, plan: Any, inputs: list[Any], outputs: list[tuple[Any, str]]
    ) -> list[NativeHandle]:
        """Runs a plan whose output t has shape and dtype outputs[t] (a group kernel has
        several), in one command encoder."""
        import wgpu

        results = [
            NativeHandle(self._buffer(int(np.prod(shape)) * 4), tuple(shape), dtype)
            for shape, dtype in outputs
        ]
        scratch = [self._buffer(n) for n in plan.scratch_bytes]

        def buffer_of(ref: BufferRef) -> Any:
            if ref.role == "input":
                return inputs[ref.index].buffer
            return results[ref.index].buffer if ref.role == "output" else scratch[ref.index]

        encoder = self.device.create_command_encoder()
        for dispatch in plan.dispatches:
            pipeline = self._pipeline(dispatch)
            buffers = [buffer_of(ref) for ref in dispatch.bindings]
            if dispatch.params:
                buffers.append(
                    self.device.create_buffer_with_data(
                        data=dispatch.params, usage=wgpu.BufferUsage.UNIFORM
                    )
                )
            entries = [
                {"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
                for i, b in enumerate(buffers)
            ]
            bind_group = self.device.create_bind_group(
                layout=pipeline.get_bind_group_layout(0), entries=entries
            )
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, bind_group)
            compute.dispatch_workgroups(*dispatch.workgroups)
            compute.end()
            self.dispatch_count += 1
        self.device.queue.submit([encoder.finish()])
        for buffer in scratch:
            del self.refs[id(buffer)]
            buffer.destroy()
        return results
