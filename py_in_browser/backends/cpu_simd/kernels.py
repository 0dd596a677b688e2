"""The cpu backend's SIMD kernels as numpy-in, numpy-out functions over the wasm module's exports.

The module works on pointers into the memory it runs in. In Pyodide that memory is the one numpy
allocates from, so arrays go in and out without copies (`address` is the array's own address and
`empty` is np.empty); the native tests run the same module under wasmtime with a memory of their
own, and pass an `address` that stages arrays into it. Each function returns None where the
module does not apply (other dtypes), so the caller keeps its numpy kernel there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

Export = Callable[..., Any]
Address = Callable[[np.ndarray], int]
Empty = Callable[[tuple[int, ...]], np.ndarray]

# (argument kinds, result kind) of every export: p = pointer, i = int32, f = float32, "" = none.
# ctypes needs them to pass floats and pointers; wasmtime reads them from the module itself.
SIGNATURES: dict[str, tuple[str, str]] = {
    "gemm_work_floats": ("", "i"),
    "gemm": ("iiiipiipiipp", ""),
}


class SimdKernels:
    def __init__(self, exports: Mapping[str, Export], address: Address, empty: Empty) -> None:
        self._gemm = exports["gemm"]
        self._address = address
        self._empty = empty
        # Packing scratch for gemm, lent on every call: allocated once, kept for the session.
        self._work = empty((int(exports["gemm_work_floats"]()),))

    def _operand(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        contiguous = np.ascontiguousarray(x)
        return contiguous, self._address(contiguous)

    def gemm(
        self, a: np.ndarray, b: np.ndarray, transpose_a: bool, transpose_b: bool
    ) -> np.ndarray | None:
        """op(a) @ op(b) over equal leading batch dims, op transposing the last two axes."""
        if a.dtype != np.float32 or b.dtype != np.float32:
            return None
        a, a_ptr = self._operand(a)
        b, b_ptr = self._operand(b)
        rows_a, cols_a = a.shape[-2:]
        rows_b, cols_b = b.shape[-2:]
        m, k = (cols_a, rows_a) if transpose_a else (rows_a, cols_a)
        n = rows_b if transpose_b else cols_b
        out = self._empty((*a.shape[:-2], m, n))
        if out.size:
            batch = math.prod(a.shape[:-2])
            self._gemm(
                batch,
                m,
                n,
                k,
                a_ptr,
                rows_a * cols_a,
                int(transpose_a),
                b_ptr,
                rows_b * cols_b,
                int(transpose_b),
                self._address(out),
                self._address(self._work),
            )
        return out
