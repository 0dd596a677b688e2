"""The kernels worth compiling before the first step: what dense and convolutional training uses.

Kernels are shape-generic (shapes travel in params), so one representative call per kernel key
yields the exact WGSL a real call will ask for; the runtime hands these to
createComputePipelineAsync at start-up, in this order, without waiting for them.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ... import fusion
from .. import OutSpec
from . import kernels
from .plan import DeviceLimits

_F32 = "float32"
_UNARY = ("relu", "exp", "log", "sigmoid", "sqrt", "neg", "tanh")
_SQUARE = (8, 8)
_ROW = (0, 1)  # a (1, 8) row repeated over (8, 8): bias adds (elementwise.py's "r" inputs)
_COLUMN = (1, 0)  # an (8, 1) column broadcast over (8, 8): a strided walk (per-row scalars)


def _spec(shape: tuple[int, ...], out_dtype: str, *in_dtypes: str) -> OutSpec:
    return OutSpec(shape, out_dtype, tuple(shape for _ in in_dtypes), in_dtypes)


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
        for shape, axes in (((8, 8), (1,)), ((8, 4096), (1,))):
            spec = OutSpec((8,), _F32, (shape,), (_F32,))
            calls.append((op, {"axes": axes, "keepdims": False}, spec))
    calls.append(("argmax", {"axis": 1}, OutSpec((8,), "int32", ((8, 8),), (_F32,))))
    # GEMM tiles by output shape (rows x columns): 128x8 64x16 32x32 16x64 8x128.
    plain = {"transpose_a": False, "transpose_b": False}
    for m, n in ((64, 4), (64, 16), (64, 64), (16, 64), (4, 64)):
        calls.append(("matmul", plain, OutSpec((m, n), _F32, ((m, 8), (8, n)), (_F32, _F32))))
    # One row of C (a dense layer's forward pass at batch 1: inference) takes gemv.wgsl.
    calls.append(("matmul", plain, OutSpec((1, 8), _F32, ((1, 8), (8, 8)), (_F32, _F32))))
    conv = {"strides": (1, 1), "pads": ((1, 1), (1, 1))}
    for channels in (32, 16, 8):
        x, w, y = (2, 8, 8, channels), (3, 3, channels, channels), (2, 8, 8, channels)
        calls.append(("conv2d", conv, OutSpec(y, _F32, (x, w), (_F32, _F32))))
        calls.append(("conv2d_backprop_filter", conv, OutSpec(w, _F32, (x, y), (_F32, _F32))))
        calls.append(("conv2d_backprop_input", conv, OutSpec(x, _F32, (y, w), (_F32, _F32))))
    # A first layer on RGB images: conv2d of 3 input channels is direct (conv_direct.wgsl).
    x, w, y = (2, 8, 8, 3), (3, 3, 3, 16), (2, 8, 8, 16)
    calls.append(("conv2d", conv, OutSpec(y, _F32, (x, w), (_F32, _F32))))
    pool = {"pool_size": (2, 2), "strides": (2, 2), "pads": ((0, 0), (0, 0))}
    calls.append(("max_pool2d", pool, OutSpec((2, 4, 4, 8), _F32, ((2, 8, 8, 8),), (_F32,))))
    grad = OutSpec((2, 8, 8, 8), _F32, ((2, 8, 8, 8), (2, 4, 4, 8), (2, 4, 4, 8)), (_F32,) * 3)
    calls.append(("max_pool2d_grad", pool, grad))
    draw = {"shape": _SQUARE, "seed": 0, "stream": 0, "bits": 24}  # Dropout's masks
    calls.append(("random_uniform", draw, OutSpec(_SQUARE, _F32, ((),), (_F32,))))
    return calls + _fused_calls()


def _fused_calls() -> list[tuple[str, dict[str, Any], OutSpec]]:
    """The optimizers' update programs (fusion.common_programs): their kernels depend only on
    which inputs are scalars, so one call each compiles what every step of a training run uses."""
    views = {"rows": (1, 0), "filled": (0, 0)}  # element strides over _SQUARE (fusion.py)
    calls = []
    for program, kinds in fusion.common_programs():
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
def common_kernels(limits: DeviceLimits) -> tuple[tuple[str, str], ...]:
    """(key, wgsl) of each common kernel once, most used first; calls a generator refuses (a
    device with tighter limits) are skipped: the real call will report them."""
    seen: dict[str, str] = {}
    for op, attrs, out in _calls():
        try:
            plan = kernels.plan(op, attrs, out, limits)
        except (TypeError, ValueError, KeyError):
            continue
        for dispatch in plan.dispatches:
            seen.setdefault(dispatch.key, dispatch.wgsl)
    return tuple(seen.items())
