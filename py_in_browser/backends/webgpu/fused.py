"""Primitive "fused": a fusion.py program as ONE elementwise.wgsl kernel.

Each op the program uses becomes a WGSL function whose body is that op's expression from
elementwise.EXPRESSIONS (so a fused step computes exactly what the single-op kernel does, NaN and
inf handling included), and each step a `let` calling it. Values: float -> f32, bool -> u32 0/1
(what the compare expressions give and `where` takes). Inputs of shape () are read once per
invocation; dense ones at i, PER_INVOCATION elements per invocation; broadcast views (an expand,
never materialized) by a strided walk, one element per invocation.

Constants travel in the params (word 4 on), not in the WGSL: the kernel depends only on the
program's structure, so an optimizer update compiled at start-up with default settings
(fusion.common_programs) serves any learning rate, and changing one never recompiles.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ... import fusion
from .. import OutSpec
from . import codegen, elementwise
from .plan import DeviceLimits, KernelPlan

_CONSTANTS_AT = 4  # params word of the first constant (word 0 is the element count)


def _signature(op: str) -> tuple[tuple[str, ...], str]:
    """The WGSL argument types and result type of a program step (fusion.py's value kinds)."""
    if op == fusion.SELECT:
        return ("u32", "f32", "f32"), "f32"
    if op in fusion.UNARY:
        return ("f32",), "f32"
    return ("f32", "f32"), ("u32" if op in fusion.COMPARE else "f32")


def _function(op: str) -> str:
    types, result = _signature(op)
    params = ", ".join(f"{name}: {t}" for name, t in zip("abc", types, strict=False))
    expr = elementwise.EXPRESSIONS[op](types, result)
    return f"fn op_{op}({params}) -> {result} {{ return {expr}; }}"


def _constant_bits(value: float) -> int:
    """The float32 the cpu backend rounds `value` to, bit for bit (past float32's range: inf)."""
    with np.errstate(over="ignore"):
        return int(np.asarray(value, dtype=np.float32).view(np.uint32))


def plan_fused(op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits) -> KernelPlan:
    """out[i] = the program's last step at element i (attrs["program"]: see fusion.py)."""
    program: fusion.Program = attrs["program"]
    count = codegen.numel(out.shape)
    if count == 0:
        return KernelPlan(())
    types = tuple(codegen.wgsl_type(dt, op) for dt in out.in_dtypes)
    hoisted, loads = [], []
    # Broadcast views (attrs["input_strides"], as for the single elementwise ops) are read in
    # place by a strided walk whose params block per input precedes the constants.
    strides = attrs.get("input_strides") or (None,) * len(types)
    modes = [elementwise.input_mode(out.shape, st) for st in strides]
    strided = any(
        mode != "c" for (mode, _), shape in zip(modes, out.in_shapes, strict=True) if shape
    )
    blocks = [w for _, block in modes for w in (block or [0] * elementwise.BLOCK)]
    constants_at = _CONSTANTS_AT + (len(blocks) if strided else 0)
    for k, shape in enumerate(out.in_shapes):
        # Every input is loaded, used or not: an unused binding would vanish from the pipeline's
        # automatic layout and the bind group would no longer match it.
        if shape == ():
            hoisted.append(f"let x{k} = in_{k}[0];")
        elif modes[k][0] != "c":
            offset = _CONSTANTS_AT + elementwise.BLOCK * k
            index = elementwise.input_index(modes[k][0], offset)
            loads.append(f"let x{k} = in_{k}[{index}];")
        else:
            loads.append(f"let x{k} = in_{k}[i];")
    constants: list[int] = []

    def arg(ref: fusion.Ref) -> str:
        where, value = ref
        if where == "input":
            return f"x{value}"
        if where == "step":
            return f"s{value}"
        word = constants_at + len(constants)
        hoisted.append(f"let k{len(constants)} = bitcast<f32>(word({word}u));")
        constants.append(_constant_bits(value))
        return f"k{len(constants) - 1}"

    steps = [
        f"let s{j} = op_{step_op}({', '.join(arg(ref) for ref in args)});"
        for j, (step_op, args) in enumerate(program)
    ]
    body = "\n    ".join([*loads, *steps, f"out[i] = s{len(program) - 1};"])
    functions = "\n".join(_function(name) for name in sorted({step[0] for step in program}))
    hoisted_text = "\n  ".join(hoisted)
    # The pipeline cache trusts equal keys to mean equal WGSL; these parts are all that varies.
    digest = hashlib.sha256("|".join([*types, functions, hoisted_text, body]).encode()).hexdigest()
    key = f"fused:{len(types)}x{len(program)}:{digest[:16]}"
    return elementwise.kernel(
        op,
        key,
        types,
        codegen.wgsl_type(out.dtype, op),
        [count, 0, 0, 0, *(blocks if strided else []), *constants],
        1 if strided else elementwise.PER_INVOCATION,  # strided loads stay one per invocation
        body,
        limits,
        functions=functions,
        hoisted=hoisted_text,
    )
