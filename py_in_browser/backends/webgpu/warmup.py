"""The kernels worth compiling before the first step: what dense and convolutional training uses.

Kernels are shape-generic (shapes travel in params), so one representative call per kernel key
yields the exact WGSL a real call will ask for. Once the engine is ready the runtime hands the
first step's kernels (first_step_kernels) to createComputePipelineAsync all at once, so the GPU
process compiles them side by side while Python builds that step, and queues the rest
(common_kernels) to compile one at a time behind them, without waiting for any.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ... import fusion
from .. import OutSpec
from . import fused_runs, kernels
from .plan import DeviceLimits

_F32 = "float32"
_UNARY = ("relu", "exp", "log", "sigmoid", "sqrt", "neg", "tanh")
_SQUARE = (8, 8)
_ROW = (0, 1)  # a (1, 8) row repeated over (8, 8): bias adds (elementwise.py's "r" inputs)
_COLUMN = (1, 0)  # an (8, 1) column broadcast over (8, 8): a strided walk (per-row scalars)


def _spec(shape: tuple[int, ...], out_dtype: str, *in_dtypes: str) -> OutSpec:
    return OutSpec(shape, out_dtype, tuple(shape for _ in in_dtypes), in_dtypes)


def _first_step_calls() -> list[tuple[str, dict[str, Any], OutSpec]]:
    """What the first training step of a typical model dispatches: a convolutional or dense
    classifier on RGB images with relu, max pooling, softmax cross-entropy on class labels and
    the default Adam (fusion.typical_programs), trained through the replayed step machinery
    (fit, train_on_batch). The step goes to the GPU in parts, each once its kernels compiled
    (bridge.js flushWhenCompiled), so its start runs while the rest compile. The GPU process
    compiles a few at a time in the order asked: the products, convolutions, pooling and long
    reductions, which take longest (100-400 ms each on SwiftShader), come first, then the
    elementwise kernels in first-use order."""
    c: tuple[int, ...] | None = None  # a contiguous input
    b: tuple[int, ...] | None = _COLUMN  # a broadcast one (here a scalar)
    r: tuple[int, ...] | None = _ROW  # a repeated row
    conv: dict[str, Any] = {"strides": (1, 1), "pads": ((1, 1), (1, 1))}
    # The convolutions apply their layers' bias and relu as they store (epilogues.py).
    calls = [("conv2d", {**conv, "epilogue": "bias_relu"}, _conv_spec(3, 16))]
    for channels in _CHANNELS:
        calls.append(("conv2d_backprop_input", conv, _conv_spec(channels, channels)))
        calls.append(("conv2d_backprop_filter", conv, _conv_grad_spec(channels)))
    calls += _matmuls()
    calls.append(("max_pool2d", _POOL, _POOL_OUT))
    calls.append(("max_pool2d_grad", _POOL, _POOL_GRAD))
    # Bias gradients: sums over the leading axes (column_sums.py on a software adapter: its
    # slices, then their sum; reduce_tree.wgsl elsewhere).
    bias_grad = OutSpec((8,), _F32, ((1024, 8),), (_F32,))
    calls.append(("reduce_sum", {"axes": (0,), "keepdims": False}, bias_grad))
    square = _spec(_SQUARE, _F32, _F32, _F32)
    # A recorded step reads private copies of the batch: images * 1 and labels * 1.
    calls.append(("mul", _strided((c, b)), square))
    calls.append(("mul", _strided((c, b)), _spec(_SQUARE, "int32", "int32", "int32")))
    calls.append(("add", _strided((c, r)), square))  # bias
    calls.append(("relu", {}, _spec(_SQUARE, _F32, _F32)))
    for op in ("reduce_sum", "reduce_max"):  # the loss: log-sum-exp over a few classes
        calls.append((op, {"axes": (1,), "keepdims": False}, _row_sums(8)))
    calls.append(("equal", _strided((b, r)), _spec(_SQUARE, "bool", "int32", "int32")))
    calls += _fused_calls(fusion.typical_programs())
    # The step's finite check (a typical fused program, then this) and its loss sum.
    calls.append(("equal", {}, _spec(_SQUARE, "bool", _F32, _F32)))
    calls.append(("mul", {}, square))
    return calls


def _calls() -> list[tuple[str, dict[str, Any], OutSpec]]:
    c: tuple[int, ...] | None = None  # a contiguous input
    b: tuple[int, ...] | None = _COLUMN  # a broadcast one
    r: tuple[int, ...] | None = _ROW  # a repeated row
    calls: list[tuple[str, dict[str, Any], OutSpec]] = []
    strides: tuple[tuple[int, ...] | None, ...]
    for op, variants in (
        ("mul", ((c, c), (c, b), (b, c), (c, r))),
        ("add", ((c, c), (c, b), (c, r))),
        ("sub", ((c, c), (c, b), (b, c), (c, r))),
        ("div", ((c, c), (c, b), (c, r))),
        ("pow", ((c, c),)),
        ("maximum", ((c, c), (c, b))),
    ):
        for strides in variants:
            calls.append((op, _strided(strides), _spec(_SQUARE, _F32, _F32, _F32)))
    calls += [(op, {}, _spec(_SQUARE, _F32, _F32)) for op in _UNARY]
    calls.append(("neg", _strided((b,)), _spec(_SQUARE, _F32, _F32)))
    for strides in ((c, c), (b, c), (c, b)):  # (c, c): minimum's gradient (clip in losses)
        calls.append(("less", _strided(strides), _spec(_SQUARE, "bool", _F32, _F32)))
    for strides in ((c, c), (c, b)):
        calls.append(("equal", _strided(strides), _spec(_SQUARE, "bool", _F32, _F32)))
    for strides in ((c, c), (b, r)):  # (b, r): labels against a range row (one-hot)
        calls.append(("equal", _strided(strides), _spec(_SQUARE, "bool", "int32", "int32")))
    where = _spec(_SQUARE, _F32, "bool", _F32, _F32)
    for strides in ((c, c, c), (b, c, c), (c, c, b)):
        calls.append(("where", _strided(strides), where))
    calls.append(("where", {}, _spec(_SQUARE, "bool", "bool", "bool", "bool")))
    calls += [("cast", {"dtype": _F32}, _spec(_SQUARE, _F32, src)) for src in ("bool", "int32")]
    calls.append(("transpose", {"perm": (1, 0)}, _spec(_SQUARE, _F32, _F32)))
    for op in ("reduce_sum", "reduce_max"):
        for columns in (8, 4096):
            calls.append((op, {"axes": (1,), "keepdims": False}, _row_sums(columns)))
    calls.append(("argmax", {"axis": 1}, OutSpec((8,), "int32", ((8, 8),), (_F32,))))
    calls += _matmuls()
    # One row of C (a dense layer's forward pass at batch 1: inference) takes gemv.wgsl.
    plain = {"transpose_a": False, "transpose_b": False}
    calls.append(("matmul", plain, OutSpec((1, 8), _F32, ((1, 8), (8, 8)), (_F32, _F32))))
    conv = {"strides": (1, 1), "pads": ((1, 1), (1, 1))}
    for channels in (32, *_CHANNELS):
        calls.append(("conv2d", conv, _conv_spec(channels, channels)))
        calls.append(("conv2d_backprop_filter", conv, _conv_grad_spec(channels)))
        calls.append(("conv2d_backprop_input", conv, _conv_spec(channels, channels)))
    # A first layer on RGB images: conv2d of 3 input channels is direct (conv_direct.wgsl).
    calls.append(("conv2d", conv, _conv_spec(3, 16)))
    for epilogue in ("bias", "relu"):  # layers without relu, or without a bias
        calls.append(("conv2d", {**conv, "epilogue": epilogue}, _conv_spec(3, 16)))
    calls.append(("max_pool2d", _POOL, _POOL_OUT))
    calls.append(("max_pool2d_grad", _POOL, _POOL_GRAD))
    draw = {"shape": _SQUARE, "seed": 0, "stream": 0, "bits": 24}  # Dropout's masks
    calls.append(("random_uniform", draw, OutSpec(_SQUARE, _F32, ((),), (_F32,))))
    return calls + _fused_calls(fusion.common_programs())


_CHANNELS = (16, 8)  # convolutions after the first layer (a kernel per channel range)
_POOL = {"pool_size": (2, 2), "strides": (2, 2), "pads": ((0, 0), (0, 0))}
_POOL_OUT = OutSpec((2, 4, 4, 8), _F32, ((2, 8, 8, 8),), (_F32,))
_POOL_GRAD = OutSpec((2, 8, 8, 8), _F32, ((2, 8, 8, 8), (2, 4, 4, 8), (2, 4, 4, 8)), (_F32,) * 3)


def _conv_spec(in_channels: int, out_channels: int) -> OutSpec:
    """conv2d (or its input gradient) of a 3x3 same-padded layer over (2, 8, 8, in_channels)."""
    x, w = (2, 8, 8, in_channels), (3, 3, in_channels, out_channels)
    return OutSpec((2, 8, 8, out_channels), _F32, (x, w), (_F32, _F32))


def _conv_grad_spec(channels: int) -> OutSpec:
    x = (2, 8, 8, channels)
    return OutSpec((3, 3, channels, channels), _F32, (x, x), (_F32, _F32))


def _row_sums(columns: int) -> OutSpec:
    """A reduction over the rows of (8, columns): short rows and long ones take other kernels."""
    return OutSpec((8,), _F32, ((8, columns),), (_F32,))


def _matmuls() -> list[tuple[str, dict[str, Any], OutSpec]]:
    """GEMM tiles by output shape (rows x columns): 128x8 64x16 32x32 16x64 8x128; and a dense
    layer's weight gradient x^T g (A transposed: its own vec4 kernel)."""
    plain = {"transpose_a": False, "transpose_b": False}
    transposed = {"transpose_a": True, "transpose_b": False}
    return [
        *(
            ("matmul", plain, OutSpec((m, n), _F32, ((m, 8), (8, n)), (_F32, _F32)))
            for m, n in ((64, 4), (64, 16), (64, 64), (16, 64), (4, 64))
        ),
        ("matmul", transposed, OutSpec((64, 64), _F32, ((8, 64), (8, 64)), (_F32, _F32))),
    ]


def _fused_calls(
    programs: list[tuple[fusion.Program, tuple[str, ...]]],
) -> list[tuple[str, dict[str, Any], OutSpec]]:
    """Registered fused programs (fusion.register_common: optimizer updates, losses, gradients):
    their kernels depend only on which inputs are scalars or views, so one call each compiles
    what every step of a training run uses."""
    views = {"rows": (1, 0), "filled": (0, 0)}  # element strides over _SQUARE (fusion.py)
    calls = []
    for program, kinds in programs:
        shapes = tuple(() if kind in ("scalar", "gate") else _SQUARE for kind in kinds)
        dtypes = tuple("bool" if kind in ("gate", "mask") else _F32 for kind in kinds)
        out = OutSpec(_SQUARE if _SQUARE in shapes else (), _F32, shapes, dtypes)
        attrs: dict[str, Any] = {"program": program}
        if any(kind in views for kind in kinds):
            attrs["input_strides"] = tuple(views.get(kind) for kind in kinds)
        calls.append(("fused", attrs, out))
    return calls


def _strided(strides: tuple[tuple[int, ...] | None, ...]) -> dict[str, Any]:
    return {"input_strides": strides} if any(s is not None for s in strides) else {}


@cache
def first_step_kernels(limits: DeviceLimits) -> tuple[tuple[str, str], ...]:
    """(key, wgsl) of each kernel a typical first training step dispatches, once, longest to
    compile first; the default Adam's rules as their group kernel where the device binds
    enough buffers for it (fused_runs.py), else one kernel each."""
    groups = fused_runs.warmup_kernels(limits, typical=True)
    calls = _first_step_calls()
    if groups:
        grouped = fused_runs.grouped_programs(limits, typical=True)
        calls = [c for c in calls if c[0] != "fused" or c[1]["program"] not in grouped]
    return (*_kernels(calls, limits, {}), *groups)


@cache
def common_kernels(limits: DeviceLimits) -> tuple[tuple[str, str], ...]:
    """(key, wgsl) of each other common kernel once (first_step_kernels left out), most used
    first, then the other registered groups' kernels."""
    known = dict(first_step_kernels(limits))
    return (
        *_kernels(_calls(), limits, known),
        *fused_runs.warmup_kernels(limits, typical=False),
    )


def _kernels(
    calls: list[tuple[str, dict[str, Any], OutSpec]], limits: DeviceLimits, known: dict[str, str]
) -> tuple[tuple[str, str], ...]:
    """The kernels `calls` dispatch that `known` lacks; calls a generator refuses (a device
    with tighter limits) are skipped: the real call will report them."""
    seen: dict[str, str] = {}
    for op, attrs, out in calls:
        try:
            plan = kernels.plan(op, attrs, out, limits)
        except (TypeError, ValueError, KeyError):
            continue
        for dispatch in plan.dispatches:
            if dispatch.key not in known:
                seen.setdefault(dispatch.key, dispatch.wgsl)
    return tuple(seen.items())
