"""Backend registry: the Backend interface, kernel table keyed by (backend, op), and auto-selection."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

Kernel = Callable[[list[Any], dict[str, Any]], Any]

# (backend name, primitive op name) -> kernel. Backends fill it at import time.
KERNELS: dict[tuple[str, str], Kernel] = {}


def register_kernel(backend: str, op: str) -> Callable[[Kernel], Kernel]:
    """Decorator registering `fn` as the kernel of primitive `op` on `backend`."""

    def decorate(fn: Kernel) -> Kernel:
        KERNELS[(backend, op)] = fn
        return fn

    return decorate


def kernels_of(backend: str) -> set[str]:
    """Names of the primitives that `backend` has kernels for."""
    return {op for (name, op) in KERNELS if name == backend}


def missing_primitives(backend: str) -> set[str]:
    """Primitives of the op table that `backend` has no kernel for (must be empty)."""
    from ..ops import OPS

    return set(OPS) - kernels_of(backend)


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

    def __init__(self, limits: dict[str, Any] | None = None) -> None:
        self.limits = dict(limits or {})
        self.live_bytes = 0
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

    def run(self, op: str, inputs: list[Any], attrs: dict[str, Any], out: OutSpec) -> Any:
        """Runs the kernel of primitive `op`; the op table has already checked shapes and dtypes
        and says in `out` what the result will be (GPU backends size its buffer from it)."""
        kernel = KERNELS.get((self.name, op))
        if kernel is None:
            raise NotImplementedError(f"backend {self.name!r} has no kernel for primitive {op!r}")
        if self.profile_log is None:
            return kernel(inputs, attrs)
        start = time.perf_counter()
        out = kernel(inputs, attrs)
        self.profile_log.setdefault(op, []).append((time.perf_counter() - start) * 1000.0)
        return out

    def capabilities(self) -> dict[str, Any]:
        return {"backend": self.name, "limits": dict(self.limits)}

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
