"""Primitive random_uniform: counter_hash.wgsl's hash filled into the elementwise kernel."""

from __future__ import annotations

from typing import Any

from .. import OutSpec, counter_hash
from . import codegen, elementwise
from .plan import DeviceLimits, KernelPlan


def plan_random_uniform(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    """out[i] = value i of draw (seed, stream, counter); the counter (input 0, an f32 or i32
    scalar) is read on the device once per invocation, so a replayed step that advanced it
    draws new numbers with the same kernel and params."""
    count = codegen.numel(out.shape)
    if count == 0:
        return KernelPlan(())
    bits = attrs["bits"]
    key = counter_hash.stream_key(attrs["seed"], attrs["stream"])
    words = [count, key, 32 - bits, codegen.f32_bits(2.0**-bits)]
    counter_type = codegen.wgsl_type(out.in_dtypes[0], op)
    return elementwise.kernel(
        op,
        f"random_uniform:{counter_type}",
        (counter_type,),
        ("f32",),
        words,
        elementwise.PER_INVOCATION,
        "out[i] = counter_uniform(i, draw_key);",
        limits,
        functions=codegen.template("counter_hash.wgsl"),
        hoisted="let draw_key = lowbias32(word(1u) ^ u32(in_0[0]));",
    )
