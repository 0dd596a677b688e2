"""Consecutive fused elementwise draws over one output shape merged into one draw that writes a
render target per draw (program "fused_multi4", shaders.py).

Why: an optimizer updates each variable with one fused draw per rule, all reading the same
tensors (Adam: the weight's rule reads w, m, v, g and three scalars; m's and v's read m or v, g
and the gate), so a step fetched every texel of g three times and every scalar texel three
times per fragment, and paid three draws' set-up. One draw with three targets fetches each once:
W2's Adam update of its 784 x 128 weight went from 3 passes to 1 (about 35% less time on
SwiftShader). A step two of the programs share (Adam's weight rule recomputes the new m and v
the m and v rules write) is computed once in that pass (shaders._shared_function).

Draws merge when they are adjacent in the command list, all whole-texel fused programs
("fused4:"; not a compensated float16 one, which writes a low part as its second target), their
targets have one physical shape and element count, no draw of the group reads another's target
(or its own: a single pass cannot read what it writes), and the union of their inputs and their
targets fit one draw (wire.MAX_INPUTS_PER_DRAW, the device's draw buffers).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from ... import fusion
from . import shaders, wire

FUSED_KEY = "fused4:"

# Texture id -> (width, height, channels), None for a texture deleted since.
Physical = Callable[[int], tuple[int, int, int] | None]


def _mergeable(command: wire.Command) -> bool:
    """A whole-texel fused draw without a low part (a "+pair" program writes one as target 1)."""
    if command[0] != wire.DRAW:
        return False
    key = command[wire.DRAW_KEY]
    return key.startswith(FUSED_KEY) and "+" not in key


def _inputs(command: wire.Command) -> list[tuple[int, ...]]:
    return [tuple(fields) for fields in command[wire.DRAW_INPUTS]]


def _constants(command: wire.Command) -> list[float]:
    """A fused draw's constants (the bit patterns kernels.py sends in its uniform u_c)."""
    return next((values for name, _, values in command[wire.DRAW_UNIFORMS] if name == "u_c"), [])


def _joins(group: list[wire.Command], command: wire.Command, physical: Physical, most: int) -> bool:
    """Whether `command` can be drawn in one pass with the group before it."""
    first = group[0]
    target = command[wire.DRAW_TARGET]
    targets = {c[wire.DRAW_TARGET] for c in group} | {target}
    inputs = {fields for c in [*group, command] for fields in _inputs(c)}
    shape = physical(target)
    return (
        command[wire.DRAW_SIZE] == first[wire.DRAW_SIZE]
        and shape is not None
        and shape == physical(first[wire.DRAW_TARGET])
        and len(targets) == len(group) + 1
        and not targets & {fields[0] for fields in inputs}
        and len(inputs) <= wire.MAX_INPUTS_PER_DRAW
        and len(group) + 1 <= most
    )


def merged_key(members: Sequence[tuple[str, Sequence[Hashable], Sequence[float]]]) -> str:
    """The fused_multi4 program of fused programs run as one pass: each member is a fused
    draw's token, what identifies its inputs (equal: one input of the merged draw) and its
    constants' values, numbered by value (equal values, one number: shaders.py computes a step
    two programs share once, and a program compiled for one pattern of equal constants serves
    any values of that pattern, as a fused program serves any values)."""
    inputs: list[Hashable] = []
    values: list[float] = []
    parts, classes = [], []
    for token, reads, constants in members:
        at = []
        for read in reads:
            if read not in inputs:
                inputs.append(read)
            at.append(str(inputs.index(read)))
        parts.append(f"{token}@{'.'.join(at)}")
        for value in constants:
            if value not in values:
                values.append(value)
        classes.append(".".join(str(values.index(value)) for value in constants))
    return wire.MERGED_KEY + ";".join(parts) + "|" + ";".join(classes)


def warmup_keys(draw_buffers: int) -> list[str]:
    """The merged programs of the runs training draws (fusion.common_groups: an optimizer's
    rules for one variable, its step rules) that fit the draw buffers."""
    return [
        merged_key(
            [
                (
                    shaders.fused_token(program, len(names)),
                    names,
                    shaders.fused_constant_bits(program),
                )
                for program, names in group
            ]
        )
        for group in fusion.common_groups()
        if len(group) <= draw_buffers
    ]


def _merged(group: list[wire.Command]) -> wire.Command:
    """One draw of program fused_multi4 for the group: target t is draw t's, its inputs the
    group's distinct inputs in order of appearance, program t's constants renamed u_c<t>."""
    inputs = list(dict.fromkeys(fields for command in group for fields in _inputs(command)))
    uniforms = [
        [f"{name}{t}", *rest]
        for t, command in enumerate(group)
        for name, *rest in command[wire.DRAW_UNIFORMS]
    ]
    first = group[0]
    return wire.draw(
        merged_key(
            [(c[wire.DRAW_KEY].removeprefix(FUSED_KEY), _inputs(c), _constants(c)) for c in group]
        ),
        first[wire.DRAW_TARGET],
        [c[wire.DRAW_TARGET] for c in group[1:]],
        first[wire.DRAW_SIZE],
        [list(fields) for fields in inputs],
        uniforms,
        first[wire.DRAW_LABEL],
    )


def merge_fused_draws(
    commands: Sequence[wire.Command],
    physical: Physical,
    draw_buffers: int,
    compiled: Callable[[str], bool],
) -> list[wire.Command]:
    """`commands` with each run of mergeable fused draws replaced by one multi-target draw (see
    the module docstring) where that program is `compiled` (the warm-up compiles the runs
    training makes, fusion.common_groups: a merge never costs a compile in a step), else by its
    longest such start and the rest; everything else as it was, in order. `physical` gives a
    texture's physical shape, `draw_buffers` the render targets one draw may write."""
    result: list[wire.Command] = []
    group: list[wire.Command] = []

    def close() -> None:
        while group:
            length = next(
                (
                    n
                    for n in range(len(group), 1, -1)
                    if compiled(_merged(group[:n])[wire.DRAW_KEY])
                ),
                1,
            )
            result.append(_merged(group[:length]) if length > 1 else group[0])
            del group[:length]

    for command in commands:
        if _mergeable(command) and group and _joins(group, command, physical, draw_buffers):
            group.append(command)
            continue
        close()
        if _mergeable(command) and command[wire.DRAW_TARGET] not in {
            f[0] for f in _inputs(command)
        }:
            group.append(command)
        else:
            result.append(command)
    close()
    return result
