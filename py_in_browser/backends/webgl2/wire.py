"""The wire format bridge.js reads: command lists as JSON, their data as one float32 array, and
the protocol (opcodes, field orders, limits, uniform names) bridge.js takes from here at start-up."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from . import blocks
from .texture_layout import Layout

Command = list[Any]

# What each command is, by its first field; its fields are named in FIELDS.
TEXTURE = "texture"  # create a texture (half: float16 storage)
UPLOAD = "upload"  # fill a texture from the staging array, from element `offset` on
DELETE = "delete"
REPLAY = "replay"  # run a recorded step
SWAP = "swap"  # exchange the textures behind two ids (a replay's state, instead of a copy draw)
DRAW = "draw"
# A draw: its program key, target texture, more render targets (a float16 low part, a block
# kernel's other targets), the target's element count, its inputs (INPUT_FIELDS each), its
# uniforms ([name, kind, values] each) and the label a profile reports it under.
DRAW_FIELDS = ("opcode", "key", "target", "more_targets", "size", "inputs", "uniforms", "label")
DRAW_KEY = DRAW_FIELDS.index("key")
DRAW_TARGET = DRAW_FIELDS.index("target")
DRAW_MORE_TARGETS = DRAW_FIELDS.index("more_targets")
DRAW_SIZE = DRAW_FIELDS.index("size")
DRAW_INPUTS = DRAW_FIELDS.index("inputs")
DRAW_UNIFORMS = DRAW_FIELDS.index("uniforms")
DRAW_LABEL = DRAW_FIELDS.index("label")
# One input of a draw: its texture, its low part (-1: none), its element count, its repeat.
INPUT_FIELDS = ("texture", "lo", "size", "repeat")
# Inputs one draw samples: input k on texture units 2k and 2k + 1 (its float16 low part), and
# WebGL2 guarantees 16 units.
MAX_INPUTS_PER_DRAW = 8
# A program that samples no low part (block programs: float32 only) has input k on unit k, so
# it may sample up to 16 inputs (a pointwise block reading a 7-pixel depthwise block's targets,
# its filter, a skip and a bias: 10).
MAX_SINGLE_UNIT_INPUTS = 16
# Programs of several fused draws merged into one pass (multi_target.py), one render target per
# draw: a profile counts such a draw as that many calls of its label.
MERGED_KEY = "fused_multi4:"
# A read returns every texture's texels as RGBA floats, whatever its own channel count.
READ_CHANNELS = 4
# bridge.js sets a fence every this many flushes; end_step waits while more than
# MAX_PENDING_FENCES of them are unpassed (back-pressure without reading data).
FENCE_EVERY_FLUSHES = 4
MAX_PENDING_FENCES = 2
# Every command's fields in order (the first is its opcode); INPUT_FIELDS for each draw input.
FIELDS = {
    TEXTURE: ("opcode", "id", "width", "height", "channels", "half"),
    UPLOAD: ("opcode", "id", "offset"),
    DELETE: ("opcode", "id"),
    REPLAY: ("opcode", "id"),
    SWAP: ("opcode", "a", "b"),
    DRAW: DRAW_FIELDS,
}
# The uniforms bridge.js sets itself on every draw (shaders.py and glsl/header.frag declare them):
# input k's sampler u_x<k> (its float16 low part u_x<k>_lo), layout u_l<k> (width, channels,
# elements, repeat) and u_has_lo<k>; the target's layout u_out (width, channels), u_out_size.
UNIFORMS = {
    "input": "u_x",
    "low_part": "_lo",
    "input_layout": "u_l",
    "input_has_low_part": "u_has_lo",
    "target_layout": "u_out",
    "target_size": "u_out_size",
}


def protocol() -> str:
    """What bridge.js's createEngine takes: every constant both sides rely on, from here."""
    return json.dumps(
        {
            "opcodes": {name: name for name in FIELDS},
            "fields": {**FIELDS, "input": INPUT_FIELDS},
            "max_inputs_per_draw": MAX_INPUTS_PER_DRAW,
            "max_single_unit_inputs": MAX_SINGLE_UNIT_INPUTS,
            # The most render targets a draw writes: the largest block (blocks.py).
            "max_render_targets": max(rows * cols for rows, cols in blocks.SHAPES),
            "read_channels": READ_CHANNELS,
            "merged_key": MERGED_KEY,
            "fence_every_flushes": FENCE_EVERY_FLUSHES,
            "uniforms": UNIFORMS,
        }
    )


def texture(texture_id: int, layout: Layout, half: bool) -> Command:
    return [TEXTURE, texture_id, layout.width, layout.height, layout.channels, int(half)]


def draw(
    key: str,
    target: int,
    more_targets: list[int],
    size: int,
    inputs: list[list[int]],
    uniforms: list[list[Any]],
    label: str,
) -> Command:
    """A draw command, its fields in DRAW_FIELDS order."""
    return [DRAW, key, target, more_targets, size, inputs, uniforms, label]


def payload(
    programs: dict[str, str], commands: list[Command], profile: bool, staging: list[np.ndarray]
) -> tuple[str, np.ndarray]:
    """What one JS call carries: new programs' sources, the commands and whether to time them
    (JSON), and the upload data the commands point into (one float32 array)."""
    text = json.dumps({"programs": programs, "commands": commands, "profile": profile})
    data = np.concatenate(staging) if staging else np.zeros(1, np.float32)
    return text, data


def unpack(rgba: np.ndarray, layout: Layout) -> np.ndarray:
    """Logical elements from RGBA texels read back (R layouts use the first channel only)."""
    texels = rgba.reshape(layout.texels, READ_CHANNELS)[:, : layout.channels]
    return texels.reshape(-1)[: layout.size]
