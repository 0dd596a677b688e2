"""Adjacent fused calls over one element count, dispatched as one kernel with an output each.

Why: an optimizer updates each variable with one fused program per rule, back to back, all
reading the same tensors (Adam: the weight's rule reads w, m, v, g, two step scalars and the
finite-step gate; m's and v's read m or v, g and the gate). As three kernels a step read g three
times, recomputed the new m and v inside the weight's rule, and paid three dispatches per
variable: on SwiftShader about a third of W2's kernel time. As one kernel
(fused.plan_fused_group) each input is read once and each shared step computed once. webgl2
does the same with multi-target draws (webgl2/multi_target.py).

The runtime holds a fused call back (FusedRun) instead of dispatching it, while the calls after
it join it; anything else it is asked to do first dispatches what waits, so commands keep
Python's order. Calls join while they stay the start of a registered group (fusion.common_groups,
its programs compared without their constants' values), every input is dense (a broadcast view
keeps its call single), their outputs have one element count and no call reads an earlier
one's output. A run goes out as one kernel where that is a registered group's kernel, which the
warm-up compiles (only for groups whose inputs and outputs fit the device's storage bindings):
joining never costs a compile inside a step. Anything else goes out one kernel per call, as
before.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import cache

from ... import fusion
from .. import OutSpec
from . import codegen, fused, kernels
from .buffers import GpuHandle
from .plan import DeviceLimits, Dispatch, KernelPlan


@dataclass(frozen=True)
class FusedCall:
    """A fused call held back: its program, inputs, output spec and the handle it returned."""

    program: fusion.Program
    inputs: tuple[GpuHandle, ...]
    out: OutSpec
    result: GpuHandle


def _identity(handle: GpuHandle) -> tuple[int, tuple[int, ...]]:
    return handle.id, handle.shape


def can_wait(inputs: list[GpuHandle], out: OutSpec) -> bool:
    """Whether a fused call may wait in a run: dense inputs and a float32 output with elements."""
    return (
        out.dtype == "float32"
        and codegen.numel(out.shape) > 0
        and all(h.strides is None for h in inputs)
    )


class FusedRun:
    """The fused calls waiting to be dispatched, in call order."""

    def __init__(self) -> None:
        self.calls: list[FusedCall] = []

    def __bool__(self) -> bool:
        return bool(self.calls)

    def joins(self, call: FusedCall) -> bool:
        """Whether `call` can go in one kernel with the calls waiting (the module docstring)."""
        if not self.calls:
            return True
        outputs = {c.result.id for c in self.calls}
        structure = tuple(_structure(c.program) for c in [*self.calls, call])
        return (
            structure in _group_starts()
            and codegen.numel(call.out.shape) == codegen.numel(self.calls[0].out.shape)
            and not outputs & {h.id for h in call.inputs}
        )

    def add(self, call: FusedCall) -> None:
        self.calls.append(call)

    def take(self) -> list[FusedCall]:
        calls, self.calls = self.calls, []
        return calls


def group_plan(calls: list[FusedCall], limits: DeviceLimits) -> tuple[KernelPlan, list[GpuHandle]]:
    """The one kernel of `calls` (out_t: call t's output) and the handles its inputs bind."""
    distinct, reads = fused.shared_inputs([[_identity(h) for h in c.inputs] for c in calls])
    handles = {_identity(h): h for c in calls for h in c.inputs}
    inputs = [handles[key] for key in distinct]  # type: ignore[index]
    plan = fused.plan_fused_group(
        [c.program for c in calls],
        reads,
        [h.dtype for h in inputs],
        [h.shape == () for h in inputs],
        codegen.numel(calls[0].out.shape),
        limits,
    )
    return plan, inputs


Dispatchable = tuple[KernelPlan, list[GpuHandle], list[GpuHandle]]


def dispatches(
    calls: list[FusedCall], defined: Callable[[str], bool], limits: DeviceLimits
) -> list[Dispatchable]:
    """(plan, inputs, outputs) to emit for a run, in order: one kernel for all when its group
    kernel is `defined`, else one per call."""
    if len(calls) > 1:
        plan, inputs = group_plan(calls, limits)
        if defined(plan.dispatches[0].key):
            return [(plan, inputs, [c.result for c in calls])]
    return [
        (kernels.plan("fused", {"program": c.program}, c.out, limits), list(c.inputs), [c.result])
        for c in calls
    ]


def _structure(program: fusion.Program) -> tuple[object, ...]:
    """A program with its constants' values left out (a group kernel takes any values)."""
    return tuple(
        (op, tuple(("const", None) if where == "const" else (where, v) for where, v in args))
        for op, args in program
    )


@cache
def _group_starts() -> frozenset[tuple[object, ...]]:
    """Every start of every registered group, by structure: what a run may grow into."""
    return frozenset(
        tuple(_structure(program) for program, _ in group[:end])
        for group in fusion.common_groups()
        for end in range(1, len(group) + 1)
    )


@cache
def group_keys(limits: DeviceLimits) -> frozenset[str]:
    """The keys of every registered group's kernel on a device of these limits: the runs that
    go out as one kernel."""
    return frozenset(d.key for t in (True, False) for _, d in _fitting_groups(limits, t))


def warmup_kernels(limits: DeviceLimits, typical: bool) -> list[tuple[str, str]]:
    """(key, wgsl) of the group kernels the warm-up compiles (_fitting_groups)."""
    return [(d.key, d.wgsl) for _, d in _fitting_groups(limits, typical)]


def grouped_programs(limits: DeviceLimits, typical: bool) -> set[fusion.Program]:
    """The programs those group kernels run, which then need no kernel of their own."""
    return {program for group, _ in _fitting_groups(limits, typical) for program, _ in group}


@cache
def _fitting_groups(
    limits: DeviceLimits, typical: bool
) -> tuple[tuple[fusion.Group, Dispatch], ...]:
    """Each registered group (fusion.common_groups: an optimizer's rules for one variable, its
    step rules) whose kernel fits the device's storage bindings, with that kernel; `typical`:
    only the groups of typical programs (the default Adam's, which the first step of a typical
    model runs), else the others. Which inputs are scalars or bool comes from each program's
    registered input kinds (fusion.register_common)."""
    kinds_of = dict(fusion.common_programs())
    typical_ones = set(fusion.typical_programs())
    found: list[tuple[fusion.Group, Dispatch]] = []
    for group in fusion.common_groups():
        members = [(program, names, kinds_of[program]) for program, names in group]
        if all((p, k) in typical_ones for p, _, k in members) != typical:
            continue
        distinct, reads = fused.shared_inputs([names for _, names in group])
        if len(distinct) + len(group) > limits.max_storage_buffers:
            continue
        kind: dict[Hashable, str] = {
            n: k for _, names, kinds in members for n, k in zip(names, kinds, strict=True)
        }
        if any(k in ("rows", "filled") for k in kind.values()):
            continue  # broadcast views: such calls never wait in a run (can_wait)
        plan = fused.plan_fused_group(
            [program for program, _ in group],
            reads,
            ["bool" if kind[name] in ("gate", "mask") else "float32" for name in distinct],
            [kind[name] in ("scalar", "gate") for name in distinct],
            64,  # any count: it travels in the params
            limits,
        )
        found.append((group, plan.dispatches[0]))
    return tuple(found)
