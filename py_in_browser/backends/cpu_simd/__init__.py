"""WebAssembly SIMD kernels for the cpu backend (C sources in native/, built at set-up).

`SIMD` is the loaded module's kernels, or None where it is absent (CPython, or a wheel built
without a toolchain) or failed to load; the cpu backend then keeps its numpy kernels.
"""

from __future__ import annotations

from .kernels import SimdKernels
from .loader import load

SIMD: SimdKernels | None = load()

__all__ = ["SIMD", "SimdKernels"]
