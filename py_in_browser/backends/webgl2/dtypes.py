"""What WebGL2's float textures can hold honestly: float32 storage has no float64, and integers
(int32 tensors live in float textures too) are exact only up to 2^24 (2^11 in float16)."""

from __future__ import annotations

import numpy as np

from .. import OutSpec

# The largest magnitude below which every integer has an exact float of the texture format.
EXACT_INTEGER_LIMIT = {False: 2**24, True: 2**11}  # keyed by half (float16 textures)


def _no_float64(where: str) -> TypeError:
    return TypeError(
        f"{where}webgl2 has no float64: create the tensor as float32 "
        "(pib.tensor(x, dtype='float32'))"
    )


def check_upload(array: np.ndarray, half: bool) -> None:
    """Refuses an array the textures would change: float64, or int32 beyond exact floats."""
    if array.dtype == np.float64:
        raise _no_float64("")
    if array.dtype.kind in "iu" and array.size:
        limit = EXACT_INTEGER_LIMIT[half]
        largest = int(np.max(np.abs(array.astype(np.int64))))
        if largest > limit:
            storage = "float16" if half else "float32"
            raise ValueError(
                f"webgl2 stores int32 in {storage} textures, exact only up to {limit}; got "
                f"{largest}: keep integers within +-{limit} or use the webgpu or cpu backend"
            )


def check_result(op: str, out: OutSpec) -> None:
    """Refuses an op whose result would be float64 (a cast to it)."""
    if out.dtype == "float64":
        raise _no_float64(f"{op}: ")


def rounding_loss(values: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The low part of compensated float16 storage (main.frag computes the same for results):
    values - hi, or -0 where that is nothing or hi is not finite (inf - inf would read back as
    NaN); -0 leaves every sum hi + lo, signed zeros included, exactly hi."""
    with np.errstate(invalid="ignore", over="ignore"):
        lost = values - hi
    return np.where(np.isfinite(hi) & (lost != 0), lost, np.float32(-0.0))
