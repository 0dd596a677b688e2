"""WGSL kernel plans for every primitive: `plan(op, attrs, out, limits)`, memoized per call site.

Each primitive's planner is registered in the backends' kernel table (backends.register_kernel)
and looked up there. Pure generators: no GPU, no js. The runtime turns each KernelPlan into
dispatches; the native tests (tests_unit/test_wgsl_kernels.py) run the same plans with wgpu-py
against numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import OutSpec, kernel_for, register_kernel
from . import (
    codegen,
    column_sums,
    depthwise,
    elementwise,
    fused,
    images,
    linalg,
    movement,
    pooling,
    random_draws,
    reductions,
)
from .plan import DeviceLimits, KernelPlan

NAME = "webgpu"

Planner = Callable[[str, dict[str, Any], OutSpec, DeviceLimits], KernelPlan]

# Registered below into backends.KERNELS, where plan() looks them up.
PLANNERS: dict[str, Planner] = {
    **dict.fromkeys(elementwise.EXPRESSIONS, elementwise.plan_elementwise),
    "fused": fused.plan_fused,
    "expand": movement.plan_expand,
    "reshape": movement.plan_reshape,
    "transpose": movement.plan_transpose,
    "slice": movement.plan_slice,
    "pad": movement.plan_pad,
    "concat": movement.plan_concat,
    "reduce_sum": column_sums.plan_reduce_sum,
    "reduce_max": reductions.plan_reduce_max,
    "argmax": reductions.plan_argmax,
    "matmul": linalg.plan_matmul,
    "conv2d": linalg.plan_conv2d,
    "conv2d_backprop_input": linalg.plan_conv2d_backprop_input,
    "conv2d_backprop_filter": linalg.plan_conv2d_backprop_filter,
    "depthwise_conv2d": depthwise.plan_depthwise_conv2d,
    "max_pool2d": pooling.plan_max_pool2d,
    "max_pool2d_grad": pooling.plan_max_pool2d_grad,
    "avg_pool2d": pooling.plan_avg_pool2d,
    "avg_pool2d_grad": pooling.plan_avg_pool2d_grad,
    "random_uniform": random_draws.plan_random_uniform,
    "affine_sample": images.plan_affine_sample,
}
for _op, _planner in PLANNERS.items():
    register_kernel(NAME, _op)(_planner)

DEFAULT_LIMITS = DeviceLimits()
MAX_CACHED_PLANS = 4096
_PLANS: dict[Any, KernelPlan] = {}


def reads_views_in_place(op: str) -> bool:
    """Whether `op`'s kernel reads broadcast views (attrs["input_strides"]) itself; runtimes
    materialize views into dense buffers for every other kernel."""
    return op in elementwise.EXPRESSIONS or op == "fused"


def _freeze(value: Any) -> Any:
    """Attrs as a hashable value: lists become tuples, dicts sorted item tuples, and floats
    their exact bits (so -0.0 and 0.0, or NaN fill values, never share a cached plan)."""
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def plan(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits = DEFAULT_LIMITS
) -> KernelPlan:
    """The kernel plan of primitive `op` for these attrs, shapes, dtypes and device limits.

    Raises TypeError for a dtype WebGPU cannot hold (float64) and ValueError for a tensor larger
    than one storage binding or a dispatch larger than the device allows.
    """
    key = (op, _freeze(attrs), out, limits)
    found = _PLANS.get(key)
    if found is None:
        if len(_PLANS) >= MAX_CACHED_PLANS:  # a model has far fewer distinct calls than this
            _PLANS.clear()
        found = _PLANS[key] = _build(op, attrs, out, limits)
    return found


def _build(op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits) -> KernelPlan:
    planner: Planner = kernel_for(NAME, op)
    for dtype in (*out.in_dtypes, out.dtype):
        codegen.wgsl_type(dtype, op)
    codegen.check_spec_fits(op, out, limits)
    return planner(op, attrs, out, limits)
