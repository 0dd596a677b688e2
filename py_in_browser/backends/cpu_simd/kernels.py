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
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from ... import fusion

Export = Callable[..., Any]
Address = Callable[[np.ndarray], int]
Empty = Callable[[tuple[int, ...], np.dtype[Any]], np.ndarray]

# (argument kinds, result kind) of every export: i = int32, "" = none, and pointers to data
# read (p), written (o), to metadata made from shapes and attributes (m), or to an array of
# data pointers (a: fused's inputs). ctypes needs them to pass pointers; a recording (recording.py)
# needs to know what each call reads and writes; wasmtime reads types from the module itself.
SIGNATURES: dict[str, tuple[str, str]] = {
    "gemm_work_floats": ("", "i"),
    "gemm": ("iiiipiipiioo", ""),
    "im2col": ("mpo", ""),
    "col2im": ("mpo", ""),
    "max_pool2d": ("mpo", ""),
    "max_pool2d_grad": ("mppo", ""),
    "avg_pool2d": ("mpo", ""),
    "avg_pool2d_grad": ("mpo", ""),
    "fused": ("imimiammo", ""),
    "copy": ("poi", ""),
    "copy_strided": ("miipo", ""),
    "sum_rows": ("iipo", ""),
    "max_rows": ("iipo", ""),
    "compare": ("iiipipio", ""),
    "select": ("iipipipio", ""),
    "replay": ("mimi", ""),
    "gemm_epilogue": ("iiiipiipiipioo", ""),
    "depthwise_conv2d": ("mippo", ""),
    "gemm_residual": ("iiiipiipiippoo", ""),
    "depthwise_epilogue": ("mipppio", ""),
}
# The calls a recorded step may contain, in the order of native/replay.c's CALL_* ids.
REPLAYED = (
    "gemm",
    "im2col",
    "col2im",
    "max_pool2d",
    "max_pool2d_grad",
    "avg_pool2d",
    "avg_pool2d_grad",
    "fused",
    "copy",
    "copy_strided",
    "sum_rows",
    "max_rows",
    "compare",
    "select",
    "gemm_epilogue",
    "depthwise_conv2d",
    "gemm_residual",
    "depthwise_epilogue",
)
Pair = tuple[int, int]


Region = tuple[int, int]  # [first, last + 1) bytes in the module's memory
MR = 4  # native/gemm.c's rows per micro-kernel panel


class Helpers(Protocol):
    """Other threads that compute rows of a large product (threads.RowHelpers, in a browser)."""

    count: int  # how many

    def own_rows(self, m: int, n: int, k: int) -> int | None: ...

    def begin(
        self, a: int, b: int, m: int, n: int, k: int, transposed_b: bool, own: int
    ) -> bool: ...

    def finish(self, c: int, m: int, n: int, k: int) -> list[tuple[int, int]]: ...


@dataclass
class Call:
    """One call of an export, as a recording (recording.py) keeps it."""

    name: str
    args: tuple[Any, ...]  # as SimdKernels passed them: ints, arrays, lists of arrays
    values: list[int]  # the int32 values and addresses the export received
    tables: list[np.ndarray]  # the pointer tables made for the call (their addresses are values)


class CallSink(Protocol):
    """What sees every call while a step is recorded (recording.CallLog)."""

    def call(
        self, name: str, args: tuple[Any, ...], values: list[int], tables: list[np.ndarray]
    ) -> None: ...


# Opcodes of native/fused.c, in its enum's order; argument sources and input layouts likewise.
FUSED_OPS = (*fusion.UNARY, *fusion.BINARY, *fusion.COMPARE, fusion.SELECT)
ARG_SOURCES = ("input", "step", "const")
INPUT_FULL, INPUT_SCALAR, INPUT_ROWS, INPUT_MASK, INPUT_GATE, INPUT_COLS = range(6)
# Below this many elements a single elementwise op stays with numpy: the module call's fixed
# cost (ctypes and the layout arrays, tens of microseconds) would exceed numpy's whole op. Only
# ops whose every result is exactly rounded qualify (the same bits either way); the others
# (exp, log, ...) always run here, so their result never depends on the tensor's size and an
# eager step gives the bits its recording (which runs everything here) replays. Except pow: its
# exp(y log|x|) drifts past 1e-6 of numpy's for exponents near 100, so a small one stays with
# numpy even while recording (such a step is then not replayed).
ELEMENTWISE_MIN_SIZE = 4096
EXACT = ("neg", "sqrt", "relu", "add", "sub", "mul", "div", "maximum")
NUMPY_WHEN_SMALL = "pow"
COMPARE_DTYPES = ("float32", "int32")  # native/data.c's DTYPE_* order


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
    Broadcast views are read in place: one value, one value per row, or one row for all (a
    bias); other views are made dense by the caller."""
    if x.dtype == np.bool_:
        if x.ndim == 0:
            return INPUT_GATE, 0, x
        return (INPUT_MASK, 0, x) if x.shape == shape else None
    if x.dtype != np.float32 or (x.ndim and x.shape != shape):
        return None
    if x.ndim == 0 or not any(x.strides):
        return INPUT_SCALAR, 0, x
    if x.strides[-1] == 0:
        return INPUT_ROWS, shape[-1], x[..., 0]
    if x.strides[-1] == x.itemsize and not any(x.strides[:-1]):
        return INPUT_COLS, shape[-1], x[(0,) * (x.ndim - 1)]
    return INPUT_FULL, 0, x


def _is_scalar(x: np.ndarray) -> bool:
    """One value, whatever the shape (a 0-d array or a view broadcasting one element)."""
    return x.ndim == 0 or not any(x.strides)


class SimdKernels:
    def __init__(self, exports: Mapping[str, Export], address: Address, empty: Empty) -> None:
        self._exports = exports
        self._address = address
        self._empty = empty
        # Set by a recording (recording.py) while a step runs eagerly: it sees every call, and
        # every op runs here whatever its size, as the step's replays will.
        self.log: CallSink | None = None
        # Helper threads for large eager products, once threads.py started them.
        self.helpers: Helpers | None = None
        # Packing scratch for gemm, lent on every call: allocated once, kept for the session.
        self._work = empty((int(exports["gemm_work_floats"]()),), np.dtype(np.float32))

    def address(self, array: np.ndarray) -> int:
        """Where `array`'s first element is in the module's memory."""
        return self._address(array)

    def empty(self, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
        """A new array in the module's memory."""
        return self._empty(tuple(shape), np.dtype(dtype))

    def _run(self, name: str, *args: Any) -> None:
        """Calls export `name` with ints and arrays (passed as addresses; a list of arrays as
        the address of an array of their addresses); a recording logs the call."""
        values: list[int] = []
        keep: list[np.ndarray] = []  # alive until the call returns: memory is not reused
        for arg in args:
            if isinstance(arg, list):
                table = np.array([self._address(x) for x in arg], dtype=np.uint32)
                keep.append(table)
                values.append(self._address(table))
            elif isinstance(arg, np.ndarray):
                values.append(self._address(arg))
            else:
                values.append(int(arg))
        if self.log is not None:
            self.log.call(name, args, values, keep)
        self._exports[name](*values)

    def replay(self, copies: np.ndarray, words: np.ndarray) -> None:
        """Copies (source, destination, bytes) uint32 triples, then runs recorded calls."""
        self._run("replay", copies, len(copies) // 3, words, len(words))

    def contiguous(self, x: np.ndarray) -> np.ndarray:
        """x itself when it is dense, else a dense copy made by the module."""
        if x.flags.c_contiguous:
            return x
        out = self.empty(x.shape, x.dtype)
        if out.size:
            geometry = np.array([*x.shape, *x.strides], dtype=np.int32)
            self._run("copy_strided", geometry, x.ndim, x.dtype.itemsize, x, out)
        return out

    def gemm(
        self, a: np.ndarray, b: np.ndarray, transpose_a: bool, transpose_b: bool
    ) -> np.ndarray | None:
        """op(a) @ op(b) over equal leading batch dims, op transposing the last two axes."""
        if a.dtype != np.float32 or b.dtype != np.float32:
            return None
        a, b = self.contiguous(a), self.contiguous(b)
        rows_a, cols_a = a.shape[-2:]
        rows_b, cols_b = b.shape[-2:]
        m, k = (cols_a, rows_a) if transpose_a else (rows_a, cols_a)
        n = rows_b if transpose_b else cols_b
        out = self.empty((*a.shape[:-2], m, n))
        if out.size and not self._gemm_with_helpers(a, b, transpose_a, transpose_b, out):
            batch = math.prod(a.shape[:-2])
            self._run(
                "gemm",
                batch,
                m,
                n,
                k,
                a,
                rows_a * cols_a,
                int(transpose_a),
                b,
                rows_b * cols_b,
                int(transpose_b),
                out,
                self._work,
            )
        return out

    def _gemm_with_helpers(
        self, a: np.ndarray, b: np.ndarray, transpose_a: bool, transpose_b: bool, out: np.ndarray
    ) -> bool:
        """One product of an untransposed A split by rows of C with the helper threads, outside
        recordings (a replay runs in the module alone); False where it was not split."""
        helpers = self.helpers
        if helpers is None or self.log is not None or transpose_a or a.ndim != 2:
            return False
        (m, k), n = a.shape, out.shape[1]
        own = helpers.own_rows(m, n, k)
        if own is None:
            return False
        if not helpers.begin(self._address(a), self._address(b), m, n, k, transpose_b, own):
            return False
        self._gemm_rows(a, b, transpose_b, out, 0, own)
        for first, count in helpers.finish(self._address(out), m, n, k):
            self._gemm_rows(a, b, transpose_b, out, first, count)
        return True

    def _gemm_rows(
        self,
        a: np.ndarray,
        b: np.ndarray,
        transpose_b: bool,
        out: np.ndarray,
        first: int,
        count: int,
    ) -> None:
        """Rows [first, first + count) of out = a @ op(b), in this thread."""
        k, n = a.shape[1], out.shape[1]
        rows = slice(first, first + count)
        self._run(
            "gemm", 1, count, n, k, a[rows], 0, 0, b, 0, int(transpose_b), out[rows], self._work
        )

    def fuses_multiply_adds(self) -> bool:
        """Whether the products run as fused multiply-adds (the relaxed build, where the browser
        has relaxed SIMD): a sum of two products whose second only a fused multiply-add keeps,
        -(1 + 2^-11) + (1 + 2^-12)^2 = 2^-24 (rounding the square first gives 0)."""
        a = self.empty((1, 2))
        b = self.empty((2, 4))  # a whole vector of columns: the SIMD lanes, not a scalar tail
        a[0] = [1.0, 1.0 + 2.0**-12]
        b[0], b[1] = -(1.0 + 2.0**-11), 1.0 + 2.0**-12
        # Not a call of the step being recorded, if one is (an await of it may run this).
        log, self.log = self.log, None
        try:
            product = self.gemm(a, b, False, False)
        finally:
            self.log = log
        return product is not None and float(product[0, 0]) != 0.0

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
        x = self.contiguous(x)
        cols = self.empty((x.shape[0] * out_hw[0] * out_hw[1], window[0] * window[1] * x.shape[3]))
        if cols.size:
            self._run("im2col", self._window(x.shape, window, strides, pads, out_hw), x, cols)
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
        cols = self.contiguous(cols)
        dx = self.empty(tuple(input_shape))
        if dx.size:
            geometry = self._window(dx.shape, window, strides, pads, out_hw)
            self._run("col2im", geometry, cols, dx)
        return dx

    def depthwise_conv2d(
        self, x: np.ndarray, w: np.ndarray, strides: Pair, pads: tuple[Pair, Pair]
    ) -> np.ndarray | None:
        """Depthwise convolution of NHWC x by HWCM filters w (ops.py's rule)."""
        if x.dtype != np.float32 or w.dtype != np.float32:
            return None
        x, w = self.contiguous(x), self.contiguous(w)
        kh, kw, c, m = w.shape
        (pt, pb), (pl, pr) = pads
        out_hw = (
            (x.shape[1] + pt + pb - kh) // strides[0] + 1,
            (x.shape[2] + pl + pr - kw) // strides[1] + 1,
        )
        out = self.empty((x.shape[0], *out_hw, c * m))
        if out.size:
            geometry = self._window(x.shape, (kh, kw), strides, pads, out_hw)
            self._run("depthwise_conv2d", geometry, m, x, w, out)
        return out

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
        x = self.contiguous(x)
        out = self.empty((x.shape[0], *out_hw, x.shape[3]))
        if out.size:
            geometry = self._window(x.shape, window, strides, pads, out_hw)
            self._run(f"{kind}_pool2d", geometry, x, out)
        return out

    def max_pool2d_grad(
        self, x: np.ndarray, g: np.ndarray, window: Pair, strides: Pair, pads: tuple[Pair, Pair]
    ) -> np.ndarray | None:
        """Each window's gradient g routed to its first maximum in x."""
        if x.dtype != np.float32 or g.dtype != np.float32:
            return None
        x, g = self.contiguous(x), self.contiguous(g)
        dx = self.empty(x.shape)
        if dx.size:
            geometry = self._window(x.shape, window, strides, pads, g.shape[1:3])
            self._run("max_pool2d_grad", geometry, x, g, dx)
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
        g = self.contiguous(g)
        dx = self.empty(tuple(input_shape))
        if dx.size:
            geometry = self._window(dx.shape, window, strides, pads, g.shape[1:3])
            self._run("avg_pool2d_grad", geometry, g, dx)
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
        dense = [
            x if kind in (INPUT_SCALAR, INPUT_GATE, INPUT_COLS) else self.contiguous(x)
            for kind, x in zip(kinds, arrays, strict=True)
        ]
        code, consts = _encoded(program)
        out = self.empty(shape)
        if out.size:
            self._run(
                "fused",
                out.size,
                code,
                len(program),
                consts,
                len(dense),
                dense,
                np.array(kinds, dtype=np.int32),
                np.array(cols, dtype=np.int32),
                out,
            )
        return out

    def _small(self, *xs: np.ndarray) -> bool:
        """Whether an exactly rounded op on these operands is cheaper in numpy (not recording)."""
        return self.log is None and max(x.size for x in xs) < ELEMENTWISE_MIN_SIZE

    def elementwise(self, op: str, xs: Sequence[np.ndarray]) -> np.ndarray | None:
        """One op of fusion.UNARY, BINARY (float32) or COMPARE (float32 or int32, bool result)."""
        if op in fusion.COMPARE:
            return self.compare(op, xs[0], xs[1])
        if op not in (*fusion.UNARY, *fusion.BINARY) or (op in EXACT and self._small(*xs)):
            return None
        if op == NUMPY_WHEN_SMALL and max(x.size for x in xs) < ELEMENTWISE_MIN_SIZE:
            return None
        if any(x.dtype != np.float32 for x in xs):
            return None
        return self.fused(((op, tuple(("input", k) for k in range(len(xs)))),), xs)

    def _step(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        """An operand as data.c reads it: (one value, 0) or (dense, 1)."""
        return (x, 0) if _is_scalar(x) else (self.contiguous(x), 1)

    def compare(self, op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
        """a `op` b (fusion.COMPARE) elementwise as bools, for equal float32 or int32 operands."""
        if a.dtype != b.dtype or a.dtype.name not in COMPARE_DTYPES or a.shape != b.shape:
            return None
        if self._small(a, b):
            return None
        out = self.empty(a.shape, np.bool_)
        (a, a_step), (b, b_step) = self._step(a), self._step(b)
        if out.size:
            dtype = COMPARE_DTYPES.index(a.dtype.name)
            kind = fusion.COMPARE.index(op)
            self._run("compare", kind, dtype, out.size, a, a_step, b, b_step, out)
        return out

    def select(self, cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
        """where(cond, a, b) for a bool cond and equal operands of 1 or 4 bytes per element."""
        if cond.dtype != np.bool_ or a.dtype != b.dtype or a.dtype.itemsize not in (1, 4):
            return None
        if not cond.shape == a.shape == b.shape or self._small(cond, a, b):
            return None
        out = self.empty(a.shape, a.dtype)
        steps = [self._step(x) for x in (cond, a, b)]
        if out.size:
            (c, c_step), (a, a_step), (b, b_step) = steps
            self._run("select", a.dtype.itemsize, out.size, c, c_step, a, a_step, b, b_step, out)
        return out

    def _rows(
        self, x: np.ndarray, axes: Sequence[int], keepdims: bool
    ) -> tuple[np.ndarray, tuple[int, ...], int] | None:
        """x with the reduced axes moved last as dense rows, the result's shape, the row length."""
        if x.dtype != np.float32 or x.size == 0:
            return None
        reduced = sorted(a % x.ndim for a in axes)
        kept = [a for a in range(x.ndim) if a not in reduced]
        rows = self.contiguous(x.transpose(*kept, *reduced))
        length = math.prod(x.shape[a] for a in reduced)
        if keepdims:
            shape = tuple(1 if a in reduced else d for a, d in enumerate(x.shape))
        else:
            shape = tuple(x.shape[a] for a in kept)
        return rows, shape, length

    def reduce_sum(self, x: np.ndarray, axes: Sequence[int], keepdims: bool) -> np.ndarray | None:
        """Sums over `axes`, each output's terms added pairwise (float32 keeps ~1e-7 relative)."""
        found = self._rows(x, axes, keepdims)
        if found is None:
            return None
        rows, shape, length = found
        out = self.empty(shape)
        self._run("sum_rows", out.size, length, rows, out)
        return out

    def reduce_max(self, x: np.ndarray, axes: Sequence[int], keepdims: bool) -> np.ndarray | None:
        """Maxima over `axes` (a NaN wins)."""
        if self._small(x):
            return None
        found = self._rows(x, axes, keepdims)
        if found is None:
            return None
        rows, shape, length = found
        out = self.empty(shape)
        self._run("max_rows", out.size, length, rows, out)
        return out
