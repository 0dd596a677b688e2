"""Reductions (reduce_sum, reduce_max over any axes, argmax over one) on reduce_*.wgsl."""

from __future__ import annotations

import math
from typing import Any

from .. import OutSpec
from . import codegen
from .plan import BufferRef, DeviceLimits, Dispatch, KernelPlan

# (dim, stride) pairs describing how an index walks the source.
Walk = list[tuple[int, int]]

# Up to this many elements per output one invocation folds them alone (reduce_serial.wgsl).
SERIAL_MAX = 64
# A tree reduction splits each output's elements into chunks of this size over several
# workgroups (then reduces the partials) when there are too few outputs to fill the GPU.
CHUNK = 4096
FEW_OUTPUTS = 256

_IDENTITY = {
    ("sum", "f32"): "0.0",
    ("sum", "i32"): "0i",
    ("max", "f32"): "f32_neg_inf()",
    ("max", "i32"): "bitcast<i32>(0x80000000u)",
}
_COMBINE = {
    "sum": "return Acc(a.value + b.value, 0u);",
    "max": "return Acc(MAX(a.value, b.value), 0u);",
    "argmax": "if (argmax_better(b, a)) { return b; } return a;",
}


def _merge(walk: Walk) -> Walk:
    """Drops length-1 axes and merges neighbours that together form one contiguous stride."""
    merged: Walk = []
    for dim, stride in walk:
        if dim == 1:
            continue
        if merged and merged[-1][1] == stride * dim:
            merged[-1] = (merged[-1][0] * dim, stride)
        else:
            merged.append((dim, stride))
    return merged


def reduce_dispatch(
    op: str,
    kind: str,
    dtype: str,
    kept: Walk,
    reduced: Walk,
    src: BufferRef,
    dst: BufferRef,
    limits: DeviceLimits,
    parts: int = 1,
) -> Dispatch:
    """One dispatch reducing `reduced` for every output of `kept` (parts > 1: partials)."""
    element = codegen.wgsl_type(dtype, op)
    kept, reduced = _merge(kept), _merge(reduced)
    if max(len(kept), len(reduced)) > codegen.MAX_RANK:
        raise ValueError(f"{op}: the webgpu kernel handles at most {codegen.MAX_RANK} axes")
    identity = "0" if kind == "argmax" else _IDENTITY.get((kind, element))
    if identity is None:
        raise TypeError(f"{op}: the webgpu kernel cannot reduce dtype {dtype}")
    outputs = codegen.numel([d for d, _ in kept])
    size = codegen.numel([d for d, _ in reduced])
    serial = size <= SERIAL_MAX and parts == 1
    chunk = math.ceil(size / parts)
    words = [outputs, size, parts, chunk, len(kept), len(reduced), 0, 0]
    words += codegen.axis_table([d for d, _ in kept]) + codegen.axis_table([s for _, s in kept])
    words += codegen.axis_table([d for d, _ in reduced])
    words += codegen.axis_table([s for _, s in reduced])
    out_type = "i32" if kind == "argmax" else element
    file = "reduce_serial.wgsl" if serial else "reduce_tree.wgsl"
    wgsl = codegen.render(
        file,
        REDUCE_COMMON=codegen.template("reduce_common.wgsl"),
        T=element,
        OUT_T=out_type,
        IS_NAN="return f32_is_nan(x);" if element == "f32" else "return false;",
        IDENTITY=f"{element}({identity})",
        COMBINE=_COMBINE[kind].replace("MAX", "f32_max_nan" if element == "f32" else "max"),
        FINISH="return i32(a.index);" if kind == "argmax" else "return a.value;",
    )
    groups = codegen.groups_for(outputs) if serial else outputs * parts
    return codegen.dispatch(
        f"{file[:-5]}:{kind}:{element}",
        wgsl,
        (src, dst),
        words,
        codegen.grid(op, groups, limits),
    )


def summed_parts(
    op: str,
    key: str,
    wgsl: str,
    inputs: list[BufferRef],
    words: list[int],
    workgroups: tuple[int, int, int],
    parts: int,
    size: int,
    limits: DeviceLimits,
) -> KernelPlan:
    """A kernel that writes `parts` partial results of `size` floats each (split-K products,
    filter-gradient and column-sum slices): with one part, straight into the output; with
    several, into scratch, then a dispatch summing the parts."""
    if parts == 1:
        return KernelPlan(
            (codegen.dispatch(key, wgsl, [*inputs, codegen.OUTPUT], words, workgroups),)
        )
    scratch = BufferRef("scratch", 0)
    codegen.check_fits(op, "partial sums", (parts, size), limits)
    partials = codegen.dispatch(key, wgsl, [*inputs, scratch], words, workgroups)
    total = reduce_dispatch(
        op, "sum", "float32", [(size, 1)], [(parts, size)], scratch, codegen.OUTPUT, limits
    )
    return KernelPlan((partials, total), scratch_bytes=(parts * size * 4,))


def _reduce(kind: str, op: str, out: OutSpec, axes: tuple[int, ...], limits: DeviceLimits):
    shape = out.in_shapes[0]
    dtype = out.in_dtypes[0]
    strides = codegen.contiguous_strides(shape)
    kept = [(d, s) for i, (d, s) in enumerate(zip(shape, strides, strict=True)) if i not in axes]
    reduced = [(d, s) for i, (d, s) in enumerate(zip(shape, strides, strict=True)) if i in axes]
    outputs = codegen.numel([d for d, _ in kept])
    size = codegen.numel([d for d, _ in reduced])
    if outputs == 0:
        return KernelPlan(())
    parts = math.ceil(size / CHUNK)
    if kind == "argmax" or parts < 2 or outputs >= FEW_OUTPUTS:
        first = reduce_dispatch(
            op, kind, dtype, kept, reduced, codegen.INPUT_0, codegen.OUTPUT, limits
        )
        return KernelPlan((first,))
    # Two passes: chunks of each output into scratch, then the partials of each output.
    scratch = BufferRef("scratch", 0)
    first = reduce_dispatch(
        op, kind, dtype, kept, reduced, codegen.INPUT_0, scratch, limits, parts=parts
    )
    second = reduce_dispatch(
        op, kind, dtype, [(outputs, parts)], [(parts, 1)], scratch, codegen.OUTPUT, limits
    )
    return KernelPlan((first, second), scratch_bytes=(outputs * parts * 4,))


def plan_reduce_sum(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    return _reduce("sum", op, out, tuple(attrs["axes"]), limits)


def plan_reduce_max(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    return _reduce("max", op, out, tuple(attrs["axes"]), limits)


def plan_argmax(op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits) -> KernelPlan:
    return _reduce("argmax", op, out, (attrs["axis"],), limits)
