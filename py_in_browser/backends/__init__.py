"""Backend registry: the Backend interface, kernel table keyed by (backend, op), and the numeric
self-test and probe step init measures every backend with (selection.py ranks them)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np

from .. import _js, fusion

# What a backend does for one primitive. cpu registers kernels that compute it: (inputs,
# attrs) -> array. The GPU backends register planners that say how to compute it: webgl2
# (op, attrs, out) -> (program key, uniforms), webgpu (op, attrs, out, limits) -> KernelPlan.
Kernel = Callable[..., Any]
KernelT = TypeVar("KernelT", bound=Kernel)

# (backend name, primitive op name) -> kernel: the one table every backend registers into (at
# import time, through register_kernel) and looks its kernels up in.
KERNELS: dict[tuple[str, str], Kernel] = {}


def register_kernel(backend: str, op: str) -> Callable[[KernelT], KernelT]:
    """Decorator registering `fn` as the kernel of primitive `op` on `backend`."""

    def decorate(fn: KernelT) -> KernelT:
        KERNELS[(backend, op)] = fn
        return fn

    return decorate


def kernel_for(backend: str, op: str) -> Kernel:
    """The kernel `backend` registered for primitive `op`."""
    kernel = KERNELS.get((backend, op))
    if kernel is None:
        raise NotImplementedError(f"backend {backend!r} has no kernel for primitive {op!r}")
    return kernel


def kernels_of(backend: str) -> set[str]:
    """Names of the primitives that `backend` registered kernels for."""
    return {op for (name, op) in KERNELS if name == backend}


@dataclass(frozen=True)
class OutSpec:
    """Shapes and dtypes around one op call: its result's and its inputs' (handles are opaque)."""

    shape: tuple[int, ...]
    dtype: str
    in_shapes: tuple[tuple[int, ...], ...]
    in_dtypes: tuple[str, ...]


class Backend:
    """What every backend provides; tensors hold an opaque handle that only their backend reads."""

    name = "abstract"
    # Backends that can record fit's train step once and replay it without Python per op set this
    # and implement begin_recording ... drop_recording (the protocol replay.py drives).
    supports_replay = False
    # Backends whose replays pay off for predict's forward passes too (forward_replay.py): the
    # cpu backend, webgl2 and webgpu, where a replay is one call instead of Python per op.
    replays_inference = False
    # How float tensors are stored, and the smallest epsilon an optimizer's denominator may use
    # there (optimizers.py raises smaller ones): 0 for float32 storage; float16 storage sets its own.
    storage_format = "float32"
    min_epsilon = 0.0
    # A hint set while predict's forward pass runs: no gradient will read the intermediates, so
    # a backend may fuse ops whose unfused results it would otherwise also have to keep (webgl2
    # pools inside its convolution kernel). Results stay correct either way.
    forward_only = False
    # Set once a backend whose device was lost has been replaced (resilience.py): its tensors'
    # data is gone, and using one raises tensor.LostTensorError instead of failing in the driver.
    retired = False

    def __init__(self, limits: dict[str, Any] | None = None) -> None:
        self.limits = dict(limits or {})
        self.bytes_uploaded = 0  # host -> device traffic, reported by pib.profile
        self.bytes_downloaded = 0
        # Per-kernel wall times while pib.profile runs; None when not profiling.
        self.profile_log: dict[str, list[float]] | None = None
        self._background: asyncio.TimerHandle | None = None  # see schedule_background

    async def start(self) -> None:
        """Acquires what the backend needs before its self-test (a GPU device, a GL context)."""

    def upload(self, array: np.ndarray) -> Any:
        raise NotImplementedError

    async def download(self, handle: Any) -> np.ndarray:
        raise NotImplementedError

    def free(self, handle: Any) -> None:
        raise NotImplementedError

    async def upload_image(self, bitmap: Any) -> Any:
        """An ImageBitmap (in the browser) as the handle of a (1, H, W, 3) float32 tensor of its
        RGB bytes / 255; the bitmap is closed. This default reads the pixels in JS (an
        OffscreenCanvas's getImageData) and uploads them; the GPU backends put the bitmap on
        the device without passing its pixels through Python."""
        rgba = _js.image_bitmap_rgba(bitmap)
        return self.upload(rgba[None, :, :, :3] / np.float32(255.0))

    def run(self, op: str, inputs: list[Any], attrs: dict[str, Any], out: OutSpec) -> Any:
        """Runs the kernel of primitive `op`; the op table has already checked shapes and dtypes
        and says in `out` what the result will be (GPU backends size its buffer from it)."""
        kernel = kernel_for(self.name, op)
        if self.profile_log is None:
            return kernel(inputs, attrs)
        start = time.perf_counter()
        out = kernel(inputs, attrs)
        self.profile_log.setdefault(op, []).append((time.perf_counter() - start) * 1000.0)
        return out

    def capabilities(self) -> dict[str, Any]:
        return {"backend": self.name, "limits": dict(self.limits)}

    def tensor_fits(self, shape: tuple[int, ...]) -> str | None:
        """None when a float32 tensor of `shape` can be allocated in one piece here, else why not,
        naming the limit. Every backend honours limits={"max_allocation_bytes": n}; the GPU backends
        add their device limits (texture side, storage binding size)."""
        limit = self.limits.get("max_allocation_bytes")
        nbytes = 4 * math.prod(shape)
        if limit is not None and nbytes > int(limit):
            return (
                f"{self.name}: a tensor of shape {shape} needs {nbytes} bytes, over this "
                f"backend's max_allocation_bytes ({int(limit)})"
            )
        return None

    def memory_stats(self) -> dict[str, Any]:
        """Backend-specific additions to pib.memory(): at least gpu_bytes (GPU memory held,
        pools included; 0 without a GPU), then pool sizes and live JS objects."""
        return {"gpu_bytes": 0}

    async def end_step(self) -> None:
        """Called by fit after each train step: GPU backends submit and apply back-pressure here."""

    async def collect_profile(self) -> None:
        """Called by pib.profile before it reads profile_log: GPU backends add device timings."""

    def profile_details(self) -> dict[str, Any]:
        """Added to pib.profile's result after collect_profile: at least `timing`, the source of
        the kernel times ("wall": host wall time around each kernel; GPU backends say when their
        times come from GPU queries instead)."""
        return {"timing": "wall"}

    # ---- device loss (GPU backends; recovery.py drives this protocol) ----

    def is_lost(self) -> bool:
        """Whether the device under this backend is gone (a lost WebGL context, a lost GPUDevice)."""
        return False

    def lose_device(self, restore: bool, restore_after_s: float) -> None:
        """Injects a real loss of this backend's device (pib.debug.lose_device); with restore,
        the browser gives it back after restore_after_s where the backend can ask for that."""
        raise RuntimeError(f"backend {self.name!r} has no device to lose")

    def lose_device_in_replay(self, after: int, restore: bool, restore_after_s: float) -> None:
        """Arms lose_device to happen right after the `after`-th command of the next replayed
        step, inside the one JS call that replays it (pib.debug.lose_device(in_replay=...))."""
        raise RuntimeError(f"backend {self.name!r} has no device to lose")

    async def recovered(self, timeout_s: float) -> Backend | None:
        """After a loss: a new backend of this kind started on the device the browser gave back
        (a restored context, a fresh adapter and device), or None if none came within timeout_s."""
        return None

    def detach(self) -> None:
        """Releases the JS objects this backend holds (its listeners' proxies) once it is lost."""

    # ---- step recording (only where supports_replay) ----

    def begin_recording(self) -> None:
        """Starts capturing every op and upload until finish_recording or abort_recording."""
        raise NotImplementedError

    def abort_recording(self) -> None:
        raise NotImplementedError

    def finish_recording(
        self, inputs: list[Any], state: list[tuple[Any, Any]], outputs: list[Any]
    ) -> Any:
        """A replayable recording of the captured ops: `inputs` are rewritten on each replay,
        `state` pairs each variable's handle before and after the step, `outputs` are copied out.
        Its `signature` is equal for two recordings that compute the same function."""
        raise NotImplementedError

    def replay(self, recording: Any, arrays: list[np.ndarray], state_now: list[Any]) -> list[Any]:
        """Runs the recording on new input arrays from the current state handles; returns new
        handles holding the outputs. Afterwards the state lives in the recorded `state` outputs."""
        raise NotImplementedError

    def drop_recording(self, recording: Any) -> None:
        raise NotImplementedError

    async def self_test(self) -> SelfTestResult:
        """Runs ProbeStep once and compares every checked result with numpy (GPU drivers can lie).

        Test hook: limits={"fail_self_test": [names]} adds 1.0 to the results this backend
        downloads here, so its real comparison fails (tests use it to make init fall back).
        """
        probe = ProbeStep()
        start = time.perf_counter()
        handles = probe.run(self, steps=1)
        got = {}
        for name, handle in handles.items():
            got[name] = await self.download(handle)
            self.free(handle)
        ms = (time.perf_counter() - start) * 1000.0
        if self.name in self.limits.get("fail_self_test", ()):
            got = {name: values + 1.0 for name, values in got.items()}
        tolerance = SELF_TEST_TOLERANCE[self.storage_format]
        worst, detail = 0.0, ""
        for name, want in probe.oracle().items():
            error = float(np.max(np.abs(got[name] - want)) / max(1.0, float(np.max(np.abs(want)))))
            if not error <= tolerance:  # also catches NaN
                detail = detail or f"{name} is off by {error:.3g} (tolerance {tolerance:g})"
            worst = math.inf if math.isnan(error) else max(worst, error)
        return SelfTestResult(not detail, detail, worst, ms)

    async def prepare(self, after_loss: bool = False) -> None:
        """Work worth doing only for the backend init keeps, before init returns. Work that can
        wait (compiling kernels ahead of the first step) goes in background() instead.

        `after_loss`: this backend replaces one whose device was lost, and the call that noticed
        the loss runs next: GPU backends then compile nothing ahead at once, only while idle (the
        first step's kernels, sent at once, went to the GPU process before that call's own: on
        SwiftShader a predict after a loss took 1.1 s on webgl2, 0.2-0.3 s without them)."""

    def schedule_background(self) -> None:
        """For prepare to call: background() runs once, when start_background is called (the
        engine's worker does, once it has posted ready: the work does not delay it) or else
        BACKGROUND_AFTER_S after prepare (init called by page code, a recovery)."""
        loop = asyncio.get_running_loop()
        self._background = loop.call_later(BACKGROUND_AFTER_S, self.start_background)

    def start_background(self) -> None:
        """Runs background() now unless it ran already or nothing was scheduled."""
        handle, self._background = self._background, None
        if handle is not None:
            handle.cancel()
            self.background()

    def background(self) -> None:
        """Work prepare scheduled for after init: GPU backends compile kernels ahead of the
        first step here."""

    def close(self) -> None:
        """Releases the device or context of a backend init started but did not keep; unusable
        afterwards. Only for backends that hold no tensors."""

    def software_renderer(self) -> str | None:
        """The name of the software renderer this backend runs on (a GPU emulated on the CPU),
        or None for real GPU hardware and for the cpu backend."""
        return None


# Seconds after prepare a backend starts its background work when nobody asked it to sooner.
BACKGROUND_AFTER_S = 0.05

# ---- the numeric self-test and the timed step init ranks backends by ---------------------------

# Largest relative error (over max(1, |expected|)) the self-test accepts, per float storage.
SELF_TEST_TOLERANCE = {"float32": 1e-4, "float16": 4e-3}


@dataclass(frozen=True)
class SelfTestResult:
    """One self-test: passed, what failed first ("" when passed), the worst relative error, ms."""

    passed: bool
    detail: str
    max_error: float
    ms: float


def _f32(shape: tuple[int, ...], *inputs: tuple[int, ...]) -> OutSpec:
    return OutSpec(shape, "float32", inputs, ("float32",) * len(inputs))


class ProbeStep:
    """A small training step in primitives (the backends know nothing of layers): a padded 3x3
    convolution, a dense layer with relu, a column sum, the weight gradient and an SGD-momentum
    update (one fused program, as the optimizers run theirs). The self-test checks the
    convolution, the reduction and the updated weights against numpy; init times a few chained
    steps to rank the backends that pass. Six kernels: on a software GPU compiling them is most
    of the self-test's time."""

    CONV: ClassVar[dict[str, Any]] = {"strides": (1, 1), "pads": ((1, 1), (1, 1))}
    PLAIN: ClassVar[dict[str, Any]] = {"transpose_a": False, "transpose_b": False}
    # New weights from (weights, velocity, gradient): w + (0.9 v - 0.05 g).
    UPDATE: ClassVar[dict[str, Any]] = {
        "program": fusion.trace(lambda w, v, g: w + (v * 0.9 - g * 0.05), 3)
    }

    def __init__(self) -> None:
        rng = np.random.default_rng(7)
        self.x = rng.uniform(-1, 1, (4, 6, 6, 3)).astype(np.float32)
        self.k = rng.uniform(-1, 1, (3, 3, 3, 4)).astype(np.float32)
        self.a = rng.uniform(-1, 1, (19, 24)).astype(np.float32)
        self.w = rng.uniform(-1, 1, (24, 16)).astype(np.float32)
        self.v = rng.uniform(-1, 1, (24, 16)).astype(np.float32)

    def oracle(self) -> dict[str, np.ndarray]:
        """What one step computes, in float64 numpy."""
        x, k = np.pad(self.x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0))), self.k
        conv = sum(
            np.einsum("nhwc,co->nhwo", x[:, i : i + 6, j : j + 6, :], k[i, j])
            for i in range(3)
            for j in range(3)
        )
        a, w = self.a.astype(np.float64), self.w.astype(np.float64)
        h = np.maximum(a @ w, 0.0)
        velocity = 0.9 * self.v - 0.05 * (a.T @ h)
        return {"conv2d": conv, "reduce_sum": h.sum(axis=0), "sgd_momentum": w + velocity}

    def run(self, backend: Backend, steps: int) -> dict[str, Any]:
        """Queues `steps` chained steps (each updates the weights the next one reads); returns
        handles of the last step's checked results (the caller downloads and frees them)."""
        up = backend.upload
        x, k, a, w, v = up(self.x), up(self.k), up(self.a), up(self.w), up(self.v)
        conv = summed = None
        wide, square = (24, 16), (19, 16)
        for step in range(steps):
            if step:
                backend.free(conv)
                backend.free(summed)
            conv = backend.run(
                "conv2d", [x, k], self.CONV, _f32((4, 6, 6, 4), self.x.shape, self.k.shape)
            )
            pre = backend.run("matmul", [a, w], self.PLAIN, _f32(square, (19, 24), wide))
            h = backend.run("relu", [pre], {}, _f32(square, square))
            summed = backend.run(
                "reduce_sum", [h], {"axes": (0,), "keepdims": False}, _f32((16,), square)
            )
            grad = backend.run(
                "matmul",
                [a, h],
                {"transpose_a": True, "transpose_b": False},
                _f32(wide, (19, 24), square),
            )
            new_w = backend.run("fused", [w, v, grad], self.UPDATE, _f32(wide, wide, wide, wide))
            for handle in (pre, h, grad, w):
                backend.free(handle)
            w = new_w
        for handle in (x, k, a, v):
            backend.free(handle)
        return {"conv2d": conv, "reduce_sum": summed, "sgd_momentum": w}


@dataclass(frozen=True)
class BackendEntry:
    """A registered backend: a factory and its preference (higher is tried first by auto);
    why_unavailable says why available() is False here (selection reports it)."""

    name: str
    factory: Callable[[dict[str, Any] | None], Backend]
    priority: int
    available: Callable[[], bool]
    why_unavailable: Callable[[], str]


BACKENDS: dict[str, BackendEntry] = {}


def register_backend(
    name: str,
    factory: Callable[[dict[str, Any] | None], Backend],
    priority: int,
    available: Callable[[], bool] = lambda: True,
    why_unavailable: Callable[[], str] = lambda: "not available here",
) -> None:
    BACKENDS[name] = BackendEntry(name, factory, priority, available, why_unavailable)


def registered_backends() -> list[str]:
    """All registered backend names, most preferred first."""
    return [e.name for e in sorted(BACKENDS.values(), key=lambda e: -e.priority)]
