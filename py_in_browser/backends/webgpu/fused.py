"""Primitive "fused": a fusion.py program as ONE elementwise.wgsl kernel; and several programs
over one element count as one kernel with an output each (plan_fused_group, which the runtime
uses for adjacent fused calls: fused_runs.py).

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
from collections.abc import Hashable, Sequence
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
        (codegen.wgsl_type(out.dtype, op),),
        [count, 0, 0, 0, *(blocks if strided else []), *constants],
        1 if strided else elementwise.PER_INVOCATION,  # strided loads stay one per invocation
        body,
        limits,
        functions=functions,
        hoisted=hoisted_text,
    )


def shared_inputs(reads: Sequence[Sequence[Hashable]]) -> tuple[list[Hashable], list[list[int]]]:
    """The distinct inputs of programs run as one kernel, in order of first appearance, and per
    program the index of each of its inputs among them (programs reading one tensor bind it once)."""
    distinct: list[Hashable] = []
    at: list[list[int]] = []
    for program_reads in reads:
        indices = []
        for read in program_reads:
            if read not in distinct:
                distinct.append(read)
            indices.append(distinct.index(read))
        at.append(indices)
    return distinct, at


def _group_arg(
    ref: fusion.Ref,
    reads: Sequence[int],
    step_names: list[str],
    constants: list[int],
    hoisted: list[str],
) -> str:
    """A program step's argument in a group kernel: the shared input it reads, the let of a
    step, or the constant numbered by its value (hoisted from the params on first use)."""
    where, value = ref
    if where == "input":
        return f"x{reads[value]}"
    if where == "step":
        return step_names[value]
    bits = _constant_bits(value)
    if bits not in constants:
        word = _CONSTANTS_AT + len(constants)
        hoisted.append(f"let k{len(constants)} = bitcast<f32>(word({word}u));")
        constants.append(bits)
    return f"k{constants.index(bits)}"


_GROUP_PLANS: dict[Any, KernelPlan] = {}
_MAX_GROUP_PLANS = 256  # learning-rate schedules change constants every step: keep few


def plan_fused_group(
    programs: Sequence[fusion.Program],
    reads: Sequence[Sequence[int]],
    input_dtypes: Sequence[str],
    scalars: Sequence[bool],
    count: int,
    limits: DeviceLimits,
) -> KernelPlan:
    """out_t[i] = program t's last step at element i, for programs over `count` elements whose
    inputs are the shared inputs (shared_inputs) `reads[t]`: dense over `count` elements, or
    scalars where `scalars` says. Each input is read once per element; a step two programs
    compute alike (same op of the same inputs, constants of equal value, or shared steps) is
    computed once; constants travel in the params, numbered by distinct value."""
    memo = (tuple(programs), tuple(map(tuple, reads)), tuple(input_dtypes), tuple(scalars), count)
    plan = _GROUP_PLANS.get((memo, limits))
    if plan is not None:
        return plan
    types = tuple(codegen.wgsl_type(dt, "fused") for dt in input_dtypes)
    hoisted = [f"let x{k} = in_{k}[0];" for k in range(len(types)) if scalars[k]]
    loads = [f"let x{k} = in_{k}[i];" for k in range(len(types)) if not scalars[k]]
    constants: list[int] = []
    names: dict[tuple[Any, ...], str] = {}  # a step's op and argument names -> its let
    lines: list[str] = []
    results: list[str] = []
    for program, program_reads in zip(programs, reads, strict=True):
        step_names: list[str] = []
        for op, args in program:
            form = (
                op,
                *(_group_arg(r, program_reads, step_names, constants, hoisted) for r in args),
            )
            if form not in names:
                names[form] = f"s{len(names)}"
                lines.append(f"let {names[form]} = op_{op}({', '.join(form[1:])});")
            step_names.append(names[form])
        results.append(step_names[-1])
    outs = ["out"] if len(programs) == 1 else [f"out_{t}" for t in range(len(programs))]
    stores = [f"{out}[i] = {name};" for out, name in zip(outs, results, strict=True)]
    body = "\n    ".join([*loads, *lines, *stores])
    ops = sorted({op for program in programs for op, _ in program})
    functions = "\n".join(_function(op) for op in ops)
    hoisted_text = "\n  ".join(hoisted)
    digest = hashlib.sha256("|".join([*types, functions, hoisted_text, body]).encode()).hexdigest()
    plan = elementwise.kernel(
        "fused",
        f"fused_group:{len(types)}>{len(programs)}:{digest[:16]}",
        types,
        ("f32",) * len(programs),
        [count, 0, 0, 0, *constants],
        elementwise.PER_INVOCATION,
        body,
        limits,
        functions=functions,
        hoisted=hoisted_text,
    )
    if len(_GROUP_PLANS) >= _MAX_GROUP_PLANS:
        _GROUP_PLANS.clear()
    _GROUP_PLANS[(memo, limits)] = plan
    return plan
