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


# What pool2d_vec4.wgsl folds differently: _FILLS's forward fills over a vec4 of channels.
_VEC4_FILLS: dict[str, dict[str, str]] = {
    "max_pool2d": {"INIT": "vec4<f32>(f32_neg_inf())", "ACCUMULATE": "max_nan4(acc, v)"},
    "avg_pool2d": {"INIT": "vec4<f32>(0.0)", "ACCUMULATE": "acc + v"},
}


def _pool(
    op: str,
    attrs: dict[str, Any],
    out: OutSpec,
    limits: DeviceLimits,
    image: tuple[int, ...],
    pooled: tuple[int, ...],
    inputs: int,
    lanes: int = 1,
) -> KernelPlan:
    """One invocation per element of the op's result (pooled for forward, image for gradients),
    or with `lanes` 4 (forward, channels in whole vec4s) per vec4 of them: pool2d_vec4.wgsl."""
    codegen.require_float32(op, out)
    count = codegen.numel(out.shape) // lanes
    if count == 0:
        return KernelPlan(())
    (kh, kw), (sh, sw) = attrs["pool_size"], attrs["strides"]
    (pad_top, _), (pad_left, _) = attrs["pads"]
    words = [count, image[0], image[1], image[2], image[3], pooled[1], pooled[2], kh, kw]
    words += [sh, sw, pad_top, pad_left]
    template, key = "pool2d_grad.wgsl" if op.endswith("_grad") else "pool2d.wgsl", op
    fills = _FILLS[op]
    if lanes == 4:
        template, key, fills = "pool2d_vec4.wgsl", f"{op}_vec4", {**fills, **_VEC4_FILLS[op]}
    wgsl = codegen.render(
        template,
        POOL_COMMON=codegen.template("pool_common.wgsl"),
        PARAMS_BINDING=str(inputs + 1),
        **fills,
    )
    bindings = [BufferRef("input", i) for i in range(inputs)] + [codegen.OUTPUT]
    workgroups = codegen.grid(op, codegen.groups_for(count), limits)
    return KernelPlan((codegen.dispatch(key, wgsl, bindings, words, workgroups),))


def _pool_forward(op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits) -> KernelPlan:
    image = out.in_shapes[0]
    lanes = 4 if image[3] % 4 == 0 else 1
    return _pool(op, attrs, out, limits, image, out.shape, inputs=1, lanes=lanes)


def plan_max_pool2d(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    return _pool_forward(op, attrs, out, limits)


def plan_avg_pool2d(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    return _pool_forward(op, attrs, out, limits)


def _windows_tile(attrs: dict[str, Any], image: tuple[int, ...], pooled: tuple[int, ...]) -> bool:
    """Whether the pooling windows cover every input element exactly once."""
    (kh, kw), strides = attrs["pool_size"], attrs["strides"]
    return (
        tuple(strides) == (kh, kw)
        and all(pad == 0 for pair in attrs["pads"] for pad in pair)
        and image[1] == pooled[1] * kh
        and image[2] == pooled[2] * kw
    )


def plan_max_pool2d_grad(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    """pool2d_grad.wgsl's gather per input element, or one invocation per window where the
    windows tile the input (W3s's two 2x2 poolings of a batch of 8 on SwiftShader: 8-26 ms
    against 158-373 ms GPU time a step, in one page on a loaded host)."""
    pooled = out.in_shapes[1]
    if not _windows_tile(attrs, out.shape, pooled) or codegen.numel(out.shape) == 0:
        return _pool(op, attrs, out, limits, out.shape, pooled, inputs=2)
    codegen.require_float32(op, out)
    count = codegen.numel(pooled)
    image = out.shape
    (kh, kw) = attrs["pool_size"]
    words = [count, image[0], image[1], image[2], image[3], pooled[1], pooled[2], kh, kw]
    words += [kh, kw, 0, 0]
    wgsl = codegen.render(
        "max_pool2d_grad_tiles.wgsl",
        POOL_COMMON=codegen.template("pool_common.wgsl"),
        PARAMS_BINDING="3",
        FUNCTIONS=codegen.template("first_max_tap.wgsl"),
    )
    bindings = [BufferRef("input", 0), BufferRef("input", 1), codegen.OUTPUT]
    workgroups = codegen.grid(op, codegen.groups_for(count), limits)
    key = "max_pool2d_grad_tiles"
    return KernelPlan((codegen.dispatch(key, wgsl, bindings, words, workgroups),))


def plan_avg_pool2d_grad(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    return _pool(op, attrs, out, limits, out.shape, out.in_shapes[0], inputs=1)
