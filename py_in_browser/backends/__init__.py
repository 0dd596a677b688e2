"""Backend registry: the Backend interface, kernel table keyed by (backend, op), and auto-selection."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from .. import _js

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
    # How float tensors are stored, and the smallest epsilon an optimizer's denominator may use
    # there (optimizers.py raises smaller ones): 0 for float32 storage; float16 storage sets its own.
    storage_format = "float32"
    min_epsilon = 0.0

    def __init__(self, limits: dict[str, Any] | None = None) -> None:
        self.limits = dict(limits or {})
        self.bytes_uploaded = 0  # host -> device traffic, reported by pib.profile
        self.bytes_downloaded = 0
        # Per-kernel wall times while pib.profile runs; None when not profiling.
        self.profile_log: dict[str, list[float]] | None = None

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

    def memory_stats(self) -> dict[str, Any]:
        """Backend-specific additions to pib.memory() (GPU pools, live JS objects)."""
        return {}

    async def end_step(self) -> None:
        """Called by fit after each train step: GPU backends submit and apply back-pressure here."""

    async def collect_profile(self) -> None:
        """Called by pib.profile before it reads profile_log: GPU backends add device timings."""

    def profile_details(self) -> dict[str, Any]:
        """Added to pib.profile's result after collect_profile: at least `timing`, the source of
        the kernel times ("wall": host wall time around each kernel; GPU backends say when their
        times come from GPU queries instead)."""
        return {"timing": "wall"}

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

    async def self_test(self) -> bool:
        """A tiny numeric check that the backend really computes (GPU drivers can lie)."""
        a = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
        ha = self.upload(a)
        hb = self.run(
            "matmul",
            [ha, ha],
            {"transpose_a": False, "transpose_b": False},
            OutSpec((2, 2), "float32", ((2, 2), (2, 2)), ("float32", "float32")),
        )
        got = await self.download(hb)
        self.free(ha)
        self.free(hb)
        return bool(np.allclose(got, a @ a))


@dataclass(frozen=True)
class BackendEntry:
    """A registered backend: a factory and its preference (higher is tried first by auto)."""

    name: str
    factory: Callable[[dict[str, Any] | None], Backend]
    priority: int
    available: Callable[[], bool]


BACKENDS: dict[str, BackendEntry] = {}


def register_backend(
    name: str,
    factory: Callable[[dict[str, Any] | None], Backend],
    priority: int,
    available: Callable[[], bool] = lambda: True,
) -> None:
    BACKENDS[name] = BackendEntry(name, factory, priority, available)


def registered_backends() -> list[str]:
    """All registered backend names, most preferred first."""
    return [e.name for e in sorted(BACKENDS.values(), key=lambda e: -e.priority)]
