"""Primitive affine_sample (bilinear sampling of NHWC images under per-image affine maps) on
affine_sample.wgsl."""

from __future__ import annotations

from typing import Any

from .. import OutSpec
from . import codegen
from .plan import BufferRef, DeviceLimits, KernelPlan


def plan_affine_sample(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    """One invocation per output element; images are input 0, the (N, 8) params input 1."""
    codegen.require_float32(op, out)
    codegen.check_spec_fits(op, out, limits)
    count = codegen.numel(out.shape)
    if count == 0:
        return KernelPlan(())
    _, in_h, in_w, channels = out.in_shapes[0]
    out_h, out_w = attrs["size"]
    words = [count, in_h, in_w, channels, out_h, out_w]
    bindings = [BufferRef("input", 0), BufferRef("input", 1), codegen.OUTPUT]
    workgroups = codegen.grid(op, codegen.groups_for(count), limits)
    wgsl = codegen.render("affine_sample.wgsl")
    return KernelPlan((codegen.dispatch(op, wgsl, bindings, words, workgroups),))
