"""The cpu backend's SIMD kernels as numpy-in, numpy-out functions over the wasm module's exports.

The module works on pointers into the memory it runs in. In Pyodide that memory is the one numpy
allocates from, so arrays go in and out without copies (`address` is the array's own address and
`empty` is np.empty); the native tests run the same module under wasmtime with a memory of their
own, and pass an `address` that stages arrays into it. Each function returns None where the
module does not apply (other dtypes, input layouts it does not read, elementwise ops too small to
pay for the call), so the caller keeps its numpy kernel there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from ... import fusion

Export = Callable[..., Any]
Address = Callable[[np.ndarray], int]
Empty = Callable[[tuple[int, ...]], np.ndarray]

# (argument kinds, result kind) of every export: p = pointer, i = int32, f = float32, "" = none.
# ctypes needs them to pass floats and pointers; wasmtime reads them from the module itself.
SIGNATURES: dict[str, tuple[str, str]] = {
    "gemm_work_floats": ("", "i"),
    "gemm": ("iiiipiipiipp", ""),
    "im2col": ("ppp", ""),
    "col2im": ("ppp", ""),
    "max_pool2d": ("ppp", ""),
    "max_pool2d_grad": ("pppp", ""),
    "avg_pool2d": ("ppp", ""),
    "avg_pool2d_grad": ("ppp", ""),
    "fused": ("ipipipppp", ""),
}
Pair = tuple[int, int]

# Opcodes of native/fused.c, in its enum's order; argument sources and input layouts likewise.
FUSED_OPS = (*fusion.UNARY, *fusion.BINARY, *fusion.COMPARE, fusion.SELECT)
ARG_SOURCES = ("input", "step", "const")
INPUT_FULL, INPUT_SCALAR, INPUT_ROWS, INPUT_MASK, INPUT_GATE = range(5)
# Below this many elements a single elementwise op stays with numpy: the module call's fixed
# cost (ctypes and the layout arrays, tens of microseconds) would exceed numpy's whole op.
ELEMENTWISE_MIN_SIZE = 4096


@lru_cache(maxsize=256)
def _encoded(program: fusion.Program) -> tuple[np.ndarray, np.ndarray]:
    """The program as fused.c reads it: 7 int32 per step (opcode, then (source, index) per
    argument, -1 where a step has fewer) and its constants as float32. Cached: optimizer
    programs repeat every step."""
    code = np.full((len(program), 7), -1, dtype=np.int32)  # -1: no argument (fused.c ARG_NONE)
    consts: list[float] = []
    for s, (op, args) in enumerate(program):
        code[s, 0] = FUSED_OPS.index(op)
        for a, (where, value) in enumerate(args):
            if where == "const":
                consts.append(value)
                value = len(consts) - 1
            code[s, 1 + 2 * a : 3 + 2 * a] = (ARG_SOURCES.index(where), value)
    return code, np.array(consts or [0.0], dtype=np.float32)


def _layout(x: np.ndarray, shape: tuple[int, ...]) -> tuple[int, int, np.ndarray] | None:
    """(INPUT_* kind, row length, the array fused.c reads) of one input, None if unsupported.
    Broadcast views are read in place: one value, or one value per row."""
    if x.dtype == np.bool_:
        if x.ndim == 0:
            return INPUT_GATE, 0, x
        return (INPUT_MASK, 0, np.ascontiguousarray(x)) if x.shape == shape else None
    if x.dtype != np.float32 or (x.ndim and x.shape != shape):
        return None
    if x.ndim == 0 or not any(x.strides):
        return INPUT_SCALAR, 0, x
    if x.strides[-1] == 0:
        return INPUT_ROWS, shape[-1], np.ascontiguousarray(x[..., 0])
    return INPUT_FULL, 0, np.ascontiguousarray(x)


class SimdKernels:
    def __init__(self, exports: Mapping[str, Export], address: Address, empty: Empty) -> None:
        self._exports = exports
        self._gemm = exports["gemm"]
        self._address = address
        self._empty = empty
        # Packing scratch for gemm, lent on every call: allocated once, kept for the session.
        self._work = empty((int(exports["gemm_work_floats"]()),))

    def _operand(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        contiguous = np.ascontiguousarray(x)
        return contiguous, self._address(contiguous)

    def _call(self, name: str, *arrays: np.ndarray) -> None:
        self._exports[name](*(self._address(x) for x in arrays))

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

    def _window(
        self,
        shape: tuple[int, ...],
        window: Pair,
        strides: Pair,
        pads: tuple[Pair, Pair],
        out_hw: Pair,
    ) -> np.ndarray:
        """The window_t (native/simd.h) of these windows over an NHWC input of `shape`."""
        (pt, _), (pl, _) = pads
        return np.array([*shape, *window, *strides, pt, pl, *out_hw], dtype=np.int32)

    def im2col(
        self, x: np.ndarray, window: Pair, strides: Pair, pads: tuple[Pair, Pair], out_hw: Pair
    ) -> np.ndarray | None:
        """Rows (N*OH*OW, KH*KW*C) of every (zero-padded) window of x, taps in (i, j, c) order."""
        if x.dtype != np.float32:
            return None
        x, _ = self._operand(x)
        cols = self._empty((x.shape[0] * out_hw[0] * out_hw[1], window[0] * window[1] * x.shape[3]))
        if cols.size:
            self._call("im2col", self._window(x.shape, window, strides, pads, out_hw), x, cols)
        return cols

    def col2im(
        self,
        cols: np.ndarray,
        input_shape: tuple[int, ...],
        window: Pair,
        strides: Pair,
        pads: tuple[Pair, Pair],
        out_hw: Pair,
    ) -> np.ndarray | None:
        """The input-shaped sum of im2col rows added back where they were read (padding dropped)."""
        if cols.dtype != np.float32:
            return None
        cols, _ = self._operand(cols)
        dx = self._empty(tuple(input_shape))
        if dx.size:
            geometry = self._window(dx.shape, window, strides, pads, out_hw)
            self._call("col2im", geometry, cols, dx)
        return dx

    def pool2d(
        self,
        kind: str,
        x: np.ndarray,
        window: Pair,
        strides: Pair,
        pads: tuple[Pair, Pair],
        out_hw: Pair,
    ) -> np.ndarray | None:
        """`kind` "max" or "avg" pooling of NHWC x (TensorFlow's padding rules)."""
        if x.dtype != np.float32:
            return None
        x, _ = self._operand(x)
        out = self._empty((x.shape[0], *out_hw, x.shape[3]))
        if out.size:
            geometry = self._window(x.shape, window, strides, pads, out_hw)
            self._call(f"{kind}_pool2d", geometry, x, out)
        return out

    def max_pool2d_grad(
        self, x: np.ndarray, g: np.ndarray, window: Pair, strides: Pair, pads: tuple[Pair, Pair]
    ) -> np.ndarray | None:
        """Each window's gradient g routed to its first maximum in x."""
        if x.dtype != np.float32 or g.dtype != np.float32:
            return None
        x, _ = self._operand(x)
        g, _ = self._operand(g)
        dx = self._empty(x.shape)
        if dx.size:
            geometry = self._window(x.shape, window, strides, pads, g.shape[1:3])
            self._call("max_pool2d_grad", geometry, x, g, dx)
        return dx

    def avg_pool2d_grad(
        self,
        g: np.ndarray,
        input_shape: tuple[int, ...],
        window: Pair,
        strides: Pair,
        pads: tuple[Pair, Pair],
    ) -> np.ndarray | None:
        """Each window's gradient g shared among its taps on the input."""
        if g.dtype != np.float32:
            return None
        g, _ = self._operand(g)
        dx = self._empty(tuple(input_shape))
        if dx.size:
            geometry = self._window(dx.shape, window, strides, pads, g.shape[1:3])
            self._call("avg_pool2d_grad", geometry, g, dx)
        return dx

    def fused(self, program: fusion.Program, xs: Sequence[np.ndarray]) -> np.ndarray | None:
        """A fused elementwise program (fusion.py) over float32 inputs (and bool masks)."""
        shape = next((x.shape for x in xs if x.ndim), ())
        layouts = [_layout(x, shape) for x in xs]
        if any(layout is None for layout in layouts) or len(program) > fusion.MAX_STEPS:
            return None
        if not any(x.dtype == np.float32 for x in xs) and any(x.dtype != np.bool_ for x in xs):
            return None
        kinds, cols, arrays = zip(
            *(layout for layout in layouts if layout is not None), strict=True
        )
        code, consts = _encoded(program)
        # Every array the module reads is held by a name until the call returns: a temporary
        # could be freed, and its memory reused, between taking its address and the call.
        addresses = np.array([self._address(x) for x in arrays], dtype=np.uint32)
        layout_kinds = np.array(kinds, dtype=np.int32)
        row_lengths = np.array(cols, dtype=np.int32)
        out = self._empty(shape)
        if out.size:
            self._exports["fused"](
                out.size,
                self._address(code),
                len(program),
                self._address(consts),
                len(arrays),
                self._address(addresses),
                self._address(layout_kinds),
                self._address(row_lengths),
                self._address(out),
            )
        return out

    def elementwise(self, op: str, xs: Sequence[np.ndarray]) -> np.ndarray | None:
        """One float op of fusion.UNARY or BINARY as a one-step program, on large operands."""
        if (
            op not in (*fusion.UNARY, *fusion.BINARY)
            or max(x.size for x in xs) < ELEMENTWISE_MIN_SIZE
        ):
            return None
        if any(x.dtype != np.float32 for x in xs):
            return None
        return self.fused(((op, tuple(("input", k) for k in range(len(xs)))),), xs)
