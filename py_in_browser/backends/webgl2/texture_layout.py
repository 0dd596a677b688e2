"""Texture layouts: how a tensor's flat elements sit in one 2D texture within MAX_TEXTURE_SIZE."""

from __future__ import annotations

import math
from dataclasses import dataclass

# Below this many elements an RGBA texel per 4 elements saves nothing worth the channel shuffling.
PACK_MIN_ELEMENTS = 1024


class TextureTooLargeError(ValueError):
    """A tensor needs more texels than one texture of the device's MAX_TEXTURE_SIZE can hold."""


@dataclass(frozen=True)
class Layout:
    """Element i of the row-major tensor lives in texel i // channels, channel i % channels;
    texel t is at (t % width, t // width)."""

    width: int
    height: int
    channels: int  # 1 (R32F / R16F) or 4 (RGBA32F / RGBA16F)
    size: int  # logical elements

    @property
    def texels(self) -> int:
        return self.width * self.height

    def bytes(self, bytes_per_channel: int) -> int:
        return self.texels * self.channels * bytes_per_channel


def choose_layout(shape: tuple[int, ...], max_side: int) -> Layout:
    """The layout of a tensor of `shape`, or TextureTooLargeError before anything is drawn.

    Large tensors are RGBA-packed (4 elements per texel, a quarter of the fragments), and so is
    any tensor that one R texture of the limit cannot hold, and any tensor whose innermost
    dimension is a multiple of 4: then every texel holds 4 elements of one row, which the vector
    kernels (matmul, convolutions) read as one vec4. The width follows the innermost
    dimension when that makes a valid texture (rows of a matrix are rows of texels); otherwise
    the texture is as square as possible.
    """
    size = math.prod(shape)
    inner = shape[-1] if shape else 1
    aligned = inner > 0 and inner % 4 == 0  # texels are 4 whole elements of one row
    packed = size >= PACK_MIN_ELEMENTS or size > max_side * max_side or aligned
    channels = 4 if packed else 1
    texels = max(1, math.ceil(size / channels))
    if texels > max_side * max_side:
        raise TextureTooLargeError(
            f"a tensor of shape {shape} ({size} elements) needs {texels} texels, more than one "
            f"{max_side}x{max_side} texture holds (MAX_TEXTURE_SIZE {max_side}); use a smaller "
            "batch or layer"
        )
    if inner > 0 and inner % channels == 0:
        width = inner // channels
        height = texels // width
        if width <= max_side and height <= max_side and width * height == texels:
            return Layout(width, height, channels, size)
    width = min(max_side, math.ceil(math.sqrt(texels)))
    return Layout(width, math.ceil(texels / width), channels, size)
