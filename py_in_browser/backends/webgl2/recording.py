"""What a recorded train step is on WebGL2: its uploads and draws, the program bridge.js keeps to
replay them in one call, and a signature that says whether two recordings computed the same step.

Python captures what an eager step did (recorder.py drives that); bridge.js keeps the command list
(constants included) and replays it with new batch data written into the recorded input textures.
Every texture a recording names is retained (not pooled for others) until it is dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import wire
from .epilogues import dead_draws


@dataclass
class RecordingBuilder:
    """What happened between begin_recording and finish_recording."""

    draws: list[list[Any]] = field(default_factory=list)  # draw commands, in order
    uploads: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (texture id, padded data)
    order: list[tuple[str, int]] = field(default_factory=list)  # ("draw" | "upload", index)
    droppable: dict[int, Any] = field(default_factory=dict)  # draws a fused draw made redundant


@dataclass(frozen=True)
class Recording:
    id: int
    inputs: tuple[Any, ...]  # handles rewritten on each replay
    state_in: tuple[Any, ...]  # handles the step read its variables from
    state_out: tuple[Any, ...]  # handles the step left its variables' new values in
    swappable: tuple[bool, ...]  # per state pair: may a replay swap instead of copying in
    outputs: tuple[Any, ...]  # handles copied out after each replay (the loss)
    textures: frozenset[int]  # every texture id the commands name
    signature: Any
    lendable: tuple[bool, ...] = ()  # per state pair: may a replay read a caller's textures
    movable: tuple[bool, ...] = ()  # per output: may a replay hand it out by a swap, not a copy


def texture_ids(builder: RecordingBuilder) -> set[int]:
    ids = {tex for tex, _ in builder.uploads}
    for draw in builder.draws:
        ids.add(draw[wire.DRAW_TARGET])
        ids.update(draw[wire.DRAW_MORE_TARGETS])  # a low part, or a block kernel's others
        for tex, lo, *_ in draw[wire.DRAW_INPUTS]:
            ids.add(tex)
            if lo >= 0:
                ids.add(lo)
    return ids


def drop_dead_draws(builder: RecordingBuilder, observable: Any) -> None:
    """Leaves out the droppable draws whose results nothing reads (epilogues.dead_draws)."""
    if not builder.droppable:
        return
    commands: list[Any] = []
    for kind, index in builder.order:
        if kind == "draw":
            commands.append(builder.draws[index])
        else:
            tex, _ = builder.uploads[index]
            commands.append([wire.UPLOAD, tex, 0])
    dead = dead_draws(commands, set(builder.droppable), observable)
    kept_draws: list[Any] = []
    order: list[tuple[str, int]] = []
    for position, (kind, index) in enumerate(builder.order):
        if kind == "upload":
            order.append((kind, index))
        elif position not in dead:
            order.append(("draw", len(kept_draws)))
            kept_draws.append(builder.draws[index])
    builder.draws, builder.order = kept_draws, order
    builder.droppable.clear()


def merge_fused(builder: RecordingBuilder, merge: Callable[[list[Any]], list[Any]]) -> None:
    """Draws adjacent fused draws as one multi-target draw (`merge`: DrawQueue.merge_fused);
    uploads stay where they were."""
    commands: list[Any] = [
        builder.draws[index] if kind == "draw" else [wire.UPLOAD, builder.uploads[index][0], index]
        for kind, index in builder.order
    ]
    builder.draws, builder.order = [], []
    for command in merge(commands):
        if command[0] == wire.UPLOAD:
            builder.order.append(("upload", command[2]))  # its third field: the upload's index
        else:
            builder.order.append(("draw", len(builder.draws)))
            builder.draws.append(command)


def _textures(handle: Any) -> tuple[Any, ...]:
    return (handle.texture,) if handle.lo is None else (handle.texture, handle.lo)


def first_writes(builder: RecordingBuilder) -> set[int]:
    """Textures whose first use in the step is a write (a draw's target, an upload): the step
    never reads what they held before it."""
    seen: set[int] = set()
    written: set[int] = set()
    for kind, index in builder.order:
        if kind == "upload":
            tex = builder.uploads[index][0]
            if tex not in seen:
                written.add(tex)
            seen.add(tex)
            continue
        draw = builder.draws[index]
        for tex, lo, *_ in draw[wire.DRAW_INPUTS]:
            seen.update((tex, lo) if lo >= 0 else (tex,))
        for tex in (draw[wire.DRAW_TARGET], *draw[wire.DRAW_MORE_TARGETS]):
            if tex not in seen:
                written.add(tex)
            seen.add(tex)
    return written


def swappable(
    builder: RecordingBuilder, inputs: list[Any], state: list[tuple[Any, Any]], outputs: list[Any]
) -> tuple[bool, ...]:
    """Per state pair (before, after): whether a replay may bring a variable that holds the
    `after` textures of the last replay back into `before` by exchanging the two textures (no
    draw) instead of copying. Sound when the step overwrites `after` before reading it (so
    what `after` held when the replay starts is never seen: the old `before` values may go
    there), both have one layout, and no other role (input, output, another pair) names
    either texture."""
    written = first_writes(builder)
    named: dict[int, int] = {}
    for handle in [*inputs, *outputs, *(h for pair in state for h in pair)]:
        for tex in _textures(handle):
            named[tex.id] = named.get(tex.id, 0) + 1
    result = []
    for before, after in state:
        ins, outs = _textures(before), _textures(after)
        result.append(
            len(ins) == len(outs)
            and all(
                a.layout == b.layout and a.half == b.half for a, b in zip(ins, outs, strict=True)
            )
            and all(named[t.id] == 1 and t.id in written for t in outs)
            and all(named[t.id] == 1 for t in ins)
        )
    return tuple(result)


def lendable(
    builder: RecordingBuilder, inputs: list[Any], state: list[tuple[Any, Any]], outputs: list[Any]
) -> tuple[bool, ...]:
    """Per state pair: whether the step only reads it (before and after are the same textures,
    which no draw or upload of the step writes and no other role names), so that a replay may
    lend it the caller's textures of the same layout: exchanged in for the replay and back
    after it, two swaps instead of a copy draw (predict's input tensor, forward_replay.py)."""
    written = {tex for tex, _ in builder.uploads}
    for draw in builder.draws:
        written.update((draw[wire.DRAW_TARGET], *draw[wire.DRAW_MORE_TARGETS]))
    named: dict[int, int] = {}
    roles = [{t.id for t in _textures(h)} for h in [*inputs, *outputs]]
    roles += [{t.id for h in pair for t in _textures(h)} for pair in state]
    for ids in roles:
        for tex in ids:
            named[tex] = named.get(tex, 0) + 1
    result = []
    for before, after in state:
        held = [t.id for t in _textures(before)]
        same = held == [t.id for t in _textures(after)]
        result.append(same and all(named[t] == 1 and t not in written for t in held))
    return tuple(result)


def movable(
    builder: RecordingBuilder, inputs: list[Any], state: list[tuple[Any, Any]], outputs: list[Any]
) -> tuple[bool, ...]:
    """Per output: whether a replay may hand it to the caller by exchanging its textures with
    new ones of the same layout (a swap, no copy draw): sound when the step overwrites them
    before reading them (what they hold when a replay starts is never seen) and no other role
    names them, as for swappable state."""
    written = first_writes(builder)
    named: dict[int, int] = {}
    for handle in [*inputs, *outputs, *(h for pair in state for h in pair)]:
        for tex in _textures(handle):
            named[tex.id] = named.get(tex.id, 0) + 1
    return tuple(
        handle.repeat == 1 and all(named[t.id] == 1 and t.id in written for t in _textures(handle))
        for handle in outputs
    )


def signature(builder: RecordingBuilder, inputs: list[Any], state: list[tuple[Any, Any]]) -> str:
    """The step with texture ids replaced by roles: inputs and state by position, constants by
    their data (host-side randomness shows up here), other textures by first appearance."""
    names: dict[int, str] = {}
    for k, handle in enumerate(inputs):
        for part, tex in (("", handle.texture), ("lo", handle.lo)):
            if tex is not None:
                names[tex.id] = f"input{k}{part}"
    for k, (before, _) in enumerate(state):
        for part, tex in (("", before.texture), ("lo", before.lo)):
            if tex is not None:
                names.setdefault(tex.id, f"state{k}{part}")

    def name(tex: int) -> str:
        return names.setdefault(tex, f"t{len(names)}")

    steps: list[Any] = []
    for kind, index in builder.order:
        if kind == "upload":
            tex, data = builder.uploads[index]
            is_input = name(tex).startswith("input")
            steps.append(["upload", name(tex), "" if is_input else data.tobytes().hex()])
        else:
            _, key, out, more, size, ins, uniforms = builder.draws[index][: wire.DRAW_LABEL]
            roles = [[name(t), name(lo) if lo >= 0 else "", *rest] for t, lo, *rest in ins]
            steps.append([key, name(out), [name(t) for t in more], size, roles, uniforms])
    return json.dumps(steps)


def resident_constants(builder: RecordingBuilder, roles: set[int]) -> set[int]:
    """Textures the step fills with a constant upload and nothing else writes: uploaded once, as
    their first use, never a draw's target, and in no role a replay swaps, lends or copies
    (`roles`: the inputs', state's and outputs' textures). The recorded step's own upload left
    the constant there, and the recording keeps the texture to itself, so it still holds it at
    every replay: the replay need not upload it again."""
    uploads: dict[int, int] = {}
    for tex, _ in builder.uploads:
        uploads[tex] = uploads.get(tex, 0) + 1
    drawn: set[int] = set()
    for draw in builder.draws:
        drawn.update((draw[wire.DRAW_TARGET], *draw[wire.DRAW_MORE_TARGETS]))
    first = first_writes(builder)
    return {
        tex
        for tex, count in uploads.items()
        if count == 1 and tex in first and tex not in drawn and tex not in roles
    }


def replay_program(
    builder: RecordingBuilder, inputs: list[Any], roles: set[int]
) -> tuple[str, np.ndarray]:
    """The recording as bridge.js keeps it: draws and constant uploads, the constants' data in one
    float32 array. Input uploads are left out (each replay uploads its batch just before), and so
    are the constants their textures keep (resident_constants; `roles` as it takes them)."""
    input_ids = {h.texture.id for h in inputs} | {h.lo.id for h in inputs if h.lo is not None}
    resident = resident_constants(builder, roles)
    commands: list[Any] = []
    constants: list[np.ndarray] = []
    offset = 0
    for kind, index in builder.order:
        if kind == "draw":
            commands.append(builder.draws[index])
            continue
        tex, data = builder.uploads[index]
        if tex not in input_ids and tex not in resident:
            commands.append([wire.UPLOAD, tex, offset])
            constants.append(data)
            offset += data.size
    staging = np.concatenate(constants) if constants else np.zeros(1, np.float32)
    return json.dumps(commands), staging
