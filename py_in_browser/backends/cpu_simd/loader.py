"""Loads the SIMD side module through Pyodide's dynamic linker (dlopen via ctypes.CDLL).

The module is a PIC side module (dylink.0) that shares the memory of the running Pyodide module,
so a numpy array's address is a valid pointer for it. Outside Pyodide there is nothing to load;
inside, a missing or broken module is a runtime event and the numpy kernels stay in use.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ...events import record_event
from .kernels import SIGNATURES, SimdKernels

MODULE = Path(__file__).with_name("kernels.wasm")
# Pointers of every kind (data read or written, metadata, pointer tables) are addresses.
_CTYPES = {"i": ctypes.c_int32, **dict.fromkeys("poma", ctypes.c_size_t)}


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def _empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    return np.empty(shape, dtype=dtype)


def load() -> SimdKernels | None:
    if sys.platform != "emscripten":
        return None
    if not MODULE.is_file():
        record_event("simd_unavailable", 0, reason=f"{MODULE.name} is not in the engine wheel")
        return None
    try:
        library = ctypes.CDLL(str(MODULE))
        exports = {}
        for name, (arguments, result) in SIGNATURES.items():
            export = getattr(library, name)
            export.argtypes = [_CTYPES[kind] for kind in arguments]
            export.restype = _CTYPES[result] if result else None
            exports[name] = export
    except (OSError, AttributeError) as exc:
        record_event("simd_unavailable", 0, reason=f"{MODULE.name} did not load: {exc}")
        return None
    return SimdKernels(exports, _address, _empty)
