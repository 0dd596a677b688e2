"""TensorFlow ops of a graph model as the engine's functions: one handler per TF op (OPS).

A handler runs once, at load (graph_model_convert.py calls it in topological order). It reads the
node's attributes and its constant inputs (shapes, axes, sizes: numpy arrays), checks them, and
returns either the folded values (every input a constant and the op cheap on the host) or a
`Lowered`: a function of the runtime inputs' tensors that computes the node with functional.py
and the op table's primitives, nothing else. Fused ops (_FusedConv2D, _FusedMatMul,
FusedDepthwiseConv2dNative) are split here into their convolution or product, the bias add and
the activation; SAME, VALID and EXPLICIT padding become explicit pads ((top, bottom), (left,
right)) by TensorFlow's rule (functional.resolve_padding). Everything is NHWC, as TF.js stores it.

A handler also says what happens to the batch axis: a graph converted with a fixed batch of 1 runs
any batch when every op keeps axis 0 as the batch (elementwise ops, convolutions, pools, a Reshape
whose target starts with that 1, reductions over other axes); an op that reads across it (an
Unpack or Squeeze of axis 0, a GatherNd naming batch indices) fixes the batch at 1 and says why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import functional as F
from .. import fusion
from ..tensor import Tensor, call, tensor
from .graph_model_format import Node
from .tfjs import FormatError


class ConvertError(FormatError):
    """A graph model the importer refuses; the message names the node(s) and op(s) at fault."""


@dataclass(frozen=True)
class Sym:
    """A value known only at run time: whether its axis 0 is the model's batch axis."""

    batched: bool


Value = np.ndarray | Sym
Run = Callable[..., Tensor | list[Tensor]]


@dataclass(frozen=True)
class Lowered:
    """A node as engine code: `run` receives the tensors of inputs `uses` (in that order; a
    constant input becomes a weight tensor) and returns the node's output(s)."""

    run: Run
    uses: tuple[int, ...]
    batched: tuple[bool, ...]  # per output
    fixes_batch: str | None = None


@dataclass
class Args:
    """What a handler sees of a node: its attributes and its input values."""

    node: Node
    values: list[Value]

    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attrs.get(name, default)

    def const(self, index: int, what: str) -> np.ndarray:
        value = self.values[index]
        if isinstance(value, Sym):
            raise ConvertError(
                f"node {self.node.name!r} ({self.node.op}): its {what} (input {index}) must be a "
                "constant of the graph, not computed at run time"
            )
        return value

    def all_const(self) -> bool:
        return not any(isinstance(v, Sym) for v in self.values)

    def batched(self, index: int) -> bool:
        value = self.values[index]
        return isinstance(value, Sym) and value.batched

    def fail(self, message: str) -> ConvertError:
        return ConvertError(f"node {self.node.name!r} ({self.node.op}): {message}")

    def lower(
        self,
        run: Run,
        uses: Sequence[int] | None = None,
        outputs: int = 1,
        batched: bool | None = None,
        fixes_batch: str | None = None,
    ) -> Lowered:
        """`run` over inputs `uses` (default all); outputs batched when any used input is,
        unless `batched` says otherwise; `fixes_batch` names why batch 1 is required."""
        uses = tuple(range(len(self.values))) if uses is None else tuple(uses)
        if batched is None:
            batched = any(self.batched(i) for i in uses)
        return Lowered(run, uses, (batched,) * outputs, fixes_batch)


Handler = Callable[[Args], "Lowered | list[np.ndarray]"]
OPS: dict[str, Handler] = {}


def _op(*names: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for name in names:
            OPS[name] = handler
        return handler

    return register


# ---- activations (also the fused ops' tails) ---------------------------------------------------


def _relu6(x: Tensor) -> Tensor:
    return F.fused(fusion.relu6, x)


def _elu(x: Tensor) -> Tensor:
    return F.fused(lambda v: fusion.where(fusion.less(0.0, v), v, fusion.exp(v) - 1.0), x)


def _leaky(slope: float) -> Callable[[Tensor], Tensor]:
    return lambda x: F.fused(lambda v: fusion.where(fusion.less(0.0, v), v, v * slope), x)


def _prelu(x: Tensor, alpha: Tensor) -> Tensor:
    return F.add(F.relu(x), F.mul(alpha, F.minimum(x, 0.0)))


_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "Relu": F.relu,
    "Relu6": _relu6,
    "Sigmoid": F.sigmoid,
    "Tanh": F.tanh,
    "Elu": _elu,
}


def _activation(a: Args, name: str) -> Callable[[Tensor, list[Tensor]], Tensor]:
    """A fused op's activation: f(y, extra tensors) (Prelu's alpha is one)."""
    if name in _ACTIVATIONS:
        fn = _ACTIVATIONS[name]
        return lambda y, extra: fn(y)
    if name == "LeakyRelu":
        leaky = _leaky(float(a.attr("leakyrelu_alpha", 0.2)))
        return lambda y, extra: leaky(y)
    if name == "Prelu":
        return lambda y, extra: _prelu(y, extra[0])
    raise a.fail(
        f"fused activation {name!r} is not supported; supported: "
        f"{sorted([*_ACTIVATIONS, 'LeakyRelu', 'Prelu'])}"
    )


def _elementwise(fn: Callable[[Tensor], Tensor]) -> Handler:
    return lambda a: a.lower(fn)


for _name, _fn in _ACTIVATIONS.items():
    OPS[_name] = _elementwise(_fn)


@_op("LeakyRelu")
def _leaky_relu(a: Args) -> Lowered:
    return a.lower(_leaky(float(a.attr("alpha", 0.2))))


@_op("Prelu")
def _prelu_op(a: Args) -> Lowered:
    return a.lower(_prelu)


# ---- elementwise ---------------------------------------------------------------------------------


def _floor_div(x: Tensor, y: Tensor) -> Tensor:
    """floor(x / y); for int32 through a float quotient truncated, then corrected by one where
    the remainder says so (GPU division need not round exactly)."""
    if x.dtype != "int32":
        q = F.div(x, y)
        t = F.cast(F.cast(q, "int32"), x.dtype)
        return F.where(F.less(q, t), F.sub(t, 1.0), t)
    q = F.cast(F.div(F.cast(x, "float32"), F.cast(y, "float32")), "int32")
    r = F.sub(x, F.mul(q, y))
    q = F.where(F.less(F.mul(r, y), 0), F.sub(q, 1), q)  # remainder's sign differs from y's
    r = F.sub(x, F.mul(q, y))
    return F.where(F.greater_equal(F.mul(r, y), F.mul(y, y)), F.add(q, 1), q)


def _np_floor_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.floor_divide(x, y)


# TF op -> (engine function, numpy function for constant folding).
_BINARY: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], Callable[..., np.ndarray]]] = {
    "Add": (F.add, np.add),
    "AddV2": (F.add, np.add),
    "BiasAdd": (F.add, np.add),
    "Sub": (F.sub, np.subtract),
    "Mul": (F.mul, np.multiply),
    "RealDiv": (F.div, np.divide),
    "Div": (F.div, np.divide),
    "FloorDiv": (_floor_div, _np_floor_div),
    "Maximum": (F.maximum, np.maximum),
    "Minimum": (F.minimum, np.minimum),
    "Pow": (F.pow, np.power),
    "SquaredDifference": (lambda x, y: F.square(F.sub(x, y)), lambda x, y: np.square(x - y)),
}


def _binary_handler(fn: Callable[[Tensor, Tensor], Tensor], np_fn: Callable[..., np.ndarray]):
    def handler(a: Args) -> Lowered | list[np.ndarray]:
        if a.node.op == "BiasAdd" and a.attr("data_format", "NHWC") != "NHWC":
            raise a.fail(f"data_format {a.attr('data_format')!r} is not supported (NHWC only)")
        if a.all_const():
            x, y = a.values
            assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
            return [np.asarray(np_fn(x, y)).astype(x.dtype)]
        return a.lower(fn)

    return handler


for _name, (_fn2, _np2) in _BINARY.items():
    OPS[_name] = _binary_handler(_fn2, _np2)

_UNARY: dict[str, Callable[[Tensor], Tensor]] = {
    "Identity": lambda x: x,
    "Snapshot": lambda x: x,
    "StopGradient": F.stop_gradient,
    "Neg": F.neg,
    "Exp": F.exp,
    "Log": F.log,
    "Sqrt": F.sqrt,
    "Rsqrt": lambda x: F.div(1.0, F.sqrt(x)),
    "Square": F.square,
    "Abs": F.abs,
    "Erf": F.erf,
}
for _name, _fn1 in _UNARY.items():
    OPS[_name] = _elementwise(_fn1)


@_op("AddN")
def _add_n(a: Args) -> Lowered:
    def run(*xs: Tensor) -> Tensor:
        total = xs[0]
        for x in xs[1:]:
            total = F.add(total, x)
        return total

    return a.lower(run)


@_op("Cast")
def _cast(a: Args) -> Lowered | list[np.ndarray]:
    dtype = a.attr("DstT")
    if dtype not in ("float32", "int32", "bool"):
        raise a.fail(f"cast to {dtype!r} is not supported (float32, int32, bool)")
    if a.all_const():
        return [a.const(0, "input").astype(dtype)]
    return a.lower(lambda x: F.cast(x, dtype))


@_op("Softmax")
def _softmax(a: Args) -> Lowered:
    return a.lower(lambda x: F.softmax(x, axis=-1))


# ---- layout ------------------------------------------------------------------------------------


def _axis(axis: int, rank: int, a: Args) -> int:
    if not -rank <= axis < rank:
        raise a.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


@_op("Reshape")
def _reshape(a: Args) -> Lowered | list[np.ndarray]:
    shape = [int(s) for s in a.const(1, "shape").reshape(-1)]
    if a.all_const():
        return [a.const(0, "input").reshape(shape)]
    if a.batched(0) and shape and shape[0] == 1:
        # The converter's fixed batch of 1: this Reshape keeps axis 0 as the batch.
        return a.lower(lambda x: F.reshape(x, [x.shape[0], *shape[1:]]), uses=(0,))
    if a.batched(0):
        return a.lower(
            lambda x: F.reshape(x, shape),
            uses=(0,),
            batched=False,
            fixes_batch=f"Reshape {a.node.name!r} to {shape} merges the batch axis",
        )
    return a.lower(lambda x: F.reshape(x, shape), uses=(0,))


@_op("ExpandDims")
def _expand_dims(a: Args) -> Lowered | list[np.ndarray]:
    dim = int(a.const(1, "dim").reshape(-1)[0])
    if a.all_const():
        return [np.expand_dims(a.const(0, "input"), dim)]
    new_batch = a.batched(0) and dim == 0  # a negative dim counts from the end: never axis 0
    why = f"ExpandDims {a.node.name!r} puts a new axis before the batch" if new_batch else None
    return a.lower(
        lambda x: F.expand_dims(x, dim),
        uses=(0,),
        batched=a.batched(0) and dim != 0,
        fixes_batch=why,
    )


@_op("Squeeze")
def _squeeze(a: Args) -> Lowered:
    dims = [int(d) for d in a.attr("squeeze_dims", []) or []]

    def run(x: Tensor) -> Tensor:
        axes = {d % x.ndim for d in dims} if dims else {i for i, s in enumerate(x.shape) if s == 1}
        return F.reshape(x, [s for i, s in enumerate(x.shape) if i not in axes])

    reads_batch = a.batched(0) and (not dims or 0 in dims)
    why = f"Squeeze {a.node.name!r} removes the batch axis" if reads_batch else None
    return a.lower(run, batched=a.batched(0) and not reads_batch, fixes_batch=why)


@_op("Unpack")
def _unpack(a: Args) -> Lowered:
    axis, num = int(a.attr("axis", 0)), int(a.attr("num"))

    def run(x: Tensor) -> list[Tensor]:
        ax = axis % x.ndim
        rest = [s for i, s in enumerate(x.shape) if i != ax]
        begin = [0] * x.ndim
        size = list(x.shape)
        size[ax] = 1
        pieces = []
        for k in range(num):
            begin[ax] = k
            pieces.append(F.reshape(F.slice(x, begin, size), rest))
        return pieces

    reads_batch = a.batched(0) and axis == 0
    why = f"Unpack {a.node.name!r} splits the batch axis" if reads_batch else None
    return Lowered(run, (0,), (a.batched(0) and not reads_batch,) * num, why)


@_op("Pack")
def _pack(a: Args) -> Lowered | list[np.ndarray]:
    axis = int(a.attr("axis", 0))
    if a.all_const():
        return [np.stack([a.const(i, "value") for i in range(len(a.values))], axis)]
    batched = any(a.batched(i) for i in range(len(a.values)))
    why = f"Pack {a.node.name!r} stacks along the batch axis" if batched and axis == 0 else None
    return a.lower(
        lambda *xs: F.concat([F.expand_dims(x, axis) for x in xs], axis % (xs[0].ndim + 1)),
        batched=batched and axis != 0,
        fixes_batch=why,
    )


@_op("ConcatV2")
def _concat(a: Args) -> Lowered | list[np.ndarray]:
    count = len(a.values) - 1
    axis = int(a.const(count, "axis").reshape(-1)[0])
    if all(not isinstance(v, Sym) for v in a.values[:count]):
        return [np.concatenate([a.const(i, "value") for i in range(count)], axis)]
    batched = any(a.batched(i) for i in range(count))
    why = f"ConcatV2 {a.node.name!r} joins along the batch axis" if batched and axis == 0 else None
    return a.lower(
        lambda *xs: F.concat(list(xs), axis % xs[0].ndim),
        uses=range(count),
        batched=batched and axis != 0,
        fixes_batch=why,
    )


@_op("Transpose")
def _transpose(a: Args) -> Lowered | list[np.ndarray]:
    perm = [int(p) for p in a.const(1, "perm").reshape(-1)]
    if a.all_const():
        return [np.transpose(a.const(0, "input"), perm)]
    keeps = not perm or perm[0] == 0
    why = None if keeps or not a.batched(0) else f"Transpose {a.node.name!r} moves the batch axis"
    return a.lower(
        lambda x: F.transpose(x, perm), uses=(0,), batched=a.batched(0) and keeps, fixes_batch=why
    )


@_op("Pad", "PadV2")
def _pad(a: Args) -> Lowered:
    pairs = [[int(v) for v in row] for row in a.const(1, "paddings")]
    value = float(a.const(2, "constant_values").reshape(-1)[0]) if len(a.values) > 2 else 0.0
    if a.batched(0) and pairs and pairs[0] != [0, 0]:
        raise a.fail("padding the batch axis is not supported")
    return a.lower(lambda x: F.pad(x, pairs, value), uses=(0,))


@_op("Slice")
def _slice(a: Args) -> Lowered:
    begin = [int(v) for v in a.const(1, "begin")]
    size = [int(v) for v in a.const(2, "size")]

    def run(x: Tensor) -> Tensor:
        full = [
            x.shape[i] - b if s == -1 else s
            for i, (b, s) in enumerate(zip(begin, size, strict=True))
        ]
        if a.batched(0):
            full[0] = x.shape[0]
        return F.slice(x, begin, full)

    if a.batched(0) and (begin[0] != 0 or size[0] not in (1, -1)):
        raise a.fail("slicing the batch axis is not supported")
    return a.lower(run, uses=(0,))


# ---- reductions --------------------------------------------------------------------------------


def _reduction(fn: Callable[..., Tensor]) -> Handler:
    def handler(a: Args) -> Lowered:
        axes = [int(v) for v in a.const(1, "reduction axes").reshape(-1)]
        keep = bool(a.attr("keep_dims", False))
        over_batch = a.batched(0) and any(ax in (0,) for ax in axes)
        why = f"{a.node.op} {a.node.name!r} reduces over the batch axis" if over_batch else None
        return a.lower(
            lambda x: fn(x, axis=tuple(ax % x.ndim for ax in axes), keepdims=keep),
            uses=(0,),
            batched=a.batched(0) and not over_batch,
            fixes_batch=why,
        )

    return handler


OPS["Mean"] = _reduction(F.mean)
OPS["Sum"] = _reduction(F.sum)
OPS["Max"] = _reduction(F.max)
OPS["Min"] = _reduction(F.min)


@_op("ArgMax")
def _argmax(a: Args) -> Lowered:
    axis = int(a.const(1, "dimension").reshape(-1)[0])
    # The index comes as int32 whatever output_type says (int64 has no dtype here, as in TF.js).
    over_batch = a.batched(0) and axis == 0
    why = f"ArgMax {a.node.name!r} reduces over the batch axis" if over_batch else None
    return a.lower(
        lambda x: F.argmax(x, axis % x.ndim),
        uses=(0,),
        batched=a.batched(0) and not over_batch,
        fixes_batch=why,
    )


# ---- convolutions, pools, products -------------------------------------------------------------


def _nhwc(a: Args) -> None:
    if a.attr("data_format", "NHWC") not in ("NHWC", None):
        raise a.fail(f"data_format {a.attr('data_format')!r} is not supported (NHWC only)")
    dilations = a.attr("dilations", [1, 1, 1, 1]) or [1, 1, 1, 1]
    if any(int(d) != 1 for d in dilations):
        raise a.fail(f"dilations {dilations} are not supported (1 only)")


def _strides(a: Args, key: str = "strides") -> tuple[int, int]:
    strides = a.attr(key, [1, 1, 1, 1])
    if len(strides) != 4 or strides[0] != 1 or strides[3] != 1:
        raise a.fail(f"{key} {strides} must be [1, h, w, 1]")
    return int(strides[1]), int(strides[2])


def _padder(a: Args, strides: tuple[int, int]):
    """The explicit pads of a window op for its input's spatial size and its window."""
    mode = a.attr("padding", "VALID")
    if mode == "EXPLICIT":
        flat = [int(v) for v in a.attr("explicit_paddings", [])]
        if len(flat) != 8 or any(flat[i] for i in (0, 1, 6, 7)):
            raise a.fail(f"explicit_paddings {flat} must pad only H and W")
        pads = ((flat[2], flat[3]), (flat[4], flat[5]))
        return lambda hw, window: pads
    if mode not in ("SAME", "VALID"):
        raise a.fail(f"padding {mode!r} is not supported (SAME, VALID, EXPLICIT)")
    return lambda hw, window: F.resolve_padding(mode.lower(), hw, window, strides)


def _conv_like(a: Args, primitive: str, fused: bool) -> Lowered:
    _nhwc(a)
    strides = _strides(a)
    pads = _padder(a, strides)
    a.const(1, "filter")  # filters are weights: a computed filter has no kernel here
    tail: list[str] = list(a.attr("fused_ops", []) or []) if fused else []
    if tail and tail[0] != "BiasAdd":
        raise a.fail(f"fused ops {tail} are not supported (BiasAdd, then an activation)")
    activation = _activation(a, tail[1]) if len(tail) > 1 else None
    if len(tail) > 2:
        raise a.fail(f"fused ops {tail} are not supported (BiasAdd, then one activation)")

    def run(x: Tensor, w: Tensor, *extra: Tensor) -> Tensor:
        p = pads(x.shape[1:3], w.shape[:2])
        if primitive == "conv2d":
            y = F.conv2d(x, w, strides=strides, padding=p)
        else:
            y = F.depthwise_conv2d(x, w, strides=strides, padding=p)
        if tail:
            y = F.add(y, extra[0])
        return activation(y, list(extra[1:])) if activation else y

    return a.lower(run, uses=range(len(a.values)), batched=a.batched(0))


OPS["Conv2D"] = lambda a: _conv_like(a, "conv2d", False)
OPS["_FusedConv2D"] = lambda a: _conv_like(a, "conv2d", True)
OPS["DepthwiseConv2dNative"] = lambda a: _conv_like(a, "depthwise_conv2d", False)
OPS["FusedDepthwiseConv2dNative"] = lambda a: _conv_like(a, "depthwise_conv2d", True)


def _pool(fn: Callable[..., Tensor]) -> Handler:
    def handler(a: Args) -> Lowered:
        _nhwc(a)
        strides = _strides(a)
        window = _strides(a, "ksize")
        pads = _padder(a, strides)
        return a.lower(lambda x: fn(x, window, strides, pads(x.shape[1:3], window)), uses=(0,))

    return handler


OPS["MaxPool"] = _pool(F.max_pool2d)
OPS["AvgPool"] = _pool(F.avg_pool2d)


def _matmul_like(a: Args, fused: bool) -> Lowered:
    ta, tb = bool(a.attr("transpose_a", False)), bool(a.attr("transpose_b", False))
    tail: list[str] = list(a.attr("fused_ops", []) or []) if fused else []
    if tail and tail[0] != "BiasAdd":
        raise a.fail(f"fused ops {tail} are not supported (BiasAdd, then an activation)")
    activation = _activation(a, tail[1]) if len(tail) > 1 else None

    def run(x: Tensor, w: Tensor, *extra: Tensor) -> Tensor:
        if x.ndim != 2 or w.ndim != 2:
            raise ValueError(
                f"MatMul {a.node.name!r}: rank-2 operands only, got {x.shape}, {w.shape}"
            )
        y = call("matmul", x, w, transpose_a=ta, transpose_b=tb)
        if tail:
            y = F.add(y, extra[0])
        return activation(y, list(extra[1:])) if activation else y

    if ta and a.batched(0):
        raise a.fail("transpose_a of the batched operand is not supported")
    return a.lower(run, batched=a.batched(0))


OPS["MatMul"] = lambda a: _matmul_like(a, False)
OPS["_FusedMatMul"] = lambda a: _matmul_like(a, True)


# ---- images and gathers ------------------------------------------------------------------------


def bilinear_matrix(size_in: int, size_out: int, align_corners: bool, half_pixel: bool):
    """The (size_out, size_in) interpolation weights of TF's ResizeBilinear along one axis (the
    arithmetic of tfjs-backend-cpu's resizeBilinear: source clamped to the edges)."""
    corners = align_corners and size_out > 1
    ratio = (size_in - 1) / (size_out - 1) if corners else size_in / size_out
    weights = np.zeros((size_out, size_in), np.float64)
    for r in range(size_out):
        source = ratio * (r + 0.5) - 0.5 if half_pixel else ratio * r
        low = max(0, int(np.floor(source)))
        high = min(size_in - 1, int(np.ceil(source)))
        frac = source - low
        weights[r, low] += 1.0 - frac
        weights[r, high] += frac
    return weights.astype(np.float32)


@_op("ResizeBilinear")
def _resize_bilinear(a: Args) -> Lowered:
    out_h, out_w = (int(v) for v in a.const(1, "size").reshape(-1))
    align = bool(a.attr("align_corners", False))
    half = bool(a.attr("half_pixel_centers", False))

    def run(x: Tensor) -> Tensor:
        n, h, w, c = x.shape
        rows = tensor(bilinear_matrix(h, out_h, align, half))
        cols = tensor(bilinear_matrix(w, out_w, align, half))
        # Two products with the separable weights: rows over H, then columns over W.
        y = F.matmul(rows, F.reshape(x, (n, h, w * c)))
        y = F.matmul(cols, F.reshape(y, (n * out_h, w, c)))
        return F.reshape(y, (n, out_h, out_w, c))

    return a.lower(run, uses=(0,))


@_op("GatherNd")
def _gather_nd(a: Args) -> Lowered:
    def run(params: Tensor, indices: Tensor) -> Tensor:
        depth = indices.shape[-1]
        rows = int(np.prod(params.shape[:depth]))
        inner = params.shape[depth:]
        strides = np.cumprod([1, *params.shape[1:depth][::-1]])[::-1].astype(np.int32)
        flat = F.reshape(indices, (-1, depth))
        linear = F.sum(F.mul(flat, tensor(strides, dtype="int32")), axis=1)
        # A one-hot product selects the rows: exact, as long as the params are finite.
        picked = F.matmul(
            F.one_hot(linear, rows, params.dtype),
            F.reshape(params, (rows, int(np.prod(inner)) if inner else 1)),
        )
        return F.reshape(picked, (*indices.shape[:-1], *inner))

    why = f"GatherNd {a.node.name!r} indexes the batch axis" if a.batched(0) else None
    return a.lower(run, batched=False, fixes_batch=why)
