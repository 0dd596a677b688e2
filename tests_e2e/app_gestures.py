"""Synthetic "gestures" the app's e2e tests draw themselves: one shape per class, varied in
position, scale and light, as PNG files to upload and as a y4m clip for Chromium's fake camera.

The shapes (a disc, a horizontal bar, a vertical bar) keep their class under a horizontal mirror,
because the app mirrors camera frames (selfie view) but not uploaded images.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

CLASSES = ("disc", "bar", "column")
SIDE = 64


def gesture(kind: str, rng: np.random.Generator) -> np.ndarray:
    """One SIDE x SIDE RGB uint8 image of the shape `kind`."""
    yy, xx = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32)
    scale = rng.uniform(0.75, 1.2)
    cy, cx = rng.uniform(24, 40, size=2)
    if kind == "disc":
        mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= (12 * scale) ** 2
    elif kind == "bar":
        mask = (np.abs(yy - cy) <= 5 * scale) & (np.abs(xx - cx) <= 22 * scale)
    elif kind == "column":
        mask = (np.abs(xx - cx) <= 5 * scale) & (np.abs(yy - cy) <= 22 * scale)
    else:
        raise ValueError(kind)
    background = rng.uniform(10, 70)
    light = rng.uniform(170, 250)
    tint = rng.uniform(0.85, 1.0, size=3)
    image = np.where(mask[..., None], light * tint, background)
    image = image + rng.normal(0, 6, size=image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def png(image: np.ndarray) -> bytes:
    """A minimal RGB PNG (8 bits, no filter) of an (H, W, 3) uint8 image."""
    height, width, _ = image.shape
    raw = b"".join(b"\x00" + image[row].tobytes() for row in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def gesture_set(per_class: int, seed: int) -> dict[str, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {kind: [gesture(kind, rng) for _ in range(per_class)] for kind in CLASSES}


def write_y4m(path: Path, frames: list[np.ndarray], fps: int = 10) -> None:
    """A YUV4MPEG2 (4:2:0) clip of RGB frames, what --use-file-for-fake-video-capture plays."""
    height, width, _ = frames[0].shape
    with path.open("wb") as out:
        out.write(f"YUV4MPEG2 W{width} H{height} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
        for frame in frames:
            rgb = frame.astype(np.float32)
            r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
            y = 0.299 * r + 0.587 * g + 0.114 * b
            u = (b - y) * 0.564 + 128
            v = (r - y) * 0.713 + 128
            out.write(b"FRAME\n")
            out.write(np.clip(y, 0, 255).astype(np.uint8).tobytes())
            for plane in (u, v):
                half = plane.reshape(height // 2, 2, width // 2, 2).mean(axis=(1, 3))
                out.write(np.clip(half, 0, 255).astype(np.uint8).tobytes())
