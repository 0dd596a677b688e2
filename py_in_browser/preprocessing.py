"""How a camera frame or image becomes a model's input: a described, versioned, JSON-able config.

A model file carries it (model_file.py: the header's "preprocessing" object), so a model trained
in the app is used elsewhere with exactly the preprocessing it was trained on. pib.data applies it
on the device (one affine_sample kernel, then the normalisation); this module is data only.

The JSON form, schema "py_in_browser.image_preprocessing" version 1:

    {"schema": "py_in_browser.image_preprocessing", "version": 1,
     "size": [height, width],          the model's input size in pixels
     "mirror": false,                  flip left-right first (a selfie preview is mirrored)
     "crop": "centre",                 "centre": the largest centred part of the frame with the
                                       input's aspect ratio; "none": the whole frame, stretched
     "mean": [0, 0, 0], "std": [1, 1, 1]}   per channel R, G, B

The steps, in order: pixel bytes p become p / 255 (alpha is dropped); the frame is mirrored and
cropped as said and resized to `size` by bilinear sampling at the output pixels' centres (edges
clamped; pib.affine_sample states the exact rule); then each channel c becomes
(v - mean[c]) / std[c].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SCHEMA = "py_in_browser.image_preprocessing"
VERSION = 1
CROPS = ("centre", "none")
CHANNELS = 3
MAX_SIDE = 4096
_KEYS = {"schema", "version", "size", "mirror", "crop", "mean", "std"}


@dataclass(frozen=True)
class ImagePreprocessing:
    """Frames to model inputs: mirror, crop, bilinear resize to `size`, (v - mean) / std.

    `size` is (height, width); `mean` and `std` are per RGB channel, applied to values in [0, 1]
    (pixel bytes / 255). `to_dict` gives the JSON form model files carry, `from_dict` reads and
    validates it (module docstring: the schema).

    Example:
        >>> prep = pib.data.ImagePreprocessing(size=(32, 32), mirror=True, mean=(0.5,) * 3)
        >>> prep.to_dict()["size"], prep.to_dict()["version"]
        ([32, 32], 1)
        >>> pib.data.ImagePreprocessing.from_dict(prep.to_dict()) == prep
        True
    """

    size: tuple[int, int]
    mirror: bool = False
    crop: str = "centre"
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)

    def __post_init__(self) -> None:
        size = tuple(self.size)
        if len(size) != 2 or not all(isinstance(d, int) and 1 <= d <= MAX_SIDE for d in size):
            raise ValueError(f"size must be (height, width), ints in [1, {MAX_SIDE}]; got {size}")
        if not isinstance(self.mirror, bool):
            raise ValueError(f"mirror must be true or false, got {self.mirror!r}")
        if self.crop not in CROPS:
            raise ValueError(f"crop must be one of {list(CROPS)}, got {self.crop!r}")
        mean, std = _channels(self.mean, "mean"), _channels(self.std, "std")
        if any(s <= 0 for s in std):
            raise ValueError(f"std must be positive, got {list(std)}")
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (module docstring), as model files store it."""
        return {
            "schema": SCHEMA,
            "version": VERSION,
            "size": list(self.size),
            "mirror": self.mirror,
            "crop": self.crop,
            "mean": list(self.mean),
            "std": list(self.std),
        }

    @classmethod
    def from_dict(cls, value: Any) -> ImagePreprocessing:
        """Reads the JSON form; ValueError naming the problem for anything else."""
        if not isinstance(value, dict) or value.get("schema") != SCHEMA:
            raise ValueError(f"image preprocessing must be an object with schema {SCHEMA!r}")
        if value.get("version") != VERSION:
            raise ValueError(
                f"image preprocessing version {value.get('version')!r} is not supported "
                f"(this engine reads version {VERSION})"
            )
        unknown = set(value) - _KEYS
        if unknown:
            raise ValueError(f"image preprocessing has unknown keys {sorted(unknown)}")
        if "size" not in value:
            raise ValueError("image preprocessing needs size [height, width]")
        return cls(
            size=tuple(value["size"]),
            mirror=value.get("mirror", False),
            crop=value.get("crop", "centre"),
            mean=value.get("mean", (0.0,) * CHANNELS),
            std=value.get("std", (1.0,) * CHANNELS),
        )

    def affine_row(self, frame_height: int, frame_width: int) -> list[float]:
        """pib.affine_sample's params row [a, b, c, d, e, f, gain, offset] that mirrors, crops
        and resizes a frame of this size (gain 1, offset 0: normalisation is separate)."""
        out_h, out_w = self.size
        scale_x = scale_y = 1.0
        if self.crop == "centre":
            # The share of the frame's width (height) the crop keeps: the input's aspect ratio.
            kept_width = frame_height * out_w / out_h
            if kept_width < frame_width:
                scale_x = kept_width / frame_width
            else:
                scale_y = frame_width * out_h / out_w / frame_height
        return [-scale_x if self.mirror else scale_x, 0.0, 0.0, 0.0, scale_y, 0.0, 1.0, 0.0]

    def uniform_normalisation(self) -> tuple[float, float] | None:
        """(gain, offset) when every channel has the same mean and std: then the normalisation
        folds into affine_sample's gain and offset (one kernel); None otherwise."""
        if len(set(self.mean)) == 1 and len(set(self.std)) == 1:
            return 1.0 / self.std[0], -self.mean[0] / self.std[0]
        return None


def _channels(values: Any, name: str) -> tuple[float, float, float]:
    items = tuple(values) if isinstance(values, list | tuple) else ()
    if len(items) != CHANNELS or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in items
    ):
        raise ValueError(f"{name} must be {CHANNELS} finite numbers (R, G, B), got {values!r}")
    return (float(items[0]), float(items[1]), float(items[2]))


def check(value: Any) -> dict[str, Any]:
    """The JSON form after validation (model_file.py calls this for objects with our schema)."""
    return ImagePreprocessing.from_dict(value).to_dict()
