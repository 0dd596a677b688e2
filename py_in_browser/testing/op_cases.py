"""The one table of op test cases, with plain-numpy references and async checkers.

Used by pytest in CPython and by Playwright inside Pyodide on every backend, so it imports only
numpy and py_in_browser. Inputs are deterministic: np.random.Generator(PCG64(case.seed)).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

import py_in_browser as pib
from py_in_browser import fusion


@dataclass(frozen=True)
class OpCase:
    """One call of a public op: pib.<op>(*inputs, **attrs) and the numpy reference of it."""

    name: str
    op: str
    shapes: tuple[tuple[int, ...], ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    # Per input: "normal", "positive" (log, sqrt, pow base), "distinct" (no ties for max-like
    # ops), "bool", "true" (all True) or "int<n>" (integers in [0, n)). A "fused" case names
    # one of FUSED_PROGRAMS in attrs["program"].
    kinds: tuple[str, ...] = ()
    seed: int = 0
    grad: bool = True
    # Relative gradient tolerance vs float64 finite differences; erf is a 1.5e-7 approximation
    # (the closed form a shader can also evaluate), so its slope differs slightly more.
    grad_tol: float = 1e-6


def _kinds(case: OpCase) -> tuple[str, ...]:
    return case.kinds or ("normal",) * len(case.shapes)


def make_inputs(case: OpCase, dtype: str = "float32") -> list[np.ndarray]:
    rng = np.random.Generator(np.random.PCG64(case.seed))
    arrays = []
    for index, (shape, kind) in enumerate(zip(case.shapes, _kinds(case), strict=True)):
        n = int(np.prod(shape, dtype=np.int64))
        if kind == "normal":
            arrays.append(rng.standard_normal(shape).astype(dtype))
        elif kind == "positive":
            arrays.append(rng.uniform(0.5, 2.0, shape).astype(dtype))
        elif kind == "distinct":
            # A shuffled ramp spaced 0.1 apart, offset per input: no ties within or across inputs,
            # so finite differences never cross a kink.
            ramp = rng.permutation(n).reshape(shape) * 0.1 - n * 0.05 + 0.037 * (index + 1)
            arrays.append(ramp.astype(dtype))
        elif kind == "bool":
            arrays.append(rng.uniform(size=shape) < 0.5)
        elif kind == "true":
            arrays.append(np.ones(shape, dtype=bool))
        elif kind == "affine":
            arrays.append(_affine_rows(rng, shape[0]).astype(dtype))
        elif kind.startswith("int"):
            arrays.append(rng.integers(0, int(kind[3:]), shape).astype(np.int32))
        else:
            raise ValueError(f"unknown input kind {kind!r}")
    return arrays


def _affine_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    angle = rng.uniform(-0.5, 0.5, n)
    zoom = rng.uniform(0.6, 1.4, n)
    flip = np.where(rng.uniform(size=n) < 0.5, -1.0, 1.0)
    shift = rng.uniform(-0.6, 0.6, (n, 2))
    gain, offset = rng.uniform(0.5, 1.5, n), rng.uniform(-0.2, 0.2, n)
    cos, sin = zoom * np.cos(angle), zoom * np.sin(angle)
    columns = [flip * cos, -sin, shift[:, 0], flip * sin, cos, shift[:, 1], gain, offset]
    return np.stack(columns, axis=1)


def affine_sample_reference(images: Any, params: Any, size: Any) -> np.ndarray:
    """pib.affine_sample pixel by pixel in plain Python floats (ops.py states the rule), written
    apart from the cpu kernel's vectorized numpy."""
    n, h, w, channels = images.shape
    out_h, out_w = size
    out = np.zeros((n, out_h, out_w, channels))

    def clamp(value: float, top: float) -> float:
        return min(max(value, 0.0), top)

    for b in range(n):
        a_, b_, c_, d_, e_, f_, gain, offset = (float(v) for v in params[b])
        for i in range(out_h):
            v = (2 * i + 1) / out_h - 1
            for j in range(out_w):
                u = (2 * j + 1) / out_w - 1
                px = clamp(((a_ * u + b_ * v + c_ + 1) * w - 1) / 2, w - 1)
                py = clamp(((d_ * u + e_ * v + f_ + 1) * h - 1) / 2, h - 1)
                x0, y0 = math.floor(px), math.floor(py)
                x1, y1 = min(x0 + 1, w - 1), min(y0 + 1, h - 1)
                wx, wy = px - x0, py - y0
                for ch in range(channels):
                    top = images[b, y0, x0, ch] * (1 - wx) + images[b, y0, x1, ch] * wx
                    low = images[b, y1, x0, ch] * (1 - wx) + images[b, y1, x1, ch] * wx
                    out[b, i, j, ch] = (top * (1 - wy) + low * wy) * gain + offset
    return out


def _same_pads(size: int, k: int, s: int) -> tuple[int, int]:
    out = math.ceil(size / s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def _pads(padding: str, hw: tuple[int, int], window: tuple[int, int], strides: tuple[int, int]):
    if padding == "valid":
        return (0, 0), (0, 0)
    return _same_pads(hw[0], window[0], strides[0]), _same_pads(hw[1], window[1], strides[1])


def _as_pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _ref_conv2d(x: np.ndarray, w: np.ndarray, strides: Any = 1, padding: str = "valid"):
    """Direct loops over output pixels: slow, but independent of the im2col kernel."""
    sh, sw = _as_pair(strides)
    kh, kw, _, cout = w.shape
    (pt, pb), (pl, pr) = _pads(padding, x.shape[1:3], (kh, kw), (sh, sw))
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    oh, ow = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
    out = np.zeros((x.shape[0], oh, ow, cout))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * sh : i * sh + kh, j * sw : j * sw + kw, :]
            out[:, i, j, :] = np.tensordot(patch, w, axes=([1, 2, 3], [0, 1, 2]))
    return out


def _ref_depthwise_conv2d(
    x: np.ndarray, w: np.ndarray, strides: Any = 1, padding: Any = "valid"
) -> np.ndarray:
    """Direct loops over output pixels and filters, apart from the cpu kernel's tap loop."""
    sh, sw = _as_pair(strides)
    kh, kw, channels, multiplier = w.shape
    if isinstance(padding, str):
        (pt, pb), (pl, pr) = _pads(padding, x.shape[1:3], (kh, kw), (sh, sw))
    else:
        (pt, pb), (pl, pr) = padding
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    oh, ow = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
    out = np.zeros((x.shape[0], oh, ow, channels * multiplier), dtype=np.result_type(x, w))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * sh : i * sh + kh, j * sw : j * sw + kw, :]
            for m in range(multiplier):
                out[:, i, j, m::multiplier] = np.sum(patch * w[:, :, :, m], axis=(1, 2))
    return out


def _ref_pool(kind: str) -> Callable[..., np.ndarray]:
    def pool(x: np.ndarray, pool_size: Any = 2, strides: Any = None, padding: str = "valid"):
        kh, kw = _as_pair(pool_size)
        sh, sw = _as_pair(strides if strides is not None else pool_size)
        (pt, pb), (pl, pr) = _pads(padding, x.shape[1:3], (kh, kw), (sh, sw))
        xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=np.nan)
        oh, ow = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
        out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
        reduce = np.nanmax if kind == "max" else np.nanmean
        for i in range(oh):
            for j in range(ow):
                window = xp[:, i * sh : i * sh + kh, j * sw : j * sw + kw, :]
                out[:, i, j, :] = reduce(window, axis=(1, 2))
        return out

    return pool


def _ref_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _ref_slice(x: np.ndarray, begin: Any, size: Any) -> np.ndarray:
    return x[tuple(slice(b, b + s) for b, s in zip(begin, size, strict=True))]


_erf = np.vectorize(math.erf)
_WORD = 0xFFFFFFFF


def _lowbias32(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _WORD
    x ^= x >> 15
    x = (x * 0x846CA68B) & _WORD
    return x ^ (x >> 16)


def random_uniform_reference(
    counter: Any, shape: Any, seed: int = 0, stream: int = 0, bits: int = 24
) -> np.ndarray:
    """pib.random_uniform in plain Python integers, written apart from the backends' numpy
    (backends/counter_hash.py states the construction): the oracle every backend must match
    bit for bit."""
    key = _lowbias32(_lowbias32((seed ^ 0x9E3779B9) & _WORD) ^ stream)
    k = _lowbias32(key ^ int(counter))
    count = math.prod(shape)
    hashed = [_lowbias32((_lowbias32(i ^ k) + k) & _WORD) for i in range(count)]
    top = np.array([h >> (32 - bits) for h in hashed], dtype=np.float64)
    return (top / 2.0**bits).reshape(shape)


REFERENCES: dict[str, Callable[..., Any]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "pow": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "where": np.where,
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "erf": _erf,
    "abs": np.abs,
    "square": np.square,
    "leaky_relu": lambda x, negative_slope=0.2: np.where(x > 0, x, x * negative_slope),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "sum": lambda x, axis=None, keepdims=False: np.sum(x, axis=axis, keepdims=keepdims),
    "mean": lambda x, axis=None, keepdims=False: np.mean(x, axis=axis, keepdims=keepdims),
    "max": lambda x, axis=None, keepdims=False: np.max(x, axis=axis, keepdims=keepdims),
    "min": lambda x, axis=None, keepdims=False: np.min(x, axis=axis, keepdims=keepdims),
    "variance": lambda x, axis=None, keepdims=False: np.var(x, axis=axis, keepdims=keepdims),
    "argmax": lambda x, axis=-1: np.argmax(x, axis=axis),
    "matmul": np.matmul,
    "reshape": lambda x, shape: np.reshape(x, shape),
    "transpose": lambda x, perm=None: np.transpose(x, perm),
    "slice": _ref_slice,
    "pad": lambda x, paddings, constant_values=0.0: np.pad(
        x, paddings, constant_values=constant_values
    ),
    "concat": lambda *xs, axis=0: np.concatenate(xs, axis=axis),
    "softmax": _ref_softmax,
    "log_softmax": lambda x, axis=-1: np.log(_ref_softmax(x, axis)),
    "cast": lambda x, dtype: x.astype(dtype),
    "conv2d": _ref_conv2d,
    "depthwise_conv2d": _ref_depthwise_conv2d,
    "max_pool2d": _ref_pool("max"),
    "avg_pool2d": _ref_pool("avg"),
    "random_uniform": random_uniform_reference,
    "affine_sample": affine_sample_reference,
}


def _every_op_program(ns: Any, x: Any, y: Any, s: Any, c: Any) -> Any:
    """Every op a fused program may hold, with scalar s and constants; ns is numpy or fusion."""
    smooth = ns.tanh(x) * ns.sigmoid(y) + ns.erf(y * 0.5) - ns.relu(x) / (s * s + 1.0)
    grown = ns.log(ns.exp(x * 0.5) + 1.0) + ns.sqrt(y * y + 0.25) + ns.pow(s * s + 1.0, x)
    picked = ns.where(ns.less(x, y), ns.maximum(x, -y), -x)
    picked = ns.where(ns.less_equal(y, s), picked, picked * 2.0)
    flags = ns.where(ns.equal(x, x), 1.0, 0.0) + ns.where(ns.not_equal(y, s), 0.5, 0.0)
    return ns.where(c, smooth - grown, picked + flags)


def _gated_adam_program(ns: Any, w: Any, m: Any, v: Any, g: Any, lr: Any, c2: Any, gate: Any):
    """An optimizer-shaped program: Adam's weight update behind a scalar bool gate."""
    m_new = m * 0.9 + g * (1.0 - 0.9)
    v_new = v * 0.999 + g * g * (1.0 - 0.999)
    return ns.where(gate, w - (m_new * lr) / (ns.sqrt(v_new / c2) + 1e-7), w)


FUSED_PROGRAMS: dict[str, Callable[..., Any]] = {
    "every_op": _every_op_program,
    "gated_adam": _gated_adam_program,
}
_NUMPY_OPS = SimpleNamespace(
    tanh=np.tanh,
    sigmoid=lambda x: 1 / (1 + np.exp(-x)),
    erf=_erf,
    relu=lambda x: np.maximum(x, 0),
    log=np.log,
    exp=np.exp,
    sqrt=np.sqrt,
    pow=np.power,
    where=np.where,
    less=np.less,
    less_equal=np.less_equal,
    equal=np.equal,
    not_equal=np.not_equal,
    maximum=np.maximum,
)

_C = OpCase
CASES: list[OpCase] = [
    _C("add_broadcast", "add", ((2, 3, 4), (3, 1))),
    _C("sub_broadcast", "sub", ((4,), (2, 4))),
    _C("mul_broadcast", "mul", ((2, 1, 4), (1, 3, 1))),
    _C("div", "div", ((3, 4), (3, 4)), kinds=("normal", "positive")),
    _C("pow", "pow", ((3, 4), (3, 4)), kinds=("positive", "normal")),
    _C("maximum", "maximum", ((3, 4), (4,)), kinds=("distinct", "distinct"), seed=1),
    _C("minimum", "minimum", ((3, 4), (3, 4)), kinds=("distinct", "distinct"), seed=2),
    _C("less", "less", ((3, 4), (3, 4)), grad=False),
    _C("less_equal", "less_equal", ((3, 4), (4,)), grad=False),
    _C("greater", "greater", ((3, 4), (3, 4)), grad=False),
    _C("greater_equal", "greater_equal", ((3, 4), (3, 4)), grad=False),
    _C("equal", "equal", ((3, 4), (3, 4)), kinds=("int3", "int3"), grad=False),
    _C("not_equal", "not_equal", ((3, 4), (3, 4)), kinds=("int3", "int3"), grad=False),
    _C("where", "where", ((3, 4), (3, 4), (4,)), kinds=("bool", "normal", "normal")),
    _C(
        "fused_every_op",
        "fused",
        ((3, 4), (3, 4), (), (3, 4)),
        {"program": "every_op"},
        kinds=("normal", "normal", "normal", "bool"),
    ),
    _C(
        "fused_gated_adam",
        "fused",
        ((5, 7), (5, 7), (5, 7), (5, 7), (), (), ()),
        {"program": "gated_adam"},
        kinds=("normal", "normal", "positive", "normal", "positive", "positive", "true"),
    ),
    _C("neg", "neg", ((3, 4),)),
    _C("exp", "exp", ((3, 4),)),
    _C("log", "log", ((3, 4),), kinds=("positive",)),
    _C("sqrt", "sqrt", ((3, 4),), kinds=("positive",)),
    _C("tanh", "tanh", ((3, 4),)),
    _C("sigmoid", "sigmoid", ((3, 4),)),
    _C("relu", "relu", ((3, 4),), kinds=("distinct",)),
    _C("erf", "erf", ((3, 4),), grad_tol=1e-5),
    _C("abs", "abs", ((3, 4),), kinds=("distinct",), seed=3),
    _C("square", "square", ((3, 4),)),
    _C("leaky_relu", "leaky_relu", ((3, 4),), kinds=("distinct",), seed=4),
    _C("gelu", "gelu", ((3, 4),)),
    _C("sum_all", "sum", ((2, 3, 4),)),
    _C("sum_axes_keepdims", "sum", ((2, 3, 4),), {"axis": (0, 2), "keepdims": True}),
    _C("mean_axis", "mean", ((2, 3, 4),), {"axis": 1}),
    _C("max_axis", "max", ((2, 3, 4),), {"axis": -1}, kinds=("distinct",)),
    _C("max_all_keepdims", "max", ((2, 3, 4),), {"keepdims": True}, kinds=("distinct",)),
    _C("min_axis", "min", ((2, 3, 4),), {"axis": 0}, kinds=("distinct",)),
    _C("variance_axis", "variance", ((4, 5),), {"axis": 0}),
    _C("argmax_last", "argmax", ((3, 5),), {"axis": -1}, kinds=("distinct",), grad=False),
    _C("argmax_first", "argmax", ((3, 5, 2),), {"axis": 0}, kinds=("distinct",), grad=False),
    _C("matmul_2d", "matmul", ((3, 4), (4, 5))),
    _C("matmul_batched", "matmul", ((2, 3, 4), (2, 4, 5))),
    _C("matmul_broadcast_batch", "matmul", ((2, 3, 4), (4, 2))),
    _C("matmul_row", "matmul", ((1, 8), (8, 12))),  # one row of C: webgpu's GEMV
    _C("reshape", "reshape", ((2, 6),), {"shape": (3, -1)}),
    _C("transpose", "transpose", ((2, 3, 4),), {"perm": (2, 0, 1)}),
    _C("slice", "slice", ((4, 5),), {"begin": (1, 2), "size": (2, 3)}),
    _C("pad", "pad", ((2, 3),), {"paddings": ((1, 0), (2, 1))}),
    _C("concat", "concat_list", ((2, 3), (2, 2)), {"axis": 1}),
    _C("softmax", "softmax", ((3, 5),)),
    _C("log_softmax", "log_softmax", ((3, 5),), {"axis": 0}),
    _C("cast_to_int", "cast", ((3, 4),), {"dtype": "int32"}, grad=False),
    _C("conv2d_valid", "conv2d", ((2, 5, 6, 2), (3, 3, 2, 3))),
    _C("conv2d_same", "conv2d", ((1, 5, 5, 2), (3, 3, 2, 2)), {"padding": "same"}),
    _C(
        "conv2d_same_stride2",
        "conv2d",
        ((1, 6, 7, 2), (3, 2, 2, 3)),
        {"padding": "same", "strides": 2},
    ),
    _C("conv2d_valid_stride2", "conv2d", ((1, 7, 7, 1), (3, 3, 1, 2)), {"strides": (2, 1)}),
    # RGB in, whole vec4s of channels out: webgpu's direct convolution.
    _C("conv2d_rgb_same", "conv2d", ((1, 5, 5, 3), (3, 3, 3, 8)), {"padding": "same"}),
    # Depthwise: a channel multiplier of 1 (every model here), 2 and 3; the hand model's 3x3 and
    # 5x5 "same" filters at strides 1 and 2; explicit pads larger than the filter reaches; whole
    # texels / vec4s of channels (webgl2, webgpu) and not.
    _C("depthwise_valid", "depthwise_conv2d", ((2, 5, 6, 3), (3, 3, 3, 1))),
    _C(
        "depthwise_same_multiplier2",
        "depthwise_conv2d",
        ((1, 5, 5, 2), (3, 3, 2, 2)),
        {"padding": "same"},
    ),
    _C(
        "depthwise_5x5_same_stride2",
        "depthwise_conv2d",
        ((1, 7, 8, 4), (5, 5, 4, 1)),
        {"padding": "same", "strides": 2},
        seed=1,
    ),
    _C(
        "depthwise_stride21_multiplier3",
        "depthwise_conv2d",
        ((2, 7, 6, 2), (3, 2, 2, 3)),
        {"strides": (2, 1)},
        seed=2,
    ),
    _C(
        "depthwise_explicit_pads",
        "depthwise_conv2d",
        ((1, 4, 5, 8), (3, 3, 8, 1)),
        {"padding": ((3, 0), (1, 3)), "strides": (1, 2)},
        seed=3,
    ),
    # 1152 filter elements: RGBA-packed on webgl2, read a texel per tap.
    _C(
        "depthwise_wide_same",
        "depthwise_conv2d",
        ((1, 3, 4, 128), (3, 3, 128, 1)),
        {"padding": "same"},
        seed=4,
    ),
    _C("max_pool2d", "max_pool2d", ((2, 4, 6, 2),), kinds=("distinct",)),
    _C(
        "max_pool2d_same",
        "max_pool2d",
        ((1, 5, 5, 2),),
        {"pool_size": 3, "strides": 2, "padding": "same"},
        kinds=("distinct",),
    ),
    # Whole texels of channels, windows tiling a padded odd-sized input (webgl2's gradient finds
    # each pixel's one window directly).
    _C(
        "max_pool2d_tiled_same",
        "max_pool2d",
        ((1, 5, 7, 4),),
        {"pool_size": 2, "padding": "same"},
        kinds=("distinct",),
    ),
    _C("avg_pool2d", "avg_pool2d", ((2, 4, 6, 2),)),
    _C(
        "avg_pool2d_same",
        "avg_pool2d",
        ((1, 5, 5, 2),),
        {"pool_size": 3, "strides": 2, "padding": "same"},
    ),
    # The counter is the one tensor input (an int32 scalar here); 22 bits, which float16
    # storage holds exactly, so the case runs on every backend.
    _C(
        "random_uniform",
        "random_uniform",
        ((),),
        {"shape": (5, 7), "seed": 11, "stream": 3, "bits": 22},
        kinds=("int1000",),
        grad=False,
    ),
    # Three images resampled to another size: mirrors, rotations, zooms, shifts past the edges.
    _C(
        "affine_sample",
        "affine_sample",
        ((3, 7, 9, 2), (3, 8)),
        {"size": (5, 6)},
        kinds=("normal", "affine"),
        seed=5,
        grad=False,
    ),
]


def _call_pib(case: OpCase, tensors: list[pib.Tensor]) -> pib.Tensor:
    if case.op == "concat_list":
        return pib.concat(tensors, **case.attrs)
    if case.op == "random_uniform":
        drawn: pib.Tensor = pib.random_uniform(counter=tensors[0], **case.attrs)
        return drawn
    if case.op == "fused":
        program = FUSED_PROGRAMS[case.attrs["program"]]
        fused: pib.Tensor = pib.fused(lambda *xs: program(fusion, *xs), *tensors)
        return fused
    out: pib.Tensor = getattr(pib, case.op)(*tensors, **case.attrs)
    return out


def reference(case: OpCase, arrays: list[np.ndarray]) -> np.ndarray:
    """The numpy answer, computed in float64 where inputs are float."""
    wide = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]
    if case.op == "concat_list":
        return np.asarray(REFERENCES["concat"](*wide, **case.attrs))
    if case.op == "fused":
        return np.asarray(FUSED_PROGRAMS[case.attrs["program"]](_NUMPY_OPS, *wide))
    return np.asarray(REFERENCES[case.op](*wide, **case.attrs))


def _to_tensors(case: OpCase, arrays: list[np.ndarray], dtype: str) -> list[pib.Tensor]:
    return [pib.tensor(a, dtype=dtype if a.dtype.kind == "f" else None) for a in arrays]


async def check_forward(case: OpCase, dtype: str = "float32") -> dict[str, Any]:
    """Runs the op on the active backend and compares it with the numpy reference."""
    arrays = make_inputs(case, dtype)
    with pib.tidy():
        got = await _call_pib(case, _to_tensors(case, arrays, dtype)).numpy()
    want = reference(case, arrays)
    same_shape = got.shape == want.shape
    diff = got.astype(np.float64) - want.astype(np.float64) if same_shape else np.inf
    err = float(np.max(np.abs(diff), initial=0.0))
    scale = float(np.max(np.abs(want), initial=1.0))
    return {"case": case.name, "shape_ok": same_shape, "max_abs_err": err, "scale": scale}


async def tape_gradients(
    case: OpCase, dtype: str = "float32"
) -> tuple[list[np.ndarray], np.ndarray]:
    """Tape gradients of sum(op(x) * probe) for each float input on the active backend, and the
    probe weights; the probe is seeded, so every backend differentiates the same objective."""
    arrays = make_inputs(case, dtype)
    float_idx = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    probe_rng = np.random.Generator(np.random.PCG64(case.seed + 1000))
    with pib.tidy():
        tensors = _to_tensors(case, arrays, dtype)
        with pib.GradientTape() as tape:
            tape.watch(*tensors)
            out = _call_pib(case, tensors)
            probe = pib.tensor(probe_rng.standard_normal(out.shape), dtype=dtype)
            objective = pib.sum(out * probe)
        grads = tape.gradient(objective, [tensors[i] for i in float_idx])
        analytic = [await g.numpy() for g in grads]
        weights = await probe.numpy()
    return analytic, weights


async def check_gradient(case: OpCase, dtype: str = "float64", eps: float = 1e-6) -> dict[str, Any]:
    """Tape gradients of sum(op(x) * r) against central finite differences of the same op."""
    arrays = make_inputs(case, dtype)
    float_idx = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    analytic, weights = await tape_gradients(case, dtype)

    async def objective_at(values: list[np.ndarray]) -> float:
        with pib.tidy():
            y = await _call_pib(case, _to_tensors(case, values, dtype)).numpy()
        return float(np.sum(y * weights))

    worst = 0.0
    for k, i in enumerate(float_idx):
        numeric = np.zeros_like(arrays[i])
        for pos in np.ndindex(arrays[i].shape):
            plus = [a.copy() for a in arrays]
            minus = [a.copy() for a in arrays]
            plus[i][pos] += eps
            minus[i][pos] -= eps
            numeric[pos] = (await objective_at(plus) - await objective_at(minus)) / (2 * eps)
        scale = max(1.0, float(np.max(np.abs(numeric))))
        worst = max(worst, float(np.max(np.abs(analytic[k] - numeric))) / scale)
    return {"case": case.name, "max_rel_err": worst}


# ---- special values: NaN, +-Inf and +-0 through every elementwise op, activation, reduction
# and fused program, compared by class (NaN / +Inf / -Inf / finite, and the sign of a zero where
# it matters) with numpy computing in float32 (so exp(100) is +Inf there too).

SPECIAL_VALUES = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.5, 0.5, 100.0, -100.0)
# Rows of a reduction input: finite, one NaN, +Inf, -Inf, +Inf and -Inf, NaN among infinities,
# all -Inf, signed zeros.
SPECIAL_ROWS = (
    (1.0, 2.0, -3.0, 4.0),
    (1.0, np.nan, 3.0, 4.0),
    (1.0, np.inf, 3.0, 4.0),
    (-np.inf, 2.0, 3.0, -4.0),
    (np.inf, -np.inf, 1.0, 2.0),
    (np.nan, np.inf, -np.inf, 0.0),
    (-np.inf, -np.inf, -np.inf, -np.inf),
    (-0.0, 0.0, -0.0, -0.0),
)
# Long rows (past the GPU backends' split and tree reductions) with a special value near the end.
SPECIAL_LONG = (5, 9000)


def special_inputs(case: OpCase) -> list[np.ndarray]:
    """Float32 inputs of a special-value case. Kinds: "values" (SPECIAL_VALUES along the last
    axis), "values_t" (along the first: with "values" on a square, every pair of values), "rows"
    (SPECIAL_ROWS), "long" (normal values, then per row: none, a NaN, +Inf, -Inf, both Infs),
    "halves" (multiples of 0.5 in [-2, 2]: with "values", products and short sums are exact in
    float32, so any summation order gives numpy's result), "bool" and "normal" as make_inputs."""
    rng = np.random.Generator(np.random.PCG64(case.seed))
    values = np.array(SPECIAL_VALUES, np.float32)
    arrays: list[np.ndarray] = []
    for shape, kind in zip(case.shapes, _kinds(case), strict=True):
        if kind == "values":
            arrays.append(np.resize(values, shape))
        elif kind == "values_t":
            arrays.append(np.resize(values, shape[::-1]).T.copy())
        elif kind == "rows":
            arrays.append(np.array(SPECIAL_ROWS, np.float32).reshape(shape))
        elif kind == "long":
            long = rng.standard_normal(shape).astype(np.float32)
            for row, value in enumerate((None, np.nan, np.inf, -np.inf)):
                if value is not None:
                    long[row, -7] = value
            long[4, 11], long[4, -3] = np.inf, -np.inf
            arrays.append(long)
        elif kind == "bool":
            arrays.append(rng.uniform(size=shape) < 0.5)
        elif kind == "halves":
            arrays.append((rng.integers(-4, 5, shape) / 2).astype(np.float32))
        else:
            arrays.append(rng.standard_normal(shape).astype(np.float32))
    return arrays


def _special(name: str, op: str, shapes: Any, kinds: Any, attrs: Any = None) -> OpCase:
    return OpCase(name, op, tuple(shapes), attrs or {}, kinds=tuple(kinds), grad=False)


_UNARY_SPECIAL = (
    "neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "erf",
    "abs", "square", "leaky_relu", "gelu",
)  # fmt: skip
_BINARY_SPECIAL = (
    "add", "sub", "mul", "div", "pow", "maximum", "minimum",
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal",
)  # fmt: skip
_PAIRS = ((10, 10), (10, 10))
SPECIAL_CASES: list[OpCase] = [
    *(_special(f"special_{op}", op, [(2, 10)], ["values"]) for op in _UNARY_SPECIAL),
    *(_special(f"special_{op}", op, _PAIRS, ["values_t", "values"]) for op in _BINARY_SPECIAL),
    _special("special_where", "where", [(10, 10), *_PAIRS], ["bool", "values_t", "values"]),
    _special("special_cast_bool", "cast", [(10,)], ["values"], {"dtype": "bool"}),
    _special(
        "special_fused_every_op",
        "fused",
        [(10, 10), (10, 10), (), (10, 10)],
        ["values_t", "values", "normal", "bool"],
        {"program": "every_op"},
    ),
    _special("special_softmax", "softmax", [(8, 4)], ["rows"]),
    _special("special_max_pool2d", "max_pool2d", [(1, 4, 4, 2)], ["rows"], {"pool_size": 2}),
    # NaN and +-Inf in the input, then in the filters (each of the ten filters one special value
    # at every tap) over "same" padding, whose zeros are multiplied in: an infinite filter over
    # padding gives NaN there, as numpy's padded reference does.
    _special(
        "special_depthwise_input",
        "depthwise_conv2d",
        [(1, 5, 4, 5), (3, 3, 5, 1)],
        ["values", "halves"],
        {"padding": "same"},
    ),
    _special(
        "special_depthwise_filters",
        "depthwise_conv2d",
        [(1, 5, 6, 2), (3, 3, 2, 5)],
        ["halves", "values"],
        {"padding": "same", "strides": 2},
    ),
    _special("special_max_pool2d_4ch", "max_pool2d", [(1, 4, 2, 4)], ["rows"], {"pool_size": 2}),
]
for _axis in (-1, 0):
    SPECIAL_CASES += [
        _special(f"special_{op}_axis{_axis}", op, [(8, 4)], ["rows"], {"axis": _axis})
        for op in ("sum", "mean", "max", "min", "argmax")
    ]
SPECIAL_CASES += [
    _special(f"special_{op}_long", op, [SPECIAL_LONG], ["long"], {"axis": -1})
    for op in ("sum", "max", "argmax")
]


def _ref_max_pool_propagating(x: np.ndarray, pool_size: int) -> np.ndarray:
    """Valid max pooling where a NaN in a window wins, as numpy's max (the table's pool
    reference ignores NaN to model padding)."""
    n, h, w, c = x.shape
    windows = x.reshape(n, h // pool_size, pool_size, w // pool_size, pool_size, c)
    return np.max(windows, axis=(2, 4))


def special_reference(case: OpCase, arrays: list[np.ndarray]) -> np.ndarray:
    """numpy's answer in float32, where overflow and the special values behave as on a GPU."""
    with np.errstate(all="ignore"):
        if case.op == "max_pool2d":
            return _ref_max_pool_propagating(arrays[0], case.attrs["pool_size"])
        if case.op == "fused":
            program = FUSED_PROGRAMS[case.attrs["program"]]
            return np.asarray(program(_NUMPY_OPS, *arrays), np.float32)
        return np.asarray(REFERENCES[case.op](*arrays, **case.attrs))


# Ops whose zero results keep numpy's sign (IEEE arithmetic defines it, and 1 / x shows it);
# the activations', reductions' and maximum's zero signs are not compared (numpy's own
# maximum(0.0, -0.0) differs between CPython's and Pyodide's builds).
SIGNED_ZERO_OPS = ("neg", "add", "sub", "mul", "div", "sqrt", "pow", "where", "fused")


def _value_class(x: np.ndarray, signed_zero: bool) -> np.ndarray:
    negative_zero = (x == 0) & np.signbit(x) & signed_zero
    return np.select(
        [np.isnan(x), x == np.inf, x == -np.inf, negative_zero],
        ["NaN", "+Inf", "-Inf", "-0"],
        "finite",
    )


def special_mismatches(case: OpCase, got: Any, want: np.ndarray, rtol: float = 1e-5) -> list[str]:
    """Where `got` differs from numpy's `want` in class (NaN / +Inf / -Inf / finite, and -0 for
    SIGNED_ZERO_OPS), or, where both are finite, by more than rtol relative (atol rtol). Empty
    when they agree."""
    got_array = np.asarray(got, dtype=np.float64)
    want64 = np.asarray(want, dtype=np.float64)
    if got_array.shape != want64.shape:
        return [f"{case.name}: shape {got_array.shape} != {want64.shape}"]
    signed_zero = case.op in SIGNED_ZERO_OPS
    got_class, want_class = _value_class(got_array, signed_zero), _value_class(want64, signed_zero)
    finite = (got_class == "finite") & (want_class == "finite")
    with np.errstate(invalid="ignore"):
        far = finite & ~(np.abs(got_array - want64) <= rtol * (1.0 + np.abs(want64)))
    wrong = (got_class != want_class) | far
    inputs = special_inputs(case)
    return [
        f"{case.name}{tuple(int(i) for i in index)}: inputs "
        f"{[float(a[index]) for a in inputs if a.shape == want.shape]} gave "
        f"{float(got_array[index])}, numpy {float(want64[index])}"
        for index in zip(*np.nonzero(wrong), strict=True)
    ]


async def run_special_case(case: OpCase) -> np.ndarray:
    """The special-value case's result on the active backend."""
    arrays = special_inputs(case)
    with pib.tidy():
        out: np.ndarray = await _call_pib(case, _to_tensors(case, arrays, "float32")).numpy()
    return out


# ---- accuracy of long sums: a BatchNorm statistic over 524,288 elements per channel.
LONG_SUM_SHAPE = (8, 256, 256, 2)


async def long_sum_relative_errors() -> dict[str, float]:
    """Worst relative error of sum and variance over axes (0, 1, 2) of LONG_SUM_SHAPE on the
    active backend, against numpy in float64 (positive terms: errors cannot cancel)."""
    rng = np.random.Generator(np.random.PCG64(7))
    x = rng.uniform(0.5, 1.5, LONG_SUM_SHAPE).astype(np.float32)
    axes = (0, 1, 2)
    with pib.tidy():
        t = pib.tensor(x)
        got_sum = await pib.sum(t, axis=axes).numpy()
        got_variance = await pib.variance(t, axis=axes).numpy()
    wide = x.astype(np.float64)
    want_sum, want_variance = wide.sum(axis=axes), wide.var(axis=axes)
    return {
        "sum": float(np.max(np.abs(got_sum - want_sum) / want_sum)),
        "variance": float(np.max(np.abs(got_variance - want_variance) / want_variance)),
    }
