"""Pooling primitives (max/avg and their gradients, NHWC) on the pool *.wgsl kernels."""

from __future__ import annotations

from typing import Any

from .. import OutSpec
from . import codegen
from .plan import BufferRef, DeviceLimits, KernelPlan


def _bindings(*names: str) -> str:
    """Read-only storage bindings for `names`, then the read-write dx."""
    lines = [
        f"@group(0) @binding({k}) var<storage, read> {n}: array<f32>;" for k, n in enumerate(names)
    ]
    lines.append(f"@group(0) @binding({len(names)}) var<storage, read_write> dx: array<f32>;")
    return "\n".join(lines)


_GRADIENT_AT = "output_index(n, u32(oh), u32(ow), ch)"
# What each op fills into pool2d.wgsl (forward) or pool2d_grad.wgsl (gradients).
_FILLS: dict[str, dict[str, str]] = {
    "max_pool2d": {"INIT": "f32_neg_inf()", "ACCUMULATE": "f32_max_nan(acc, v)", "RESULT": "acc"},
    "avg_pool2d": {"INIT": "0.0", "ACCUMULATE": "acc + v", "RESULT": "acc / window_size(oh, ow)"},
    "max_pool2d_grad": {
        "BINDINGS": _bindings("x", "g"),
        "FUNCTIONS": codegen.template("first_max_tap.wgsl"),
        "ROUTES": "first_max_tap(n, u32(oh), u32(ow), ch) == kh * p.k_w + kw",
        "SHARE": f"g[{_GRADIENT_AT}]",
    },
    "avg_pool2d_grad": {
        "BINDINGS": _bindings("g"),
        "FUNCTIONS": "",
        "ROUTES": "true",
        "SHARE": f"g[{_GRADIENT_AT}] / window_size(u32(oh), u32(ow))",
    },
}


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
        "pool2d_grad.wgsl" if op.endswith("_grad") else "pool2d.wgsl",
        POOL_COMMON=codegen.template("pool_common.wgsl"),
        PARAMS_BINDING=str(inputs + 1),
        **_FILLS[op],
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
