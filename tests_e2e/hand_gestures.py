"""Hand-like images of three gestures, drawn with numpy (in CPython or in the engine's worker):
a fist (fingers curled to stubs), two fingers (index and middle up in a V) and an open palm (five
spread), each a skin-toned palm, fingers and wrist over a coloured ground with clutter (discs),
shaded, lit and placed at random. `hand_set(..., **BEYOND)` draws them shifted, scaled and lit
beyond the training draws: the held-out set of the transfer-learning accuracy test. It is not
app_gestures.py's set (discs and bars), which the app's own tests train on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

GESTURES = ("fist", "two fingers", "open palm")
SIDE = 224  # the hand model's input side
TRAINING: dict[str, Any] = {"shift": 0.08, "scale": (0.85, 1.15), "light": (0.75, 1.1)}
BEYOND: dict[str, Any] = {"shift": 0.16, "scale": (0.7, 1.3), "light": (0.55, 1.3)}
# (angle from the palm's top in radians, length, half width) of each finger, per gesture.
FINGERS = {
    "fist": [(-0.45, 6, 10), (-0.15, 6, 10), (0.12, 6, 10), (0.38, 6, 10), (-1.2, 18, 9)],
    "two fingers": [(-0.3, 62, 9), (0.05, 66, 9), (0.3, 6, 9), (0.5, 6, 9), (-1.1, 20, 9)],
    "open palm": [(-0.63, 55, 9), (-0.21, 66, 9), (0.17, 62, 9), (0.53, 50, 9), (-1.25, 42, 10)],
}


def capsule(
    yy: np.ndarray, xx: np.ndarray, a: tuple[float, float], b: tuple[float, float], r: float
) -> np.ndarray:
    """The pixels within `r` of the segment a-b ((y, x) points)."""
    dy, dx = b[0] - a[0], b[1] - a[1]
    t = np.clip(((yy - a[0]) * dy + (xx - a[1]) * dx) / (dy * dy + dx * dx + 1e-9), 0, 1)
    return (yy - (a[0] + t * dy)) ** 2 + (xx - (a[1] + t * dx)) ** 2 <= r * r


def hand(
    kind: str,
    rng: np.random.Generator,
    shift: float,
    scale: tuple[float, float],
    light: tuple[float, float],
) -> np.ndarray:
    """One SIDE x SIDE RGB image in [0, 1] (float32) of the gesture `kind`."""
    yy, xx = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32)
    s = rng.uniform(*scale)
    cy = SIDE * (0.58 + rng.uniform(-shift, shift))
    cx = SIDE * (0.5 + rng.uniform(-shift, shift))
    turn = rng.uniform(-0.25, 0.25)
    tone = rng.uniform(0.45, 0.95)
    skin = np.array([tone, tone * rng.uniform(0.7, 0.82), tone * rng.uniform(0.55, 0.7)])
    mask = ((yy - cy) / (52 * s)) ** 2 + ((xx - cx) / (44 * s)) ** 2 <= 1
    for angle, length, width in FINGERS[kind]:
        a = angle + turn
        base = (cy - 40 * s * np.cos(a), cx + 40 * s * np.sin(a))
        tip = (base[0] - length * s * np.cos(a), base[1] + length * s * np.sin(a))
        mask |= capsule(yy, xx, base, tip, width * s)
    mask |= capsule(yy, xx, (cy + 40 * s, cx), (SIDE + 40, cx + 2000 * turn / 100), 34 * s)
    image = np.broadcast_to(rng.uniform(0.1, 0.8, size=3), (SIDE, SIDE, 3)).copy()
    for _ in range(rng.integers(2, 6)):
        r = rng.uniform(8, 40)
        y, x = rng.uniform(0, SIDE, 2)
        image[(yy - y) ** 2 + (xx - x) ** 2 <= r * r] = rng.uniform(0, 1, 3)
    shade = 1 - 0.25 * ((xx - cx) / SIDE)[..., None]
    image = np.where(mask[..., None], skin * shade, image)
    image = image * rng.uniform(*light) + rng.normal(0, 0.03, image.shape)
    return np.clip(image, 0, 1).astype(np.float32)


def hand_set(per_class: int, seed: int, **draw: Any) -> tuple[np.ndarray, np.ndarray]:
    """(images (3 * per_class, SIDE, SIDE, 3), labels) in GESTURES order; `draw`: TRAINING's
    keys (its values by default)."""
    rng = np.random.default_rng(seed)
    settings = {**TRAINING, **draw}
    images = np.stack([hand(kind, rng, **settings) for kind in GESTURES for _ in range(per_class)])
    return images, np.repeat(np.arange(len(GESTURES)), per_class).astype(np.int32)
