"""The WebGPU backend: tensors in pooled storage buffers, ops as kernel-plan dispatches batched into
command lists, one submit per flush, training steps recorded once and replayed from JS."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

import numpy as np

from ... import _js, events
from .. import Backend, OutSpec
from . import codegen, commands, epilogues, fused_runs, kernels, views, warmup
from .buffers import BufferPool, GpuHandle
from .commands import CommandList, dispatch_record
from .epilogues import HeldConv, Lazy
from .fused_runs import FusedCall, FusedRun
from .kernels import NAME
from .plan import BufferRef, DeviceLimits
from .recording import Recording, RecordingBuilder, signature

# A flush is forced when this many dispatches wait (long eager sequences outside fit).
FLUSH_DISPATCHES = 512
# fit awaits the GPU every this many steps: back-pressure without reading any data.
FENCE_EVERY_STEPS = 4
# Compile the common kernels at start-up (False: each compiles when a step first needs it).
WARM_UP = True
# Free pooled buffers are destroyed after this many flushes unused, or beyond this many free bytes.
POOL_MAX_IDLE_FLUSHES = 8
POOL_FREE_BUDGET = 64 << 20
_GPU_TYPES = {"float32": "float32", "int32": "int32", "bool": "uint32"}
_LIMIT_NAMES = {  # DeviceLimits field (also the pib.init(limits=...) key) -> WebGPU limit
    "max_workgroups_per_dimension": "maxComputeWorkgroupsPerDimension",
    "max_storage_buffer_binding_size": "maxStorageBufferBindingSize",
    "max_workgroup_storage_size": "maxComputeWorkgroupStorageSize",
    "max_invocations_per_workgroup": "maxComputeInvocationsPerWorkgroup",
    "max_storage_buffers": "maxStorageBuffersPerShaderStage",
}
# The limits bridge.js asks the adapter for in full and reports back: those read above, the
# buffer size, and what the kernels' workgroups and bindings need.
REQUESTED_LIMITS = (
    "maxStorageBufferBindingSize",
    "maxBufferSize",
    "maxComputeWorkgroupsPerDimension",
    "maxComputeWorkgroupStorageSize",
    "maxComputeInvocationsPerWorkgroup",
    "maxComputeWorkgroupSizeX",
    "maxComputeWorkgroupSizeY",
    "maxComputeWorkgroupSizeZ",
    "maxStorageBuffersPerShaderStage",
)


def webgpu_available() -> bool:
    """In the browser and the worker has navigator.gpu (start() still checks for an adapter)."""
    return _js.in_browser() and getattr(_js.js_global("navigator"), "gpu", None) is not None


# Workgroups per CPU thread a software adapter keeps resident: enough to balance uneven tiles.
RESIDENT_PER_THREAD = 4


def _resident_workgroups(info: dict[str, Any]) -> int:
    """DeviceLimits.resident_workgroups: a cap for adapters that run on the CPU (SwiftShader,
    or any the browser marks as fallback), 0 (no cap) for real GPUs."""
    software = info["software"]
    if software["fallback"] or info["adapter"].get("architecture") == "swiftshader":
        return RESIDENT_PER_THREAD * max(1, int(software["threads"]))
    return 0


def gpu_nbytes(shape: tuple[int, ...]) -> int:
    """Bytes on the GPU: every element type is 4 bytes (bool as u32), and a buffer at least 4."""
    return 4 * max(1, int(math.prod(shape)))  # per op: np.prod costs ~40x more per call


class WebGPUBackend(Backend):
    """Handles are GpuHandle; all GPU work goes through one bridge object (bridge.js Engine)."""

    name = NAME
    supports_replay = True
    # A recorded predict (graph-model call, top_k ranking) is one flush instead of Python per
    # op: the hand model's ~235 kernels cost ~210 ms of Python dispatch a call under load.
    replays_inference = True

    def __init__(self, limits: dict[str, Any] | None = None) -> None:
        super().__init__(limits)
        self.engine: Any = None
        self.device_limits = DeviceLimits()
        self.max_buffer_size = 1 << 28
        self.timestamps = False
        self.adapter: dict[str, Any] = {}
        self.pool = BufferPool()
        self.commands = CommandList()
        self._fused_run = FusedRun()  # fused calls held back to go out as one kernel
        self._held_conv: HeldConv | None = None  # a conv2d waiting for its bias and relu
        self._lazy: dict[int, Lazy] = {}  # buffer id -> its kernel, dispatched if it is read
        self.submitted = 0  # command lists taken to send, one serial each (bridge.js counts too)
        self.completed = 0
        self.js_calls = 0
        self.words_sent = 0  # command words flushed: what a step costs to describe to JS
        self.bytes_uploaded = 0
        self.bytes_downloaded = 0
        self.steps = 0
        self.steps_replayed = 0
        self.first_step_at_once = True  # see prepare's after_loss
        self._pipelines: dict[str, int] = {}
        self._params: dict[bytes, int] = {}
        self._labels: dict[str, int] = {}
        self._ready: set[int] = set()  # pipelines known to have finished compiling
        self._unready: set[int] = set()  # used by the open command list, maybe still compiling
        # Set while flush_async waits for bridge.js to send a list in parts: later commands wait.
        self._in_flight: asyncio.Future[None] | None = None
        self._drops: list[tuple[int, int]] = []  # (serial of the list to send first, recording)
        self._warming: set[int] = set()  # warm-up pipelines no dispatch has used yet
        self._recording: RecordingBuilder | None = None
        self._recordings = 0
        self._on_lost: Any = None
        self.software: dict[str, Any] = {}

    # ---- start-up ----

    async def start(self) -> None:
        if not webgpu_available():
            raise RuntimeError("WebGPU needs a browser with navigator.gpu")
        bridge = await _js.load_bridge(__package__ or "py_in_browser.backends.webgpu", "bridge.js")
        self._on_lost = _js.create_proxy(self._device_lost, persistent=True)
        self.engine = await bridge.createEngine(self._on_lost, bridge_protocol())
        info = json.loads(self.engine.info())
        device = info["limits"]
        values = {
            field: min(int(device[js_name]), int(self.limits.get(field, device[js_name])))
            for field, js_name in _LIMIT_NAMES.items()
        }
        values["resident_workgroups"] = int(
            self.limits.get("resident_workgroups", _resident_workgroups(info))
        )
        self.device_limits = DeviceLimits(**values)
        self.max_buffer_size = min(
            int(device["maxBufferSize"]), int(self.limits.get("max_buffer_size", 1 << 62))
        )
        self.timestamps = bool(info["timestamps"])
        self.adapter = info["adapter"]
        self.software = info["software"]

    async def prepare(self, after_loss: bool = False) -> None:
        self.first_step_at_once = not after_loss
        if WARM_UP:
            self.schedule_background()

    def background(self) -> None:
        self.warm_up()

    def close(self) -> None:
        """Destroys the device. Its lost signal then calls a destroyed proxy, which throws into
        the bridge's ignored rejection: no device_lost runtime event for a closed candidate."""
        self.engine.destroyDevice()
        _js.destroy_proxy(self._on_lost)
        self._on_lost = None
        self.engine = None

    def software_renderer(self) -> str | None:
        if self.adapter.get("architecture") == "swiftshader":
            return "SwiftShader"
        return "a fallback adapter" if self.software.get("fallback") else None

    def warm_up(self) -> None:
        """Compiles the common kernels ahead of the steps that use them (they are shape-generic,
        so these few dozen pipelines serve most models). The first step's kernels go to the GPU
        process at once, which compiles them side by side while Python builds that step: Python
        builds it in one synchronous stretch, so kernels it asks for then only reach the GPU
        process when it ends. The rest compile one at a time in the background; a kernel a step
        needs before the warm-up reached it is compiled at once, so they never delay a step by
        more than the one compile in progress (on a software GPU compiling is the cost, and it
        only pays off for time spent idle after init). After a loss (prepare's after_loss) the
        first step's kernels wait their turn in the background too."""
        for key, wgsl in warmup.first_step_kernels(self.device_limits):
            self._pipeline_id(key, wgsl, background=not self.first_step_at_once)
        for key, wgsl in warmup.common_kernels(self.device_limits):
            self._pipeline_id(key, wgsl, background=True)

    def _device_lost(self, message: str) -> None:
        events.record_event("device_lost", self.steps, backend=NAME, message=str(message))

    def capabilities(self) -> dict[str, Any]:
        caps = super().capabilities()
        limits = self.device_limits
        caps.update(
            dtypes=list(_GPU_TYPES),
            max_storage_buffer_binding_size=limits.max_storage_buffer_binding_size,
            max_buffer_size=self.max_buffer_size,
            max_compute_workgroups_per_dimension=limits.max_workgroups_per_dimension,
            max_compute_workgroup_storage_size=limits.max_workgroup_storage_size,
            max_compute_invocations_per_workgroup=limits.max_invocations_per_workgroup,
            resident_workgroups=limits.resident_workgroups,
            timestamp_query=self.timestamps,
            adapter=self.adapter,
            software_renderer=self.software_renderer(),
            supports_replay=True,
        )
        return caps

    def memory_stats(self) -> dict[str, Any]:
        """Pool bytes and the bridge's live JS objects (buffers, bind groups, pipelines)."""
        self.js_calls += 1
        pool = self.pool.stats()
        return {
            "gpu_bytes": pool["gpu_bytes_allocated"],  # the figure every backend reports
            **pool,
            **json.loads(self.engine.stats()),
            "js_calls": self.js_calls,
            "words_sent": self.words_sent,
            "steps_replayed": self.steps_replayed,
        }

    # ---- memory ----

    def _allocate(self, shape: tuple[int, ...], dtype: str) -> GpuHandle:
        nbytes = self._check_fits(shape)
        buffer_id, fresh = self.pool.acquire(nbytes)
        if fresh:
            self.commands.create(buffer_id, self.pool.capacity[buffer_id])
        return GpuHandle(buffer_id, nbytes, shape, dtype)

    def tensor_fits(self, shape: tuple[int, ...]) -> str | None:
        nbytes = gpu_nbytes(shape)
        binding = self.device_limits.max_storage_buffer_binding_size
        if nbytes > binding:
            return (
                f"webgpu: a tensor of shape {shape} needs {nbytes} bytes, more than this device's "
                f"maxStorageBufferBindingSize ({binding} bytes); use smaller batches or shapes"
            )
        return super().tensor_fits(shape)

    def _check_fits(self, shape: tuple[int, ...]) -> int:
        reason = self.tensor_fits(shape)
        if reason is not None:
            raise ValueError(reason)
        return gpu_nbytes(shape)

    def _retain_for_recording(self, buffer_id: int) -> None:
        recording = self._recording
        if recording is not None and buffer_id not in recording.retained:
            recording.retained.add(buffer_id)
            self.pool.retain(buffer_id)

    def upload(self, array: np.ndarray) -> GpuHandle:
        data = device_bytes(array)
        handle = self._allocate(tuple(array.shape), str(array.dtype))
        self.commands.write(handle.id, data)
        self.bytes_uploaded += len(data)
        if self._recording is not None:
            self._retain_for_recording(handle.id)
            self._recording.uploads[handle.id] = bytes(data)
        return handle

    def free(self, handle: GpuHandle) -> None:
        self._release(handle.id)

    def _release(self, buffer_id: int) -> None:
        # Whatever used it is in the open command list or an earlier submit: the next one covers it.
        self.pool.release(buffer_id, self.submitted + 1)
        if buffer_id in self._lazy and buffer_id not in self.pool.refs:
            self._release_all(self._lazy.pop(buffer_id).inputs)  # never read: never computed

    async def download(self, handle: GpuHandle) -> np.ndarray:
        self._dispatch_held()
        self._dispatch_lazy([handle])
        if handle.strides is not None:
            dense = self._materialize(handle)
            try:
                return await self.download(dense)
            finally:
                self.free(dense)
        await self.flush_async()
        numel = int(math.prod(handle.shape))
        if numel == 0:
            return np.zeros(handle.shape, dtype=handle.dtype)
        self.js_calls += 1
        data = await self.engine.read(handle.id, handle.nbytes)
        self.bytes_downloaded += handle.nbytes
        raw = _js.typed_array_to_numpy(data, "uint8", (handle.nbytes,))
        values = raw.view(_GPU_TYPES[handle.dtype])[:numel].reshape(handle.shape)
        return values != 0 if handle.dtype == "bool" else values

    def read_now(self, handle: GpuHandle) -> np.ndarray:
        """A synchronous read: only where the browser lets Python block on a promise (JSPI)."""
        if not _js.can_run_sync():
            raise RuntimeError(
                "webgpu tensors cannot be read synchronously in this browser: use "
                "`await t.numpy()` (or `await t.item()`)"
            )
        result: np.ndarray = _js.run_sync(self.download(handle))
        return result

    async def upload_image(self, bitmap: Any) -> GpuHandle:
        """An ImageBitmap as a (1, H, W, 3) float32 tensor of bytes / 255: copyExternalImageToTexture
        and one compute pass of wgsl/image_rgb.wgsl (bridge.js imageToBuffer), no copy through
        Python. What was queued before is flushed first, so the frame lands after it."""
        if self._recording is not None:
            raise RuntimeError("webgpu: frames cannot be uploaded while a step is recorded")
        shape = (1, int(bitmap.height), int(bitmap.width), 3)
        handle = self._allocate(shape, "float32")
        await self.flush_async()  # the buffer exists in JS once its CREATE is flushed
        self.js_calls += 1
        self.engine.imageToBuffer(bitmap, handle.id, codegen.template("image_rgb.wgsl"))
        return handle

    # ---- ops ----

    def _pipeline_id(self, key: str, wgsl: str, background: bool = False) -> int:
        pipeline_id = self._pipelines.get(key)
        if pipeline_id is None:
            pipeline_id = self._pipelines[key] = len(self._pipelines)
            self.js_calls += 1
            self.engine.definePipeline(pipeline_id, key, wgsl, background)
            if background:
                self._warming.add(pipeline_id)
        elif not background and pipeline_id in self._warming:
            self._warming.discard(pipeline_id)  # needed now: compile it ahead of the warm-up
            self.js_calls += 1
            self.engine.usePipeline(pipeline_id)
        return pipeline_id

    def _label_id(self, op: str) -> int:
        """The op name profiles show for a dispatch (its pipeline may serve several ops)."""
        label_id = self._labels.get(op)
        if label_id is None:
            label_id = self._labels[op] = len(self._labels)
            self.js_calls += 1
            self.engine.defineLabel(label_id, op)
        return label_id

    def _params_id(self, data: bytes) -> int:
        if not data:
            return -1
        params_id = self._params.get(data)
        if params_id is None:
            params_id = self._params[data] = len(self._params)
            self.commands.params(params_id, data)
        return params_id

    def run(self, op: str, inputs: list[Any], attrs: dict[str, Any], out: OutSpec) -> GpuHandle:
        started = time.perf_counter()
        result = self._run(op, inputs, attrs, out)
        if self.profile_log is not None and not self.timestamps:
            # Without timestamp-query the only honest number is the host time to encode the op.
            elapsed = (time.perf_counter() - started) * 1000.0
            self.profile_log.setdefault(op, []).append(elapsed)
        if self.commands.dispatches >= FLUSH_DISPATCHES and self._recording is None:
            self.flush()
        return result

    def _run(self, op: str, inputs: list[Any], attrs: dict[str, Any], out: OutSpec) -> GpuHandle:
        source: GpuHandle = inputs[0] if inputs else None  # type: ignore[assignment]
        if op == "reshape" and source.strides is None:
            return self._alias(source, out.shape, None)  # same bytes, new shape: no copy
        if op == "expand":
            return self._alias(
                source, out.shape, views.expand_strides(source.shape, source.strides, out.shape)
            )
        if op == "fused" and fused_runs.can_wait(inputs, out):
            self._dispatch_held_conv()
            self._dispatch_lazy(inputs)
            return self._hold_fused(attrs["program"], inputs, out)
        if self._held_conv is not None:
            stage = self._join_held_conv(op, inputs, out)
            if stage is not None:
                return stage
        self._dispatch_held()
        self._dispatch_lazy(inputs)
        if op == "conv2d" and epilogues.can_hold(inputs, out):
            return self._hold_conv(attrs, inputs, out)
        if op == "reshape":
            return self._materialize(source, out.shape)
        temporaries: list[GpuHandle] = []
        if any(h.strides is not None for h in inputs):
            if kernels.reads_views_in_place(op):
                attrs = {**attrs, "input_strides": tuple(h.strides for h in inputs)}
            else:
                temporaries = [self._materialize(h) for h in inputs if h.strides is not None]
                dense = iter(temporaries)
                inputs = [next(dense) if h.strides is not None else h for h in inputs]
        plan = kernels.plan(op, attrs, out, self.device_limits)  # memoized there
        result = self._allocate(out.shape, out.dtype)
        self._emit(op, plan, inputs, [result])
        for handle in temporaries:
            self.free(handle)
        return result

    def _hold_fused(self, program: Any, inputs: list[GpuHandle], out: OutSpec) -> GpuHandle:
        """A fused call's output; its dispatch waits in the fused run (fused_runs.py), which the
        calls after it may join."""
        call = FusedCall(program, tuple(inputs), out, self._allocate(out.shape, out.dtype))
        for handle in (*call.inputs, call.result):  # freed before it goes out: still its own
            self.pool.retain(handle.id)
        if not self._fused_run.joins(call):
            self._dispatch_fused_run()
        self._fused_run.add(call)
        return call.result

    def _hold_conv(self, attrs: dict[str, Any], inputs: list[GpuHandle], out: OutSpec) -> GpuHandle:
        """A conv2d's output y; its dispatch waits for the layer's bias add and relu
        (epilogues.py)."""
        x, w = inputs
        y = self._allocate(out.shape, out.dtype)
        for handle in (x, w, y):  # each stays its own until dispatched, freed or not
            self.pool.retain(handle.id)
        self._held_conv = HeldConv(attrs, out, (x, w), [y])
        return y

    def _join_held_conv(self, op: str, inputs: list[GpuHandle], out: OutSpec) -> GpuHandle | None:
        """The output of `op` if it is the held conv2d's bias add or relu (then applied by the
        convolution's kernel), else None."""
        held = self._held_conv
        assert held is not None
        bias = epilogues.bias_row(held, op, inputs)
        if bias is not None:
            self._dispatch_lazy([bias])
            self.pool.retain(bias.id)
            held.bias = bias
        elif epilogues.takes_relu(held, op, inputs):
            held.relu = True
        else:
            return None
        stage = self._allocate(out.shape, out.dtype)
        self.pool.retain(stage.id)
        held.stages.append(stage)
        return stage

    def _dispatch_held_conv(self) -> None:
        """Dispatches the held conv2d with what joined it; its earlier tensors that are still
        held by someone become lazy (epilogues.py)."""
        held, self._held_conv = self._held_conv, None
        if held is None:
            return
        final, earlier = epilogues.dispatches(held, self.device_limits)
        self._emit(final.label, final.plan, list(final.inputs), [final.output])
        for lazy in earlier:
            if self.pool.refs[lazy.output.id] > 1:  # a tensor besides the held layer's own
                for handle in lazy.inputs:
                    self.pool.retain(handle.id)
                self._lazy[lazy.output.id] = lazy
        self._release_all([*final.inputs, *held.stages])

    def _dispatch_lazy(self, handles: Any) -> None:
        """Dispatches the kernels of those of `handles` that are lazy, before they are read."""
        for handle in handles:
            lazy = self._lazy.pop(handle.id, None)
            if lazy is not None:
                self._emit(lazy.label, lazy.plan, list(lazy.inputs), [lazy.output])
                self._release_all(lazy.inputs)

    def _release_all(self, handles: Any) -> None:
        for handle in handles:
            self._release(handle.id)

    def _dispatch_held(self) -> None:
        """Dispatches what waits: the fused run or the held conv2d. Everything that touches the
        command list calls this first, so commands keep the order Python asked for them in."""
        self._dispatch_fused_run()
        self._dispatch_held_conv()

    def _dispatch_fused_run(self) -> None:
        """Dispatches the fused calls waiting, as one kernel per registered group where they
        form one (fused_runs.py)."""
        if not self._fused_run:
            return
        calls = self._fused_run.take()
        grouped = fused_runs.group_keys(self.device_limits)
        for plan, inputs, outputs in fused_runs.dispatches(
            calls, grouped.__contains__, self.device_limits
        ):
            self._emit("fused", plan, inputs, outputs)
        for call in calls:
            self._release_all((*call.inputs, call.result))

    def _alias(
        self, source: GpuHandle, shape: tuple[int, ...], strides: tuple[int, ...] | None
    ) -> GpuHandle:
        """Another tensor on `source`'s buffer (a reshape, or an expand as a broadcast view)."""
        if strides is not None:
            self._check_fits(shape)  # whatever reads it densely must be able to hold it
        self.pool.retain(source.id)
        return GpuHandle(source.id, source.nbytes, shape, source.dtype, strides)

    def _materialize(self, view: GpuHandle, shape: tuple[int, ...] | None = None) -> GpuHandle:
        """A dense copy of a broadcast view (reshaped to `shape` when given): one strided gather."""
        assert view.strides is not None
        self._dispatch_held()  # the view may be of a held call's output
        self._dispatch_lazy([view])
        plan = views.materialize_plan(view.dtype, view.shape, view.strides, self.device_limits)
        result = self._allocate(view.shape, view.dtype)
        self._emit("expand", plan, [view], [result])
        if shape is None:
            return result
        return GpuHandle(result.id, result.nbytes, shape, result.dtype)

    def _emit(self, op: str, plan: Any, inputs: list[GpuHandle], outputs: list[GpuHandle]) -> None:
        """Appends the plan's dispatches, with its scratch buffers, to the open command list."""
        scratch = [self.pool.acquire(n) for n in plan.scratch_bytes]
        for buffer_id, fresh in scratch:
            if fresh:
                self.commands.create(buffer_id, self.pool.capacity[buffer_id])

        def bind(ref: BufferRef) -> tuple[int, int]:
            if ref.role == "input":
                handle: GpuHandle = inputs[ref.index]
                return handle.id, handle.nbytes
            if ref.role == "output":
                return outputs[ref.index].id, outputs[ref.index].nbytes
            return scratch[ref.index][0], plan.scratch_bytes[ref.index]

        for dispatch in plan.dispatches:
            bindings = [bind(ref) for ref in dispatch.bindings]
            pipeline_id = self._pipeline_id(dispatch.key, dispatch.wgsl)
            if pipeline_id not in self._ready:
                self._unready.add(pipeline_id)
            record = dispatch_record(
                pipeline_id | self._label_id(op) << commands.LABEL_SHIFT,
                self._params_id(dispatch.params),
                dispatch.workgroups,
                bindings,
            )
            self.commands.dispatch(record)
            if self._recording is not None:
                self._recording.words += record
                for buffer_id, _ in bindings:
                    self._retain_for_recording(buffer_id)
        for buffer_id, _ in scratch:
            self.pool.release(buffer_id, self.submitted + 1)

    # ---- submission ----

    def flush(self) -> None:
        """Sends the open command list: one JS call, one command encoder, one submit. While an
        earlier list is still going out in parts (flush_async) it does nothing: bridge.js would
        encode this one ahead of that one's rest, so the open list waits for the next flush_async."""
        self._dispatch_held()
        if not len(self.commands) or self._in_flight is not None:
            return
        words, blob, profiling = self._take_commands()
        self._sent(self.engine.flush(words, blob, profiling))

    async def flush_async(self) -> None:
        """flush(), submitting in parts while pipelines it uses are still compiling (only those:
        the warm-up may still be compiling others): each part once its kernels compiled.

        Lists reach the GPU in the order Python wrote them: this first waits for a list another
        task is sending in parts, so a read (download) or fence after it never overtakes the
        CREATE, WRITE and dispatches still waiting in that list (asyncio.gather of downloads
        read buffers bridge.js had not created yet: "copyBufferToBuffer parameter 1 is not of
        type GPUBuffer")."""
        self._dispatch_held()
        while self._in_flight is not None:
            await asyncio.shield(self._in_flight)
        if not self._unready or not len(self.commands):
            self.flush()
            return
        words, blob, profiling = self._take_commands()
        unready, self._unready = self._unready, set()  # what the next list uses is its own
        in_flight = self._in_flight = asyncio.get_running_loop().create_future()
        try:
            self._sent(await self.engine.flushWhenCompiled(words, blob, profiling))
            self._ready |= unready
        finally:
            self._in_flight = None
            in_flight.set_result(None)

    def _take_commands(self) -> tuple[Any, Any, bool]:
        """The open command list's words and blob, counted as one JS call, and whether to time it.
        The list takes its serial now: what is freed while it goes out belongs to the next one."""
        words, blob = self.commands.take()
        self.js_calls += 1
        self.words_sent += len(words)
        self.submitted += 1
        return words, blob, self.profile_log is not None

    def _sent(self, completed: Any) -> None:
        """After a command list went out (one serial, however many submits): what bridge.js
        reports completed frees buffers."""
        self.completed = int(completed)
        self._reclaim()
        while self._drops and self._drops[0][0] <= self.submitted:
            self.js_calls += 1
            self.engine.dropRecording(self._drops.pop(0)[1])

    def _reclaim(self) -> None:
        """Frees what completed submits released; destroys pool buffers left idle (the commands
        go out with the next flush)."""
        self.pool.reclaim(self.completed)
        for buffer_id in self.pool.trim(POOL_MAX_IDLE_FLUSHES, POOL_FREE_BUDGET):
            self.commands.destroy(buffer_id)

    async def end_step(self) -> None:
        """After each fit step: submit it, and every few steps wait for the GPU to catch up."""
        self.steps += 1
        if self.steps % FENCE_EVERY_STEPS == 0:
            await self.settled()
        else:
            await self.flush_async()

    def profile_details(self) -> dict[str, Any]:
        # With timestamp-query each dispatch runs in a timed pass of its own while profiling.
        return {"timing": "gpu-timestamp-query" if self.timestamps else "host-encode"}

    async def collect_profile(self) -> None:
        await self.flush_async()
        if self.timestamps and self.profile_log is not None:
            self.js_calls += 1
            rows = json.loads(await self.engine.takeProfile())
            for label, ms in rows:
                self.profile_log.setdefault(label, []).append(float(ms))

    # ---- record and replay ----

    def begin_recording(self) -> None:
        self._dispatch_held()  # calls made before belong to no recording, nor do lazy kernels
        self._dispatch_lazy([lazy.output for lazy in list(self._lazy.values())])
        self._recording = RecordingBuilder()

    def abort_recording(self) -> None:
        self._dispatch_held()
        builder, self._recording = self._recording, None
        if builder is not None:
            for buffer_id in builder.retained:
                self._release(buffer_id)

    def finish_recording(
        self,
        inputs: list[GpuHandle],
        state: list[tuple[GpuHandle, GpuHandle]],
        outputs: list[GpuHandle],
    ) -> Recording:
        """Ends the recording window; the step's own commands still go out with the next flush.
        Lazy kernels of its tensors stay out of it, except those of what it gives."""
        self._dispatch_held()
        self._dispatch_lazy([*outputs, *(after for _, after in state)])
        builder, self._recording = self._recording, None
        assert builder is not None, "finish_recording without begin_recording"
        for before, _ in state:
            if before.id not in builder.retained:
                builder.retained.add(before.id)
                self.pool.retain(before.id)
        # Replay writes inputs and copies state into these buffers: each must be its own, dense.
        written = [*inputs, *(before for before, _ in state)]
        replayable = len({h.id for h in written}) == len(written) and all(
            h.strides is None for h in (*written, *outputs, *(after for _, after in state))
        )
        self._recordings += 1
        self.js_calls += 1
        self.engine.record(self._recordings, np.array(builder.words, dtype=np.int32))
        return Recording(
            id=self._recordings,
            inputs=tuple(inputs),
            state_in=tuple(before for before, _ in state),
            outputs=tuple(outputs),
            retained=frozenset(builder.retained),
            # object() equals nothing, so a recording that cannot be replayed is never verified.
            signature=signature(builder, inputs, state, outputs) if replayable else object(),
            dispatches=_count_dispatches(builder.words),
        )

    def replay(
        self, recording: Recording, arrays: list[np.ndarray], state_now: list[GpuHandle]
    ) -> list[GpuHandle]:
        """Runs a recorded step on new input arrays, reading the state from `state_now`; returns
        fresh copies of the recorded outputs. One JS call. The input writes may follow commands
        still in the open list that read the same buffers (the recording's own first run, in a
        predict over several batches): bridge.js submits the work before a write first. Lazy
        kernels go first: the writes may overwrite what they read."""
        self._dispatch_held()
        self._dispatch_lazy([lazy.output for lazy in list(self._lazy.values())])
        for handle, array in zip(recording.inputs, arrays, strict=True):
            data = device_bytes(array)
            if len(data) != handle.nbytes:
                raise ValueError(f"replay: input of {len(data)} bytes, recorded {handle.nbytes}")
            self.commands.write(handle.id, data)
            self.bytes_uploaded += len(data)
        for now, recorded in zip(state_now, recording.state_in, strict=True):
            if now.strides is not None:  # a broadcast view (an input tensor from pib.ones)
                dense = self._materialize(now)
                self.commands.copy(dense.id, recorded.id, recorded.nbytes)
                self.free(dense)
            elif now.id != recorded.id:
                self.commands.copy(now.id, recorded.id, recorded.nbytes)
        self.commands.replay(recording.id)
        self.steps_replayed += 1
        if self.profile_log is not None and not self.timestamps:
            self.profile_log.setdefault("replayed_step", []).append(0.0)
        outputs = []
        for source in recording.outputs:
            target = self._allocate(source.shape, source.dtype)
            self.commands.copy(source.id, target.id, source.nbytes)
            outputs.append(target)
        self.flush()
        return outputs

    def drop_recording(self, recording: Recording) -> None:
        # A REPLAY of it may wait in the open list or in one going out: drop it after that list.
        if len(self.commands) or self._in_flight is not None:
            self._drops.append((self.submitted + (1 if len(self.commands) else 0), recording.id))
        else:
            self.js_calls += 1
            self.engine.dropRecording(recording.id)
        for buffer_id in recording.retained:
            self._release(buffer_id)

    # ---- faults ----

    def is_lost(self) -> bool:
        return self.engine is not None and self.engine.lost is not None

    async def settled(self) -> None:
        """Returns once the work sent so far has run on a device that is still there (fit's steps,
        every few of them): a fence (bridge.js fence: one 4-byte map after a last submit) that
        rejects when the device was destroyed before the queue drained, which device.lost
        reports only later."""
        await self.flush_async()
        self.js_calls += 1
        self.completed = int(await self.engine.fence())
        self._reclaim()

    def lose_device(self, restore: bool, restore_after_s: float) -> None:
        """GPUDevice.destroy(). A destroyed device never comes back: recovery asks for a new
        adapter and device (the old adapter is consumed). With restore=False none comes either:
        the worker's adapter requests go unanswered until this lost backend is detached."""
        self.js_calls += 1
        if not restore:
            self.engine.withholdAdapters()
        self.engine.destroyDevice()

    def lose_device_in_replay(self, after: int, restore: bool, restore_after_s: float) -> None:
        """GPUDevice.destroy() right after the `after`-th dispatch the next replay encodes (a new
        adapter and device come as after lose_device(restore=True))."""
        self.js_calls += 1
        self.engine.destroyDeviceInReplay(after)

    async def recovered(self, timeout_s: float) -> WebGPUBackend | None:
        """A new backend on a fresh adapter and device, or None if none came within timeout_s.
        A start still pending then is not cancelled (its JS promise would settle into a
        cancelled task): a device it gets later is destroyed, its listener released."""
        fresh = WebGPUBackend(self.limits)
        starting = asyncio.ensure_future(fresh.start())
        done, _ = await asyncio.wait([starting], timeout=timeout_s)
        if not done:
            starting.add_done_callback(lambda task: _discard(fresh, task))
            return None
        if starting.exception() is not None:  # no adapter, or a refused device
            fresh.detach()
            return None
        return fresh

    def detach(self) -> None:
        if self.engine is not None and self.engine.releaseAdapters:
            self.engine.releaseAdapters()
        if self._on_lost is not None:
            _js.destroy_proxy(self._on_lost)
            self._on_lost = None


def _discard(backend: WebGPUBackend, start: asyncio.Future[None]) -> None:
    """A backend whose start outlived recovery's timeout: nobody uses it."""
    if start.exception() is None:
        backend.close()
    else:
        backend.detach()


def bridge_protocol() -> str:
    """What bridge.js's createEngine takes: the command stream's layout and the limits to ask
    the adapter for, both from here."""
    return json.dumps({**commands.protocol(), "limits": REQUESTED_LIMITS})


def _count_dispatches(words: list[int]) -> int:
    count, i = 0, 0
    while i < len(words):
        count += 1
        i += commands.DISPATCH_HEADER + 2 * words[i + commands.DISPATCH_BINDINGS]
    return count


def device_bytes(array: np.ndarray) -> memoryview:
    """The bytes a storage buffer holds for `array`: f32, i32, or u32 0/1 for bool."""
    dtype = str(array.dtype)
    if dtype == "float64":
        raise TypeError(
            "webgpu has no float64: create the tensor as float32 (pib.tensor(x, dtype='float32'))"
        )
    if dtype not in _GPU_TYPES:
        raise TypeError(f"webgpu cannot store dtype {dtype}; use one of {list(_GPU_TYPES)}")
    return np.ascontiguousarray(array, dtype=_GPU_TYPES[dtype]).reshape(-1).view(np.uint8).data
