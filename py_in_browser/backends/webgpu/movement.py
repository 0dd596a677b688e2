"""Layout primitives (expand, reshape, transpose, slice, pad, concat) as strided copies."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .. import OutSpec
from . import codegen
from .plan import BufferRef, DeviceLimits, Dispatch, KernelPlan


@dataclass(frozen=True)
class Axis:
    """One iteration axis: its length, the strides it moves in source and destination, and the
    window [src_lo, src_lo + src_dim) of coordinates that read the source (others read fill)."""

    dim: int
    src_stride: int
    dst_stride: int
    src_lo: int = 0
    src_dim: int = -1  # -1: the whole axis reads the source

    @property
    def unbounded(self) -> bool:
        return self.src_lo == 0 and self.src_dim in (-1, self.dim)


def coalesce(axes: list[Axis]) -> list[Axis]:
    """Drops length-1 axes and merges neighbours that walk both buffers contiguously, so most
    copies run with rank 1 or 2 (fewer divisions per element, any input rank fits MAX_RANK)."""
    kept = [a for a in axes if not (a.dim == 1 and a.unbounded)]
    merged: list[Axis] = []
    for axis in kept:
        if merged:
            outer = merged[-1]
            if (
                outer.unbounded
                and axis.unbounded
                and outer.src_stride == axis.src_stride * axis.dim
                and outer.dst_stride == axis.dst_stride * axis.dim
            ):
                merged[-1] = replace(axis, dim=outer.dim * axis.dim, src_dim=-1)
                continue
        merged.append(axis)
    return merged


def copy_dispatch(
    op: str,
    dtype: str,
    axes: list[Axis],
    limits: DeviceLimits,
    src: BufferRef,
    src_base: int = 0,
    dst_base: int = 0,
    fill_bits: int = 0,
) -> Dispatch | None:
    """The copy over `axes`, or None when there is nothing to copy."""
    count = codegen.numel([a.dim for a in axes])
    if count == 0:
        return None
    axes = coalesce(axes)
    if len(axes) > codegen.MAX_RANK:
        raise ValueError(f"{op}: the webgpu kernel handles at most {codegen.MAX_RANK} axes")
    element = codegen.wgsl_type(dtype, op)
    words = [count, len(axes), src_base, dst_base, fill_bits, 0, 0, 0]
    words += codegen.axis_table([a.dim for a in axes])
    words += codegen.axis_table([a.src_stride for a in axes])
    words += codegen.axis_table([a.dst_stride for a in axes])
    words += codegen.axis_table([a.src_lo for a in axes])
    words += codegen.axis_table([a.dim if a.src_dim < 0 else a.src_dim for a in axes])
    wgsl = codegen.render("copy_strided.wgsl", T=element)
    workgroups = codegen.grid(op, codegen.groups_for(count), limits)
    return codegen.dispatch(
        f"copy_strided:{element}", wgsl, (src, codegen.OUTPUT), words, workgroups
    )


def _gather(op: str, out: OutSpec, axes: list[Axis], limits: DeviceLimits, **kw: Any) -> KernelPlan:
    found = copy_dispatch(op, out.dtype, axes, limits, codegen.INPUT_0, **kw)
    return KernelPlan(() if found is None else (found,))


def _dst_strides(out: OutSpec) -> tuple[int, ...]:
    return codegen.contiguous_strides(out.shape)


def plan_expand(op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits) -> KernelPlan:
    src = out.in_shapes[0]
    strides = codegen.contiguous_strides(src)
    axes = [
        Axis(d, 0 if s == 1 else st, dst)
        for s, d, st, dst in zip(src, out.shape, strides, _dst_strides(out), strict=True)
    ]
    return _gather(op, out, axes, limits)


def plan_reshape(op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits) -> KernelPlan:
    return _gather(op, out, [Axis(codegen.numel(out.shape), 1, 1)], limits)


def plan_transpose(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    strides = codegen.contiguous_strides(out.in_shapes[0])
    axes = [
        Axis(d, strides[p], dst)
        for d, p, dst in zip(out.shape, attrs["perm"], _dst_strides(out), strict=True)
    ]
    return _gather(op, out, axes, limits)


def plan_slice(op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits) -> KernelPlan:
    strides = codegen.contiguous_strides(out.in_shapes[0])
    base = sum(b * s for b, s in zip(attrs["begin"], strides, strict=True))
    axes = [
        Axis(d, st, dst) for d, st, dst in zip(out.shape, strides, _dst_strides(out), strict=True)
    ]
    return _gather(op, out, axes, limits, src_base=base)


def plan_pad(op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits) -> KernelPlan:
    src = out.in_shapes[0]
    axes = [
        Axis(d, st, dst, src_lo=p[0], src_dim=s)
        for d, st, dst, p, s in zip(
            out.shape,
            codegen.contiguous_strides(src),
            _dst_strides(out),
            attrs["paddings"],
            src,
            strict=True,
        )
    ]
    fill = codegen.value_bits(attrs["value"], out.dtype)
    return _gather(op, out, axes, limits, fill_bits=fill)


def plan_concat(op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits) -> KernelPlan:
    """One dispatch per input, each scattering into its slab of the output."""
    axis = attrs["axis"]
    dst_strides = _dst_strides(out)
    dispatches, offset = [], 0
    for index, shape in enumerate(out.in_shapes):
        axes = [
            Axis(d, st, dst)
            for d, st, dst in zip(
                shape, codegen.contiguous_strides(shape), dst_strides, strict=True
            )
        ]
        found = copy_dispatch(
            op,
            out.dtype,
            axes,
            limits,
            BufferRef("input", index),
            dst_base=offset * dst_strides[axis],
        )
        if found is not None:
            dispatches.append(found)
        offset += shape[axis]
    return KernelPlan(tuple(dispatches))
