"""depthwise_conv2d on depthwise.wgsl: one invocation per output pixel and vec4 (or channel)."""

from __future__ import annotations

from typing import Any

from .. import OutSpec
from . import codegen
from .plan import BufferRef, DeviceLimits, KernelPlan


def plan_depthwise_conv2d(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    codegen.require_float32(op, out)
    x, w = out.in_shapes
    y = out.shape
    if not codegen.numel(y):
        return KernelPlan(())
    # vec4s of channels where each output channel is its input channel (M == 1) and C is whole
    # vec4s: the hand model's and MobileNet's layers.
    lanes = 4 if w[3] == 1 and x[3] % 4 == 0 else 1
    (pad_top, _), (pad_left, _) = attrs["pads"]
    invocations = codegen.numel(y) // lanes
    words = [invocations, x[1], x[2], x[3] // lanes, y[1], y[2], y[3] // lanes, w[3]]
    words += [w[0], w[1], *attrs["strides"], pad_top, pad_left]
    element = "vec4<f32>" if lanes == 4 else "f32"
    wgsl = codegen.render("depthwise.wgsl", T=element)
    workgroups = codegen.grid(op, codegen.groups_for(invocations), limits)
    bindings = [codegen.INPUT_0, BufferRef("input", 1), codegen.OUTPUT]
    return KernelPlan((codegen.dispatch(f"depthwise:{lanes}", wgsl, bindings, words, workgroups),))
