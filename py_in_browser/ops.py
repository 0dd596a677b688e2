"""The op table: one entry per primitive with its shape/dtype rule and its gradient (VJP) in ops.

Every backend implements exactly these primitives; everything else (broadcasting binary ops,
softmax, log_softmax, mean, variance, gelu, losses, ...) is composed from them in functional.py.

Primitives (41):
  unary float     neg exp log sqrt tanh sigmoid relu erf
  binary (same shape and dtype)   add sub mul div pow maximum
  compare -> bool less less_equal equal not_equal
  select          where(cond, a, b)
  fused           fused(program): a program of the elementwise ops above as one kernel, over
                  inputs of one shape or scalars (fusion.py; optimizers update with it)
  dtype           cast(dtype)
  layout          expand(shape) reshape(shape) transpose(perm) slice(begin, size)
                  pad(paddings, value) concat(axis)
  reductions      reduce_sum(axes, keepdims) reduce_max(axes, keepdims) argmax(axis)
  linear algebra  matmul(transpose_a, transpose_b)  (batched, equal batch dims)
  convolution     conv2d conv2d_backprop_input conv2d_backprop_filter  (NHWC, filters HWIO,
                  strides, explicit pads ((top, bottom), (left, right)))
                  depthwise_conv2d (NHWC, filters HWCM: each input channel c has M filters of
                  its own, output channel c*M + m; strides, explicit pads; its VJP is itself)
  pooling         max_pool2d max_pool2d_grad avg_pool2d avg_pool2d_grad (pool_size, strides, pads)
  random          random_uniform(counter; shape, seed, stream, bits): float32 in [0, 1) hashed
                  from (seed, stream, counter, element index), the same bits on every backend
                  (backends/counter_hash.py); the counter is a device scalar, so a recorded step
                  that advances it draws new numbers on each replay
  images          affine_sample(images, params; size): per image, a 2x3 affine map of the output
                  grid into the input plus a gain and offset on the values, bilinear sampling
                  with edges clamped (NHWC; params (N, 8); the GPU preprocessing and augmentation)

A VJP receives (g, inputs, output, attrs) and returns, per input, a thunk computing that input's
gradient or None where the op is not differentiable in it; the tape calls only the thunks it
needs, so e.g. the first conv layer never computes a gradient for the images.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from . import fusion

Shape = tuple[int, ...]


class TensorLike(Protocol):
    """What the op table reads of a tensor (tensor.Tensor is one): rules see only shapes and
    dtypes, and VJPs pass tensors on to `call` (see "Running ops" below)."""

    shape: Shape
    dtype: str

    @property
    def ndim(self) -> int: ...


Thunk = Callable[[], TensorLike]
Vjp = Callable[
    [TensorLike, Sequence[TensorLike], TensorLike, dict[str, Any]], Sequence[Thunk | None]
]
Infer = Callable[[Sequence[Shape], Sequence[str], dict[str, Any]], tuple[Shape, str]]

FLOAT = ("float32", "float64")
NUMERIC = (*FLOAT, "int32")
DTYPES = (*NUMERIC, "bool")


@dataclass(frozen=True)
class OpDef:
    """A primitive: arity, attribute names, shape/dtype rule and VJP (None: not differentiable)."""

    name: str
    arity: int
    attrs: tuple[str, ...]
    infer: Infer
    vjp: Vjp | None


OPS: dict[str, OpDef] = {}


def _define(name: str, arity: int, infer: Infer, vjp: Vjp | None, attrs: tuple[str, ...] = ()):
    OPS[name] = OpDef(name, arity, attrs, infer, vjp)


# ---- running ops -------------------------------------------------------------------------------
# The VJPs below run ops on tensors, but tensors live in tensor.py, which sits above this table
# (it checks every op against it). Rather than import upward, the table runs ops through the
# executor tensor.py registers when it is imported, the way the backends register their kernels
# in backends.KERNELS. Passing an executor into every VJP would do the same with more plumbing;
# moving apply_op below the table is impossible (it checks ops against the table). No VJP can run
# before the registration: VJPs only ever receive tensors.


@dataclass(frozen=True)
class Executor:
    """How the op table runs a primitive on tensors and makes a constant tensor."""

    apply_op: Callable[[str, Sequence[Any], dict[str, Any]], TensorLike]
    full: Callable[[Sequence[int], float, str], TensorLike]


_executor: Executor | None = None


def register_executor(executor: Executor) -> None:
    """Called once by tensor.py; the table's `call` and `full` run through it."""
    global _executor
    _executor = executor


def _running() -> Executor:
    if _executor is None:
        raise RuntimeError("no executor registered: import py_in_browser (tensor.py registers it)")
    return _executor


def call(op: str, *inputs: TensorLike, **attrs: Any) -> TensorLike:
    """Runs primitive `op` on tensors; the entry point of the VJPs and the tape."""
    return _running().apply_op(op, inputs, attrs)


def full(shape: Sequence[int], value: float, dtype: str) -> TensorLike:
    """A constant tensor of `shape` (a VJP's zeros, the tape's seed gradient)."""
    return _running().full(shape, value, dtype)


def _full_like(t: TensorLike, value: float) -> TensorLike:
    return full(t.shape, value, t.dtype)


def _need_dtype(op: str, dtypes: Sequence[str], allowed: Sequence[str]) -> None:
    for i, dt in enumerate(dtypes):
        if dt not in allowed:
            raise TypeError(f"{op}: input {i} has dtype {dt}; expected one of {list(allowed)}")
    if len(set(dtypes)) > 1:
        raise TypeError(f"{op}: inputs must share a dtype, got {list(dtypes)}")


def _same_shapes(op: str, shapes: Sequence[Shape]) -> None:
    if any(s != shapes[0] for s in shapes):
        raise ValueError(
            f"{op}: primitive needs equal shapes, got {[tuple(s) for s in shapes]} "
            f"(pib.{op} broadcasts; this is the primitive)"
        )


# ---- elementwise -------------------------------------------------------------------------------


def _unary_rule(allowed: Sequence[str]) -> Infer:
    def infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
        _need_dtype("unary op", dtypes, allowed)
        return tuple(shapes[0]), dtypes[0]

    return infer


def _binary_rule(name: str, allowed: Sequence[str], out_dtype: str | None = None) -> Infer:
    def infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
        _need_dtype(name, dtypes, allowed)
        _same_shapes(name, shapes)
        return tuple(shapes[0]), out_dtype or dtypes[0]

    return infer


_define("neg", 1, _unary_rule(NUMERIC), lambda g, xs, y, a: [lambda: call("neg", g)])
_define("exp", 1, _unary_rule(FLOAT), lambda g, xs, y, a: [lambda: call("mul", g, y)])
_define("log", 1, _unary_rule(FLOAT), lambda g, xs, y, a: [lambda: call("div", g, xs[0])])
_define(
    "sqrt", 1, _unary_rule(FLOAT), lambda g, xs, y, a: [lambda: call("div", g, call("add", y, y))]
)
# The activations' gradients are one fused program each (one GPU kernel instead of two or
# three, and differentiable again through the fused VJP): d tanh = 1 - y^2, d sigmoid = y - y^2,
# d relu = [y > 0]. They run in every training step, so GPU backends compile them at start-up.
_TANH_GRAD = fusion.trace(lambda g, y: g - g * (y * y), 2)
_SIGMOID_GRAD = fusion.trace(lambda g, y: g * (y - y * y), 2)
_RELU_GRAD = fusion.trace(lambda g, x: fusion.where(fusion.less(0.0, x), g, 0.0), 2)
for _program in (_TANH_GRAD, _SIGMOID_GRAD, _RELU_GRAD):
    fusion.register_common(_program, ("full", "full"), typical=_program is _RELU_GRAD)

_define(
    "tanh",
    1,
    _unary_rule(FLOAT),
    lambda g, xs, y, a: [lambda: call("fused", g, y, program=_TANH_GRAD)],
)
_define(
    "sigmoid",
    1,
    _unary_rule(FLOAT),
    lambda g, xs, y, a: [lambda: call("fused", g, y, program=_SIGMOID_GRAD)],
)


def _relu_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    # 0 < relu(x) exactly where 0 < x (NaN too): reading y lets x go once relu ran (on webgl2 a
    # layer's x is then never drawn: its bias and relu land in one pass, epilogues.py).
    return [lambda: call("fused", g, y, program=_RELU_GRAD)]


_define("relu", 1, _unary_rule(NUMERIC), _relu_vjp)


def _erf_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    def dx() -> TensorLike:
        x = xs[0]
        bell = call("exp", call("neg", call("mul", x, x)))
        return call("mul", g, call("mul", bell, _full_like(x, 1.1283791670955126)))  # 2/sqrt(pi)

    return [dx]


_define("erf", 1, _unary_rule(FLOAT), _erf_vjp)

_define("add", 2, _binary_rule("add", NUMERIC), lambda g, xs, y, a: [lambda: g, lambda: g])
_define(
    "sub",
    2,
    _binary_rule("sub", NUMERIC),
    lambda g, xs, y, a: [lambda: g, lambda: call("neg", g)],
)
_define(
    "mul",
    2,
    _binary_rule("mul", NUMERIC),
    lambda g, xs, y, a: [lambda: call("mul", g, xs[1]), lambda: call("mul", g, xs[0])],
)
_define(
    "div",
    2,
    _binary_rule("div", FLOAT),
    lambda g, xs, y, a: [
        lambda: call("div", g, xs[1]),
        lambda: call("neg", call("div", call("mul", g, y), xs[1])),
    ],
)


def _pow_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    base, exponent = xs

    def d_base() -> TensorLike:
        lowered = call("pow", base, call("sub", exponent, _full_like(exponent, 1.0)))
        return call("mul", g, call("mul", exponent, lowered))

    return [d_base, lambda: call("mul", g, call("mul", y, call("log", base)))]


_define("pow", 2, _binary_rule("pow", FLOAT), _pow_vjp)


def _maximum_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    # Ties send the gradient to the second input, so relu-as-maximum(x, 0) has 0 slope at 0.
    def pick(first: bool) -> TensorLike:
        zeros = _full_like(g, 0.0)
        a_wins = call("less", xs[1], xs[0])
        return call("where", a_wins, g, zeros) if first else call("where", a_wins, zeros, g)

    return [lambda: pick(True), lambda: pick(False)]


_define("maximum", 2, _binary_rule("maximum", NUMERIC), _maximum_vjp)

for _cmp in ("less", "less_equal", "equal", "not_equal"):
    _define(_cmp, 2, _binary_rule(_cmp, DTYPES, out_dtype="bool"), None)


def _where_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    if dtypes[0] != "bool":
        raise TypeError(f"where: condition must be bool, got {dtypes[0]}")
    _need_dtype("where", dtypes[1:], DTYPES)
    _same_shapes("where", shapes)
    return tuple(shapes[0]), dtypes[1]


def _where_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    cond = xs[0]
    return [
        None,
        lambda: call("where", cond, g, _full_like(g, 0.0)),
        lambda: call("where", cond, _full_like(g, 0.0), g),
    ]


_define("where", 3, _where_infer, _where_vjp)


def _fused_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    """Per float input, the fused program g * d(result)/d(input) (fusion.vjp_program), summed to
    () for a scalar input read at every element; so gradients of gradients work as well. Each is
    derived only when the tape asks for that input (losses never differentiate their targets);
    an input reaching the result only through comparisons gets zeros."""
    kinds = tuple("bool" if x.dtype == "bool" else "float" for x in xs)

    def thunk(k: int) -> Thunk:
        def gradient() -> TensorLike:
            program = fusion.vjp_program(a["program"], kinds, k)
            if program is None:
                return _full_like(xs[k], 0.0)
            compact, used = fusion.used_inputs(program)
            grad = call("fused", *[(*xs, g)[i] for i in used], program=compact)
            if xs[k].shape == () and grad.shape != ():
                return call("reduce_sum", grad, axes=tuple(range(grad.ndim)), keepdims=False)
            return grad

        return gradient

    return [None if kind == "bool" else thunk(k) for k, kind in enumerate(kinds)]


_define(
    "fused",
    -1,
    lambda shapes, dtypes, attrs: fusion.infer(attrs["program"], shapes, dtypes),
    _fused_vjp,
    ("program",),
)


def _cast_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    if attrs["dtype"] not in DTYPES:
        raise TypeError(f"cast: dtype must be one of {list(DTYPES)}, got {attrs['dtype']!r}")
    return tuple(shapes[0]), attrs["dtype"]


def _cast_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    if xs[0].dtype in FLOAT and y.dtype in FLOAT:
        return [lambda: call("cast", g, dtype=xs[0].dtype)]
    return [None]


_define("cast", 1, _cast_infer, _cast_vjp, ("dtype",))

# ---- layout ------------------------------------------------------------------------------------


def _expand_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    src, dst = tuple(shapes[0]), tuple(attrs["shape"])
    ok = len(src) == len(dst) and all(s in (1, d) for s, d in zip(src, dst, strict=True))
    if not ok:
        raise ValueError(f"expand: cannot broadcast shape {src} to {dst} (ranks must match)")
    return dst, dtypes[0]


def _expand_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    # Un-broadcasting, written once: sum over every axis that expand stretched.
    axes = tuple(
        i for i, (s, d) in enumerate(zip(xs[0].shape, y.shape, strict=True)) if s == 1 and d != 1
    )
    return [lambda: call("reduce_sum", g, axes=axes, keepdims=True) if axes else g]


_define("expand", 1, _expand_infer, _expand_vjp, ("shape",))


def _reshape_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    src, dst = tuple(shapes[0]), tuple(attrs["shape"])
    if _numel(src) != _numel(dst) or any(d < 0 for d in dst):
        raise ValueError(f"reshape: cannot reshape {src} ({_numel(src)} elements) to {dst}")
    return dst, dtypes[0]


_define(
    "reshape",
    1,
    _reshape_infer,
    lambda g, xs, y, a: [lambda: call("reshape", g, shape=xs[0].shape)],
    ("shape",),
)


def _transpose_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(len(shapes[0]))):
        raise ValueError(f"transpose: perm {perm} is not a permutation of {len(shapes[0])} axes")
    return tuple(shapes[0][p] for p in perm), dtypes[0]


def _transpose_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    inverse = tuple(sorted(range(len(a["perm"])), key=lambda i: a["perm"][i]))
    return [lambda: call("transpose", g, perm=inverse)]


_define("transpose", 1, _transpose_infer, _transpose_vjp, ("perm",))


def _slice_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    shape, begin, size = tuple(shapes[0]), tuple(attrs["begin"]), tuple(attrs["size"])
    ok = len(begin) == len(size) == len(shape) and all(
        b >= 0 and s >= 0 and b + s <= n for b, s, n in zip(begin, size, shape, strict=True)
    )
    if not ok:
        raise ValueError(f"slice: begin {begin} size {size} do not fit in shape {shape}")
    return size, dtypes[0]


def _slice_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    pads = tuple((b, n - b - s) for b, s, n in zip(a["begin"], a["size"], xs[0].shape, strict=True))
    return [lambda: call("pad", g, paddings=pads, value=0.0)]


_define("slice", 1, _slice_infer, _slice_vjp, ("begin", "size"))


def _pad_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    shape, pads = tuple(shapes[0]), tuple(tuple(p) for p in attrs["paddings"])
    if len(pads) != len(shape) or any(len(p) != 2 or min(p) < 0 for p in pads):
        raise ValueError(f"pad: paddings {pads} must be one (before, after) >= 0 pair per axis")
    return tuple(n + p[0] + p[1] for n, p in zip(shape, pads, strict=True)), dtypes[0]


def _pad_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    begin = tuple(p[0] for p in a["paddings"])
    return [lambda: call("slice", g, begin=begin, size=xs[0].shape)]


_define("pad", 1, _pad_infer, _pad_vjp, ("paddings", "value"))


def _concat_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    axis = attrs["axis"]
    first = tuple(shapes[0])
    for s in shapes:
        if len(s) != len(first) or any(
            d != e for i, (d, e) in enumerate(zip(s, first, strict=True)) if i != axis
        ):
            raise ValueError(f"concat: shapes {[tuple(x) for x in shapes]} differ off axis {axis}")
    _need_dtype("concat", dtypes, DTYPES)
    out = list(first)
    out[axis] = sum(s[axis] for s in shapes)
    return tuple(out), dtypes[0]


def _concat_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    axis, offset, thunks = a["axis"], 0, []
    for x in xs:
        begin = tuple(offset if i == axis else 0 for i in range(len(x.shape)))
        thunks.append(lambda b=begin, s=x.shape: call("slice", g, begin=b, size=s))
        offset += x.shape[axis]
    return thunks


OPS["concat"] = OpDef("concat", -1, ("axis",), _concat_infer, _concat_vjp)

# ---- reductions --------------------------------------------------------------------------------


def _kept_shape(shape: Shape, axes: Sequence[int]) -> Shape:
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _reduce_infer(name: str, allowed: Sequence[str]) -> Infer:
    def infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
        _need_dtype(name, dtypes, allowed)
        shape, axes = tuple(shapes[0]), tuple(attrs["axes"])
        if any(not 0 <= ax < len(shape) for ax in axes) or len(set(axes)) != len(axes):
            raise ValueError(f"{name}: axes {axes} invalid for shape {shape}")
        if attrs["keepdims"]:
            return _kept_shape(shape, axes), dtypes[0]
        return tuple(n for i, n in enumerate(shape) if i not in axes), dtypes[0]

    return infer


def _reduce_sum_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    kept = _kept_shape(xs[0].shape, a["axes"])
    return [lambda: call("expand", call("reshape", g, shape=kept), shape=xs[0].shape)]


def _reduce_max_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    # Ties share the gradient equally (as torch.amax does).
    def dx() -> TensorLike:
        x = xs[0]
        kept = _kept_shape(x.shape, a["axes"])
        peak = call("expand", call("reshape", y, shape=kept), shape=x.shape)
        mask = call("cast", call("equal", x, peak), dtype=x.dtype)
        count = call("reduce_sum", mask, axes=a["axes"], keepdims=True)
        share = call("div", call("reshape", g, shape=kept), count)
        return call("mul", mask, call("expand", share, shape=x.shape))

    return [dx]


_define(
    "reduce_sum", 1, _reduce_infer("reduce_sum", NUMERIC), _reduce_sum_vjp, ("axes", "keepdims")
)
_define(
    "reduce_max", 1, _reduce_infer("reduce_max", NUMERIC), _reduce_max_vjp, ("axes", "keepdims")
)


def _argmax_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    shape, axis = tuple(shapes[0]), attrs["axis"]
    if not 0 <= axis < len(shape) or shape[axis] == 0:
        raise ValueError(f"argmax: axis {axis} invalid for shape {shape}")
    return tuple(n for i, n in enumerate(shape) if i != axis), "int32"


_define("argmax", 1, _argmax_infer, None, ("axis",))

# ---- matmul ------------------------------------------------------------------------------------


def _matmul_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    _need_dtype("matmul", dtypes, FLOAT)
    a, b = tuple(shapes[0]), tuple(shapes[1])
    if len(a) < 2 or len(a) != len(b) or a[:-2] != b[:-2]:
        raise ValueError(f"matmul: primitive needs rank >= 2 and equal batch dims, got {a} @ {b}")
    m, k = (a[-1], a[-2]) if attrs["transpose_a"] else (a[-2], a[-1])
    k2, n = (b[-1], b[-2]) if attrs["transpose_b"] else (b[-2], b[-1])
    if k != k2:
        raise ValueError(f"matmul: inner dimensions differ: {a} @ {b} ({k} vs {k2})")
    return (*a[:-2], m, n), dtypes[0]


def _matmul_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, at: dict[str, Any]):
    a, b = xs
    ta, tb = at["transpose_a"], at["transpose_b"]

    def da() -> TensorLike:
        if ta:
            return call("matmul", b, g, transpose_a=tb, transpose_b=True)
        return call("matmul", g, b, transpose_a=False, transpose_b=not tb)

    def db() -> TensorLike:
        if tb:
            return call("matmul", g, a, transpose_a=True, transpose_b=ta)
        return call("matmul", a, g, transpose_a=not ta, transpose_b=False)

    return [da, db]


_define("matmul", 2, _matmul_infer, _matmul_vjp, ("transpose_a", "transpose_b"))

# ---- convolution and pooling (NHWC) ------------------------------------------------------------


def window_out(size: int, window: int, stride: int, pad: tuple[int, int]) -> int:
    """Output length of a strided window over `size` with explicit padding."""
    return (size + pad[0] + pad[1] - window) // stride + 1


def _spatial_out(x: Shape, window: Sequence[int], attrs: dict[str, Any], op: str) -> Shape:
    if len(x) != 4:
        raise ValueError(f"{op}: input must be NHWC (rank 4), got shape {x}")
    (sh, sw), (ph, pw) = attrs["strides"], attrs["pads"]
    oh, ow = window_out(x[1], window[0], sh, ph), window_out(x[2], window[1], sw, pw)
    if oh < 1 or ow < 1:
        raise ValueError(f"{op}: window {tuple(window)} is larger than padded input {x}")
    return (x[0], oh, ow)


def _conv_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    _need_dtype("conv2d", dtypes, FLOAT)
    x, w = tuple(shapes[0]), tuple(shapes[1])
    if len(w) != 4 or len(x) != 4 or w[2] != x[3]:
        raise ValueError(f"conv2d: filters must be HWIO with I == input channels; got x {x}, w {w}")
    return (*_spatial_out(x, w[:2], attrs, "conv2d"), w[3]), dtypes[0]


def _conv_input_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    _need_dtype("conv2d_backprop_input", dtypes, FLOAT)
    g, w, x = tuple(shapes[0]), tuple(shapes[1]), tuple(attrs["input_shape"])
    expected = (*_spatial_out(x, w[:2], attrs, "conv2d_backprop_input"), w[3])
    if g != expected or x[3] != w[2]:
        raise ValueError(f"conv2d_backprop_input: gradient {g} does not match {expected}")
    return x, dtypes[0]


def _conv_filter_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    _need_dtype("conv2d_backprop_filter", dtypes, FLOAT)
    x, g, w = tuple(shapes[0]), tuple(shapes[1]), tuple(attrs["filter_shape"])
    expected = (*_spatial_out(x, w[:2], attrs, "conv2d_backprop_filter"), w[3])
    if g != expected or x[3] != w[2]:
        raise ValueError(f"conv2d_backprop_filter: gradient {g} does not match {expected}")
    return w, dtypes[0]


def _geometry(a: dict[str, Any]) -> dict[str, Any]:
    return {"strides": a["strides"], "pads": a["pads"]}


def _conv_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    x, w = xs
    geo = _geometry(a)
    return [
        lambda: call("conv2d_backprop_input", g, w, input_shape=x.shape, **geo),
        lambda: call("conv2d_backprop_filter", x, g, filter_shape=w.shape, **geo),
    ]


def _conv_input_vjp(gg: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    g, w = xs
    geo = _geometry(a)
    return [
        lambda: call("conv2d", gg, w, **geo),
        lambda: call("conv2d_backprop_filter", gg, g, filter_shape=w.shape, **geo),
    ]


def _conv_filter_vjp(gw: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    x, g = xs
    geo = _geometry(a)
    return [
        lambda: call("conv2d_backprop_input", g, gw, input_shape=x.shape, **geo),
        lambda: call("conv2d", x, gw, **geo),
    ]


_define("conv2d", 2, _conv_infer, _conv_vjp, ("strides", "pads"))
_define(
    "conv2d_backprop_input",
    2,
    _conv_input_infer,
    _conv_input_vjp,
    ("input_shape", "strides", "pads"),
)
_define(
    "conv2d_backprop_filter",
    2,
    _conv_filter_infer,
    _conv_filter_vjp,
    ("filter_shape", "strides", "pads"),
)


# Depthwise convolution: out[n, i, j, c*M + m] = sum over (di, dj) of
# x[n, i*sh + di - top, j*sw + dj - left, c] * w[di, dj, c, m], the padding zeros multiplied in
# (so an infinite filter tap over padding gives NaN, as numpy's padded reference does).
# Its VJP is written in other primitives, mostly depthwise_conv2d itself: the input gradient is
# the (stride-dilated, padded) output gradient convolved with the spatially flipped filters; the
# filter gradient is the padded input, batch moved into channels, convolved with the (dilated)
# output gradient as a filter. Every backend then needs one kernel only, and gradients of
# gradients come for free.


def _depthwise_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    _need_dtype("depthwise_conv2d", dtypes, FLOAT)
    x, w = tuple(shapes[0]), tuple(shapes[1])
    if len(w) != 4 or len(x) != 4 or w[2] != x[3]:
        raise ValueError(
            f"depthwise_conv2d: filters must be HWCM with C == input channels; got x {x}, w {w}"
        )
    return (*_spatial_out(x, w[:2], attrs, "depthwise_conv2d"), w[2] * w[3]), dtypes[0]


def _pad_or_crop(t: TensorLike, pairs: Sequence[tuple[int, int]]) -> TensorLike:
    """t padded with zeros by the positive (before, after) counts and cropped by the negative."""
    grow = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
    if any(b or a for b, a in grow):
        t = call("pad", t, paddings=grow, value=0.0)
    begin = tuple(max(-b, 0) for b, _ in pairs)
    size = tuple(n - max(-b, 0) - max(-a, 0) for n, (b, a) in zip(t.shape, pairs, strict=True))
    return call("slice", t, begin=begin, size=size) if tuple(size) != tuple(t.shape) else t


def _dilate(t: TensorLike, strides: Sequence[int]) -> TensorLike:
    """(A, H, W, B) with sh - 1 zero rows after each row and sw - 1 zero columns after each
    column, the last ones cut: ((H - 1) * sh + 1, (W - 1) * sw + 1). Reshapes and pads of rank 3
    only, which every backend lays out alike."""
    a, h, w, b = t.shape
    sh, sw = strides
    if sh > 1:
        t = call("reshape", t, shape=(a * h, 1, w * b))
        t = call("pad", t, paddings=((0, 0), (0, sh - 1), (0, 0)), value=0.0)
        t = call("reshape", t, shape=(a, h * sh, w, b))
    if sw > 1:
        t = call("reshape", t, shape=(a * h * sh * w, 1, b))
        t = call("pad", t, paddings=((0, 0), (0, sw - 1), (0, 0)), value=0.0)
        t = call("reshape", t, shape=(a, h * sh, w * sw, b))
    size = (a, (h - 1) * sh + 1, (w - 1) * sw + 1, b)
    return call("slice", t, begin=(0, 0, 0, 0), size=size) if size != tuple(t.shape) else t


def _flip_hw(w: TensorLike) -> TensorLike:
    """Filters (KH, KW, ...) reversed along both spatial axes, by slices and one concat per axis
    (the table has no reverse; filters are small)."""
    for axis in (0, 1):
        n = w.shape[axis]
        if n > 1:
            size = tuple(1 if i == axis else d for i, d in enumerate(w.shape))
            parts = [
                call(
                    "slice", w, begin=tuple(k if i == axis else 0 for i in range(w.ndim)), size=size
                )
                for k in reversed(range(n))
            ]
            w = call("concat", *parts, axis=axis)
    return w


def _depthwise_dx(g: TensorLike, w: TensorLike, x_shape: Shape, a: dict[str, Any]) -> TensorLike:
    n, h, wd, c = x_shape
    kh, kw, _, m = w.shape
    (pt, _), (pl, _) = a["pads"]
    _, oh, ow, _ = g.shape
    (sh, sw) = a["strides"]
    # dx[i] = sum over di of g_dilated[i + top - di] * w[di]: a valid correlation of g_dilated,
    # padded by KH - 1 - top before and up to the input's height after, with the flipped filters.
    gd = _dilate(g, (sh, sw))
    rows = (kh - 1 - pt, h + pt - 1 - (oh - 1) * sh)
    cols = (kw - 1 - pl, wd + pl - 1 - (ow - 1) * sw)
    gp = _pad_or_crop(gd, ((0, 0), rows, cols, (0, 0)))
    # Each of the C*M gradient channels has the one flipped filter of its (c, m).
    wf = call("reshape", _flip_hw(w), shape=(kh, kw, c * m, 1))
    dx = call("depthwise_conv2d", gp, wf, strides=(1, 1), pads=((0, 0), (0, 0)))
    if m > 1:
        dx = call(
            "reduce_sum", call("reshape", dx, shape=(n, h, wd, c, m)), axes=(4,), keepdims=False
        )
    return dx


def _depthwise_dw(x: TensorLike, g: TensorLike, w_shape: Shape, a: dict[str, Any]) -> TensorLike:
    n, h, wd, c = x.shape
    kh, kw, _, m = w_shape
    (pt, _), (pl, _) = a["pads"]
    _, oh, ow, _ = g.shape
    (sh, sw) = a["strides"]
    # dw[di, dj, c, m] = sum over (n, i, j) of x_padded[n, di + i*sh, dj + j*sw, c] *
    # g[n, i, j, c*M + m]: a valid depthwise convolution of x_padded, with the batch as channels
    # (n*C + c), by the dilated gradient as filters ((OH-1)*sh+1, (OW-1)*sw+1, N*C, M); its
    # KH x KW output, summed over n, is dw. Rows the strides never reach at the bottom/right are
    # cropped.
    xt = x if n == 1 else call("transpose", x, perm=(1, 2, 0, 3))
    xt = call("reshape", xt, shape=(1, h, wd, n * c))
    rows = (pt, kh + (oh - 1) * sh - h - pt)
    cols = (pl, kw + (ow - 1) * sw - wd - pl)
    xp = _pad_or_crop(xt, ((0, 0), rows, cols, (0, 0)))
    gt = g if n == 1 else call("transpose", g, perm=(1, 2, 0, 3))
    gf = _dilate(call("reshape", gt, shape=(1, oh, ow, n * c * m)), (sh, sw))
    gf = call("reshape", gf, shape=(*gf.shape[1:3], n * c, m))
    dw = call("depthwise_conv2d", xp, gf, strides=(1, 1), pads=((0, 0), (0, 0)))
    if n == 1:
        return call("reshape", dw, shape=(kh, kw, c, m))
    dw = call("reshape", dw, shape=(kh, kw, n, c, m))
    return call("reduce_sum", dw, axes=(2,), keepdims=False)


def _depthwise_vjp(g: TensorLike, xs: Sequence[TensorLike], y: TensorLike, a: dict[str, Any]):
    x, w = xs
    return [lambda: _depthwise_dx(g, w, x.shape, a), lambda: _depthwise_dw(x, g, w.shape, a)]


_define("depthwise_conv2d", 2, _depthwise_infer, _depthwise_vjp, ("strides", "pads"))


def _pool_infer(name: str) -> Infer:
    def infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
        _need_dtype(name, dtypes, FLOAT)
        x = tuple(shapes[0])
        return (*_spatial_out(x, attrs["pool_size"], attrs, name), x[3]), dtypes[0]

    return infer


def _pool_grad_infer(name: str, input_from_attr: bool) -> Infer:
    def infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
        _need_dtype(name, dtypes, FLOAT)
        x = tuple(attrs["input_shape"]) if input_from_attr else tuple(shapes[0])
        g = tuple(shapes[-1])
        expected = (*_spatial_out(x, attrs["pool_size"], attrs, name), x[3])
        if g != expected:
            raise ValueError(f"{name}: gradient {g} does not match pooled shape {expected}")
        return x, dtypes[0]

    return infer


def _pool_attrs(a: dict[str, Any]) -> dict[str, Any]:
    return {"pool_size": a["pool_size"], "strides": a["strides"], "pads": a["pads"]}


_define(
    "max_pool2d",
    1,
    _pool_infer("max_pool2d"),
    lambda g, xs, y, a: [lambda: call("max_pool2d_grad", xs[0], g, **_pool_attrs(a))],
    ("pool_size", "strides", "pads"),
)
# Second derivatives through max pooling are not needed by any layer or optimizer here.
_define(
    "max_pool2d_grad",
    2,
    _pool_grad_infer("max_pool2d_grad", False),
    None,
    ("pool_size", "strides", "pads"),
)
_define(
    "avg_pool2d",
    1,
    _pool_infer("avg_pool2d"),
    lambda g, xs, y, a: [
        lambda: call("avg_pool2d_grad", g, input_shape=xs[0].shape, **_pool_attrs(a))
    ],
    ("pool_size", "strides", "pads"),
)
# avg_pool2d_grad is the transpose of the linear map avg_pool2d, so its VJP is avg_pool2d.
_define(
    "avg_pool2d_grad",
    1,
    _pool_grad_infer("avg_pool2d_grad", True),
    lambda g, xs, y, a: [lambda: call("avg_pool2d", g, **_pool_attrs(a))],
    ("input_shape", "pool_size", "strides", "pads"),
)


# ---- random numbers ----------------------------------------------------------------------------


def _random_uniform_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    if tuple(shapes[0]) != () or dtypes[0] not in ("float32", "int32"):
        raise TypeError(
            f"random_uniform: the counter must be a float32 or int32 scalar holding an integer in "
            f"[0, 2^24), got shape {tuple(shapes[0])} dtype {dtypes[0]}"
        )
    shape = tuple(attrs["shape"])
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise ValueError(f"random_uniform: shape must be non-negative ints, got {shape}")
    for name in ("seed", "stream"):
        value = attrs[name]
        if not isinstance(value, int) or not 0 <= value < 2**32:
            raise ValueError(f"random_uniform: {name} must be an int in [0, 2^32), got {value!r}")
    bits = attrs["bits"]
    if not isinstance(bits, int) or not 1 <= bits <= 24:
        raise ValueError(f"random_uniform: bits must be an int in [1, 24], got {bits!r}")
    return shape, "float32"


# Random draws have no gradient: the counter only picks which numbers come out.
_define("random_uniform", 1, _random_uniform_infer, None, ("shape", "seed", "stream", "bits"))


# ---- images ------------------------------------------------------------------------------------
# affine_sample(images (N, H, W, C), params (N, 8); size (OH, OW)) -> (N, OH, OW, C), one float
# dtype throughout.
# Row n of params is [a, b, c, d, e, f, gain, offset]. Output pixel (i, j) has its centre at
# normalized coordinates u = (2j + 1) / OW - 1, v = (2i + 1) / OH - 1 (-1..1 across the image);
# it samples the input at x = a u + b v + c, y = d u + e v + f (the same normalized coordinates of
# the input), i.e. at pixel px = ((x + 1) W - 1) / 2, py = ((y + 1) H - 1) / 2, bilinearly with
# px, py clamped to the image (edge pixels repeat outside it), and returns sample * gain + offset.
# Identity params [1, 0, 0, 0, 1, 0, 1, 0] with size (H, W) copy the images; a = -1 mirrors them.
AFFINE_PARAMS = 8


def _affine_sample_infer(shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    _need_dtype("affine_sample", dtypes, FLOAT)
    images, params = tuple(shapes[0]), tuple(shapes[1])
    if len(images) != 4:
        raise ValueError(f"affine_sample: images must be NHWC (rank 4), got shape {images}")
    if params != (images[0], AFFINE_PARAMS):
        raise ValueError(
            f"affine_sample: params must have shape ({images[0]}, {AFFINE_PARAMS}) (one row "
            f"[a, b, c, d, e, f, gain, offset] per image), got {params}"
        )
    size = tuple(attrs["size"])
    if len(size) != 2 or any(not isinstance(d, int) or d < 1 for d in size):
        raise ValueError(f"affine_sample: size must be two positive ints, got {size}")
    if images[1] < 1 or images[2] < 1:
        raise ValueError(f"affine_sample: images must have a pixel to sample, got {images}")
    return (images[0], size[0], size[1], images[3]), dtypes[0]


# Not differentiable: it only feeds data (preprocessing, augmentation) into a model.
_define("affine_sample", 2, _affine_sample_infer, None, ("size",))


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def infer(op: str, shapes: Sequence[Shape], dtypes: Sequence[str], attrs: dict[str, Any]):
    """Checks arity and attributes, then applies the op's shape/dtype rule."""
    spec = OPS.get(op)
    if spec is None:
        raise ValueError(f"unknown primitive {op!r}; primitives are {sorted(OPS)}")
    if spec.arity >= 0 and len(shapes) != spec.arity:
        raise TypeError(f"{op}: expected {spec.arity} inputs, got {len(shapes)}")
    if set(attrs) != set(spec.attrs):
        raise TypeError(f"{op}: expected attributes {list(spec.attrs)}, got {sorted(attrs)}")
    return spec.infer(shapes, dtypes, attrs)
