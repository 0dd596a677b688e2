"""The wire format bridge.js reads: command lists as JSON, their data as one float32 array."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .texture_layout import Layout

Command = list[Any]

# What each command is, by its first field; the other fields follow in this order.
TEXTURE = "texture"  # [TEXTURE, id, width, height, channels, half]: create a texture
UPLOAD = "upload"  # [UPLOAD, id, offset]: fill a texture from the staging array at `offset`
DELETE = "delete"  # [DELETE, id]
REPLAY = "replay"  # [REPLAY, recording id]: run a recorded step
DRAW = "draw"  # see DRAW_FIELDS
# A draw: its program key, target texture, more render targets (a float16 low part, a block
# kernel's other targets), the target's element count, its inputs (INPUT_FIELDS each), its
# uniforms ([name, kind, values] each) and the label a profile reports it under.
DRAW_FIELDS = ("opcode", "key", "target", "more_targets", "size", "inputs", "uniforms", "label")
DRAW_TARGET = DRAW_FIELDS.index("target")
DRAW_MORE_TARGETS = DRAW_FIELDS.index("more_targets")
DRAW_INPUTS = DRAW_FIELDS.index("inputs")
DRAW_LABEL = DRAW_FIELDS.index("label")
# One input of a draw: its texture, its low part (-1: none), its element count, its repeat.
INPUT_FIELDS = ("texture", "lo", "size", "repeat")
# Inputs one draw samples: input k on texture units 2k and 2k + 1 (its float16 low part), and
# WebGL2 guarantees 16 units.
MAX_INPUTS_PER_DRAW = 8
# A read returns every texture's texels as RGBA floats, whatever its own channel count.
READ_CHANNELS = 4


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
