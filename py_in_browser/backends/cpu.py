"""The numpy backend: a kernel per primitive; also the reference the GPU backends are tested against."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from . import KERNELS, Backend, Kernel, OutSpec, counter_hash, register_backend, register_kernel
from .cpu_simd import SIMD, recording, threads

NAME = "cpu"


class CpuBackend(Backend):
    """Handles are read-only np.ndarrays; kernels never write into their inputs (only a replay
    does, into the arrays its recording holds, as the GPU backends do into their buffers)."""

    name = NAME

    def __init__(self, limits: dict[str, Any] | None = None) -> None:
        super().__init__(limits)
        self._log: recording.CallLog | None = None
        self.steps_replayed = 0

    @property
    def supports_replay(self) -> bool:  # type: ignore[override]  # Backend's is a class attribute
        """Steps replay where the SIMD module loaded: they are recorded as its calls."""
        return SIMD is not None

    @property
    def replays_inference(self) -> bool:  # type: ignore[override]  # Backend's is a class attribute
        return SIMD is not None

    async def prepare(self, after_loss: bool = False) -> None:
        self.schedule_background()

    def background(self) -> None:
        """Starts the helper threads of large products (cpu_simd/threads.py), after ready."""
        threads.start_soon(SIMD)

    def _check_fits(self, shape: tuple[int, ...]) -> None:
        """Enforces max_allocation_bytes where init set it (it emulates a device's size limit)."""
        if "max_allocation_bytes" in self.limits:
            reason = self.tensor_fits(shape)
            if reason is not None:
                raise ValueError(reason)

    def upload(self, array: np.ndarray) -> np.ndarray:
        self._check_fits(array.shape)
        handle = np.array(array, copy=True, order="C")
        handle.flags.writeable = False
        self.bytes_uploaded += handle.nbytes  # the host copy stands for the traffic a GPU has
        return handle

    async def download(self, handle: np.ndarray) -> np.ndarray:
        self.bytes_downloaded += handle.nbytes
        return np.array(handle, copy=True)

    def read_now(self, handle: np.ndarray) -> np.ndarray:
        """Synchronous read, only possible on this backend; used by internal cpu fast paths."""
        return np.array(handle, copy=True)

    def free(self, handle: np.ndarray) -> None:
        # numpy memory is reclaimed by reference counting once the tensor drops the handle.
        return None

    def memory_stats(self) -> dict[str, Any]:
        return {"gpu_bytes": 0, "steps_replayed": self.steps_replayed}

    def capabilities(self) -> dict[str, Any]:
        caps = super().capabilities()
        caps["dtypes"] = ["float32", "float64", "int32", "bool"]
        return caps

    def run(self, op: str, inputs: list[Any], attrs: dict[str, Any], out: OutSpec) -> Any:
        self._check_fits(out.shape)
        if self._log is not None:
            self._log.enter_op(inputs)
        # NaN/Inf propagate silently, as on GPUs; fit detects non-finite losses itself.
        with np.errstate(all="ignore"):
            result = super().run(op, inputs, attrs, out)
        if self._log is not None:
            self._log.leave_op(op, result)
        return result

    # ---- record and replay (replay.py drives this; cpu_simd/recording.py does the work) ----

    def begin_recording(self) -> None:
        assert SIMD is not None, "the cpu backend records steps only with its SIMD module"
        self._log = SIMD.log = recording.CallLog(SIMD)

    def abort_recording(self) -> None:
        self._log = None
        if SIMD is not None:
            SIMD.log = None

    def finish_recording(
        self,
        inputs: list[np.ndarray],
        state: list[tuple[np.ndarray, np.ndarray]],
        outputs: list[np.ndarray],
    ) -> recording.Recording:
        log = self._log
        assert log is not None, "finish_recording without begin_recording"
        self.abort_recording()
        return recording.build(log, inputs, state, outputs)

    def replay(
        self, recording_: recording.Recording, arrays: list[np.ndarray], state_now: list[Any]
    ) -> list[np.ndarray]:
        assert SIMD is not None
        self.steps_replayed += 1
        if self.profile_log is None:
            return recording.replay(SIMD, recording_, arrays, state_now)
        start = time.perf_counter()  # a replayed step is one call: pib.profile times it whole
        outputs = recording.replay(SIMD, recording_, arrays, state_now)
        self.profile_log.setdefault("replayed_step", []).append(
            (time.perf_counter() - start) * 1000.0
        )
        return outputs

    def drop_recording(self, recording_: recording.Recording) -> None:
        # Its arrays are numpy's: they are freed when nothing refers to them any more.
        return None


register_backend(NAME, CpuBackend, priority=0)


def _kernel(op: str) -> Callable[[Kernel], Kernel]:
    return register_kernel(NAME, op)


def _elementwise(op: str, fn: Any, xs: list[np.ndarray]) -> np.ndarray:
    out = _simd("elementwise", op, xs)
    return fn(*xs) if out is None else out


def _unary(op: str, fn: Any) -> None:
    register_kernel(NAME, op)(lambda xs, attrs: _elementwise(op, fn, xs))


def _binary(op: str, fn: Any) -> None:
    register_kernel(NAME, op)(lambda xs, attrs: _elementwise(op, fn, xs))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Evaluates exp only on non-positive arguments so it never overflows.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf, and a GPU shader needs the
    # same closed form, so every backend agrees to float32 precision.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1 / (1 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return (sign * (1 - poly * np.exp(-a * a))).astype(x.dtype)


_unary("neg", np.negative)
_unary("exp", np.exp)
_unary("log", np.log)
_unary("sqrt", np.sqrt)
_unary("tanh", np.tanh)
_unary("sigmoid", _sigmoid)
_unary("relu", lambda x: np.maximum(x, 0).astype(x.dtype))
_unary("erf", _erf)

_binary("add", np.add)
_binary("sub", np.subtract)
_binary("mul", np.multiply)
_binary("div", np.divide)
_binary("pow", np.power)
_binary("maximum", np.maximum)
_binary("less", np.less)
_binary("less_equal", np.less_equal)
_binary("equal", np.equal)
_binary("not_equal", np.not_equal)


@_kernel("where")
def _where(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    out = _simd("select", *xs)
    return np.where(xs[0], xs[1], xs[2]) if out is None else out


@_kernel("fused")
def _fused(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """The SIMD module's interpreter where it loaded (its exp, log, tanh and pow within 2 ulp of
    numpy's); else the program step by step with this backend's own elementwise kernels, so a
    fused update gives exactly the numbers of the same ops run one by one (scalars broadcast)."""
    out = _simd("fused", attrs["program"], xs)
    if out is not None:
        return out
    dtype = next((x.dtype for x in xs if x.dtype != np.bool_), np.dtype(np.float32))
    steps: list[Any] = []

    def value(ref: tuple[str, Any]) -> Any:
        where, v = ref
        if where == "const":
            return np.asarray(v, dtype=dtype)
        return xs[v] if where == "input" else steps[v]

    for op, args in attrs["program"]:
        steps.append(KERNELS[(NAME, op)]([value(ref) for ref in args], {}))
    shape = next((x.shape for x in xs if x.ndim), ())
    return np.array(np.broadcast_to(steps[-1], shape), dtype=dtype)


@_kernel("cast")
def _cast(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return xs[0].astype(attrs["dtype"])


@_kernel("expand")
def _expand(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return np.broadcast_to(xs[0], attrs["shape"])


@_kernel("reshape")
def _reshape(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return xs[0].reshape(attrs["shape"])


@_kernel("transpose")
def _transpose(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return xs[0].transpose(attrs["perm"])


@_kernel("slice")
def _slice(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    index = tuple(slice(b, b + s) for b, s in zip(attrs["begin"], attrs["size"], strict=True))
    return xs[0][index]


@_kernel("pad")
def _pad(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return np.pad(xs[0], attrs["paddings"], constant_values=attrs["value"])


@_kernel("concat")
def _concat(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return np.concatenate(xs, axis=attrs["axis"])


@_kernel("reduce_sum")
def _reduce_sum(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """The reduced axes are moved last and made one contiguous row per output, so numpy sums
    each row pairwise: summed in place over several or leading axes it adds one term after
    another, and float32 loses ~1e-4 relative over 500k terms (pairwise: ~1e-7)."""
    x = xs[0]
    out = _simd("reduce_sum", x, attrs["axes"], attrs["keepdims"])
    if out is not None:
        return out
    axes = tuple(sorted(a % x.ndim for a in attrs["axes"]))
    kept = [a for a in range(x.ndim) if a not in axes]
    rows = np.ascontiguousarray(x.transpose(*kept, *axes)).reshape(
        [x.shape[a] for a in kept] + [-1 if x.size else 0]
    )
    total = np.sum(rows, axis=-1, dtype=x.dtype)
    if attrs["keepdims"]:
        total = total.reshape([1 if a in axes else d for a, d in enumerate(x.shape)])
    return total


@_kernel("reduce_max")
def _reduce_max(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    out = _simd("reduce_max", xs[0], attrs["axes"], attrs["keepdims"])
    if out is not None:
        return out
    return np.max(xs[0], axis=attrs["axes"], keepdims=attrs["keepdims"])


@_kernel("argmax")
def _argmax(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return np.argmax(xs[0], axis=attrs["axis"]).astype(np.int32)


def _simd(kernel: str, *args: Any) -> np.ndarray | None:
    """The SIMD module's `kernel` where the module loaded (Pyodide) and applies (float32), else
    None: the caller then computes the same with numpy."""
    return getattr(SIMD, kernel)(*args) if SIMD is not None else None


def _gemm(a: np.ndarray, b: np.ndarray, transpose_a: bool, transpose_b: bool) -> np.ndarray:
    """op(a) @ op(b)."""
    out = _simd("gemm", a, b, transpose_a, transpose_b)
    if out is not None:
        return out
    return np.matmul(
        np.swapaxes(a, -1, -2) if transpose_a else a, np.swapaxes(b, -1, -2) if transpose_b else b
    )


@_kernel("matmul")
def _matmul(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return _gemm(xs[0], xs[1], attrs["transpose_a"], attrs["transpose_b"])


def _padded(x: np.ndarray, pads: Any, value: float = 0.0) -> np.ndarray:
    return np.pad(x, ((0, 0), tuple(pads[0]), tuple(pads[1]), (0, 0)), constant_values=value)


def _windows(xp: np.ndarray, window: Any, strides: Any, out_hw: Any) -> np.ndarray:
    """Strided view (N, OH, OW, C, KH, KW) of every window: im2col without copying."""
    (kh, kw), (sh, sw), (oh, ow) = window, strides, out_hw
    view = sliding_window_view(xp, (kh, kw), axis=(1, 2))
    return view[:, : (oh - 1) * sh + 1 : sh, : (ow - 1) * sw + 1 : sw]


def _scatter_windows(
    cols: np.ndarray, padded_shape: tuple[int, ...], strides: Any, pads: Any, out_hw: Any
) -> np.ndarray:
    """Adds cols (N, OH, OW, KH, KW, C) back onto the padded input grid, then crops the pads.

    Loops over kernel offsets only (e.g. 9 for 3x3), never over pixels.
    """
    _, oh, ow, kh, kw, _ = cols.shape
    sh, sw = strides
    out = np.zeros(padded_shape, dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, i : i + (oh - 1) * sh + 1 : sh, j : j + (ow - 1) * sw + 1 : sw, :] += cols[
                :, :, :, i, j, :
            ]
    (pt, pb), (pl, pr) = pads
    return out[:, pt : padded_shape[1] - pb, pl : padded_shape[2] - pr, :]


def _out_hw(padded_hw: Any, window: Any, strides: Any) -> tuple[int, int]:
    return (
        (padded_hw[0] - window[0]) // strides[0] + 1,
        (padded_hw[1] - window[1]) // strides[1] + 1,
    )


def _windows_out_hw(shape: tuple[int, ...], window: Any, attrs: dict[str, Any]) -> tuple[int, int]:
    """Output height and width of `window` over an NHWC input of `shape` padded by attrs' pads."""
    (pt, pb), (pl, pr) = attrs["pads"]
    return _out_hw((shape[1] + pt + pb, shape[2] + pl + pr), window, attrs["strides"])


def _im2col(x: np.ndarray, window: Any, attrs: dict[str, Any], out_hw: Any) -> np.ndarray:
    """Rows (N*OH*OW, KH*KW*C) of every zero-padded window of x, taps in (i, j, c) order."""
    pointwise = tuple(window) == (1, 1) and tuple(attrs["strides"]) == (1, 1)
    if pointwise and not np.any(attrs["pads"]) and x.flags.c_contiguous:
        return x.reshape(-1, x.shape[3])  # a 1x1 window's rows are the pixels: x itself, no copy
    cols = _simd("im2col", x, window, attrs["strides"], attrs["pads"], out_hw)
    if cols is None:
        win = _windows(_padded(x, attrs["pads"]), window, attrs["strides"], out_hw)
        cols = win.transpose(0, 1, 2, 4, 5, 3).reshape(-1, window[0] * window[1] * x.shape[3])
    return cols


@_kernel("conv2d")
def _conv2d(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x, w = xs
    kh, kw, cin, cout = w.shape
    oh, ow = _windows_out_hw(x.shape, (kh, kw), attrs)
    cols = _im2col(x, (kh, kw), attrs, (oh, ow))
    return _gemm(cols, w.reshape(kh * kw * cin, cout), False, False).reshape(
        x.shape[0], oh, ow, cout
    )


@_kernel("conv2d_backprop_input")
def _conv2d_backprop_input(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    g, w = xs
    kh, kw, cin, cout = w.shape
    n, oh, ow, _ = g.shape
    cols = _gemm(g.reshape(-1, cout), w.reshape(kh * kw * cin, cout), False, True)
    window, strides, pads = (kh, kw), attrs["strides"], attrs["pads"]
    dx = _simd("col2im", cols, attrs["input_shape"], window, strides, pads, (oh, ow))
    if dx is not None:
        return dx
    cols = cols.reshape(n, oh, ow, kh, kw, cin)
    _, h, wd, _ = attrs["input_shape"]
    (pt, pb), (pl, pr) = attrs["pads"]
    padded = (n, h + pt + pb, wd + pl + pr, cin)
    return _scatter_windows(cols, padded, attrs["strides"], attrs["pads"], (oh, ow))


@_kernel("conv2d_backprop_filter")
def _conv2d_backprop_filter(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x, g = xs
    kh, kw, cin, cout = attrs["filter_shape"]
    cols = _im2col(x, (kh, kw), attrs, g.shape[1:3])
    return _gemm(cols, g.reshape(-1, cout), True, False).reshape(kh, kw, cin, cout)


@_kernel("depthwise_conv2d")
def _depthwise_conv2d(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x, w = xs
    out = _simd("depthwise_conv2d", x, w, attrs["strides"], attrs["pads"])
    if out is not None:
        return out
    kh, kw, c, m = w.shape
    oh, ow = _windows_out_hw(x.shape, (kh, kw), attrs)
    sh, sw = attrs["strides"]
    xp = _padded(x, attrs["pads"])[..., None]  # (N, HP, WP, C, 1): each channel meets its M filters
    acc = np.zeros((x.shape[0], oh, ow, c, m), dtype=x.dtype)
    # Python loops over the shorter side only: the taps of a layer's small filters, or the output
    # pixels of the filter gradient (ops.py), whose "filters" are whole gradient images.
    if kh * kw <= oh * ow:
        for i in range(kh):
            for j in range(kw):
                acc += (
                    xp[:, i : i + (oh - 1) * sh + 1 : sh, j : j + (ow - 1) * sw + 1 : sw] * w[i, j]
                )
    else:
        for i in range(oh):
            for j in range(ow):
                window = xp[:, i * sh : i * sh + kh, j * sw : j * sw + kw]
                acc[:, i, j] = (window * w).sum(axis=(1, 2))
    return acc.reshape(x.shape[0], oh, ow, c * m)


@_kernel("max_pool2d")
def _max_pool2d(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    window, strides, pads = attrs["pool_size"], attrs["strides"], attrs["pads"]
    out_hw = _windows_out_hw(xs[0].shape, window, attrs)
    out = _simd("pool2d", "max", xs[0], window, strides, pads, out_hw)
    if out is not None:
        return out
    xp = _padded(xs[0], attrs["pads"], -np.inf)
    out_hw = _out_hw(xp.shape[1:3], attrs["pool_size"], attrs["strides"])
    return _windows(xp, attrs["pool_size"], attrs["strides"], out_hw).max(axis=(4, 5))


@_kernel("max_pool2d_grad")
def _max_pool2d_grad(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x, g = xs
    kh, kw = attrs["pool_size"]
    dx = _simd("max_pool2d_grad", x, g, (kh, kw), attrs["strides"], attrs["pads"])
    if dx is not None:
        return dx
    xp = _padded(x, attrs["pads"], -np.inf)
    out_hw = g.shape[1:3]
    win = _windows(xp, (kh, kw), attrs["strides"], out_hw)
    # The first maximum of each window takes the whole gradient, as in TensorFlow and PyTorch.
    first = win.reshape(*win.shape[:4], kh * kw).argmax(axis=-1)
    onehot = first[..., None] == np.arange(kh * kw)
    cols = (onehot * g[..., None]).reshape(*g.shape, kh, kw).transpose(0, 1, 2, 4, 5, 3)
    return _scatter_windows(cols.astype(x.dtype), xp.shape, attrs["strides"], attrs["pads"], out_hw)


def _pool_counts(shape: tuple[int, ...], attrs: dict[str, Any], dtype: Any) -> np.ndarray:
    """How many real (unpadded) inputs each window covers; padding is not averaged in (TF rule)."""
    ones = _padded(np.ones((1, shape[1], shape[2], 1), dtype=dtype), attrs["pads"])
    out_hw = _out_hw(ones.shape[1:3], attrs["pool_size"], attrs["strides"])
    return _windows(ones, attrs["pool_size"], attrs["strides"], out_hw).sum(axis=(4, 5))


@_kernel("avg_pool2d")
def _avg_pool2d(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = xs[0]
    window, strides, pads = attrs["pool_size"], attrs["strides"], attrs["pads"]
    out_hw = _windows_out_hw(x.shape, window, attrs)
    out = _simd("pool2d", "avg", x, window, strides, pads, out_hw)
    if out is not None:
        return out
    xp = _padded(x, attrs["pads"])
    sums = _windows(xp, attrs["pool_size"], attrs["strides"], out_hw).sum(axis=(4, 5))
    return (sums / _pool_counts(x.shape, attrs, x.dtype)).astype(x.dtype)


@_kernel("avg_pool2d_grad")
def _avg_pool2d_grad(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    g = xs[0]
    shape = attrs["input_shape"]
    kh, kw = attrs["pool_size"]
    dx = _simd("avg_pool2d_grad", g, shape, (kh, kw), attrs["strides"], attrs["pads"])
    if dx is not None:
        return dx
    (pt, pb), (pl, pr) = attrs["pads"]
    share = g / _pool_counts(shape, attrs, g.dtype)
    cols = np.broadcast_to(share[:, :, :, None, None, :], (*g.shape[:3], kh, kw, g.shape[3]))
    padded = (shape[0], shape[1] + pt + pb, shape[2] + pl + pr, shape[3])
    return _scatter_windows(cols, padded, attrs["strides"], attrs["pads"], g.shape[1:3])


@_kernel("random_uniform")
def _random_uniform(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    shape = tuple(attrs["shape"])
    count = int(np.prod(shape, dtype=np.int64))
    values = counter_hash.uniform(attrs["seed"], attrs["stream"], int(xs[0]), count, attrs["bits"])
    return values.reshape(shape)


@_kernel("affine_sample")
def _affine_sample(xs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """ops.py states the rule; computed in float64 so it is the oracle of the f32 GPU kernels."""
    images, params = xs[0].astype(np.float64), xs[1].astype(np.float64)
    n, h, w, _ = images.shape
    out_h, out_w = attrs["size"]
    u = (2.0 * np.arange(out_w) + 1.0) / out_w - 1.0
    v = (2.0 * np.arange(out_h) + 1.0) / out_h - 1.0
    a, b, c, d, e, f, gain, offset = (params[:, k, None, None] for k in range(8))
    x = a * u[None, None, :] + b * v[None, :, None] + c  # (n, out_h, out_w)
    y = d * u[None, None, :] + e * v[None, :, None] + f
    px = np.clip(((x + 1.0) * w - 1.0) / 2.0, 0.0, w - 1.0)
    py = np.clip(((y + 1.0) * h - 1.0) / 2.0, 0.0, h - 1.0)
    x0, y0 = np.floor(px).astype(np.int64), np.floor(py).astype(np.int64)
    x1, y1 = np.minimum(x0 + 1, w - 1), np.minimum(y0 + 1, h - 1)
    wx, wy = (px - x0)[..., None], (py - y0)[..., None]
    batch = np.arange(n)[:, None, None]
    top = images[batch, y0, x0] * (1 - wx) + images[batch, y0, x1] * wx
    bottom = images[batch, y1, x0] * (1 - wx) + images[batch, y1, x1] * wx
    sample = top * (1 - wy) + bottom * wy
    return (sample * gain[..., None] + offset[..., None]).astype(xs[0].dtype)
