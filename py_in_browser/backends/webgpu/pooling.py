"""Pooling primitives (max/avg and their gradients, NHWC) on the pool *.wgsl kernels."""

from __future__ import annotations

from typing import Any

from .. import OutSpec
from . import codegen
from .plan import BufferRef, DeviceLimits, KernelPlan


def _pool(
    op: str,
    attrs: dict[str, Any],
    out: OutSpec,
    limits: DeviceLimits,
    image: tuple[int, ...],
    pooled: tuple[int, ...],
    inputs: int,
) -> KernelPlan:
    """One invocation per element of the op's result (pooled for forward, image for gradients)."""
    codegen.require_float32(op, out)
    count = codegen.numel(out.shape)
    if count == 0:
        return KernelPlan(())
    (kh, kw), (sh, sw) = attrs["pool_size"], attrs["strides"]
    (pad_top, _), (pad_left, _) = attrs["pads"]
    words = [count, image[0], image[1], image[2], image[3], pooled[1], pooled[2], kh, kw]
    words += [sh, sw, pad_top, pad_left]
    wgsl = codegen.render(
        f"{op}.wgsl",
        POOL_COMMON=codegen.template("pool_common.wgsl"),
        PARAMS_BINDING=str(inputs + 1),
    )
    bindings = [BufferRef("input", i) for i in range(inputs)] + [codegen.OUTPUT]
    workgroups = codegen.grid(op, codegen.groups_for(count), limits)
    return KernelPlan((codegen.dispatch(op, wgsl, bindings, words, workgroups),))


def plan_max_pool2d(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    return _pool(op, attrs, out, limits, out.in_shapes[0], out.shape, inputs=1)


def plan_avg_pool2d(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    return _pool(op, attrs, out, limits, out.in_shapes[0], out.shape, inputs=1)


def plan_max_pool2d_grad(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    return _pool(op, attrs, out, limits, out.shape, out.in_shapes[1], inputs=2)


def plan_avg_pool2d_grad(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    return _pool(op, attrs, out, limits, out.shape, out.in_shapes[0], inputs=1)
