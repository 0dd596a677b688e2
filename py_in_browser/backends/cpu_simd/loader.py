"""Loads the SIMD side module through Pyodide's dynamic linker (dlopen via ctypes.CDLL).

The module is a PIC side module (dylink.0) that shares the memory of the running Pyodide module,
so a numpy array's address is a valid pointer for it. Outside Pyodide there is nothing to load;
inside, a missing or broken module is a runtime event and the numpy kernels stay in use.
Two builds ship: kernels-relaxed.wasm (relaxed SIMD: fused multiply-adds in the products) where
the browser validates relaxed SIMD, kernels.wasm (SIMD only) elsewhere.
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
RELAXED_MODULE = Path(__file__).with_name("kernels-relaxed.wasm")
# A module of one function, f32x4.relaxed_madd of its three arguments: it validates only where
# the browser has relaxed SIMD.
RELAXED_PROBE = bytes.fromhex(
    "0061736d0100000001080160037b7b7b017b030201000a0d010b00200020012002fd85020b"
)
# Pointers of every kind (data read or written, metadata, pointer tables) are addresses.
_CTYPES = {"i": ctypes.c_int32, **dict.fromkeys("poma", ctypes.c_size_t)}


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def _empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    return np.empty(shape, dtype=dtype)


def _module() -> Path:
    """The relaxed build where this browser runs it (and the wheel has it), else the plain one."""
    from ..._js import wasm_validates

    return RELAXED_MODULE if RELAXED_MODULE.is_file() and wasm_validates(RELAXED_PROBE) else MODULE


def load() -> SimdKernels | None:
    if sys.platform != "emscripten":
        return None
    module = _module()
    if not module.is_file():
        record_event("simd_unavailable", 0, reason=f"{module.name} is not in the engine wheel")
        return None
    try:
        library = ctypes.CDLL(str(module))
        exports = {}
        for name, (arguments, result) in SIGNATURES.items():
            export = getattr(library, name)
            export.argtypes = [_CTYPES[kind] for kind in arguments]
            export.restype = _CTYPES[result] if result else None
            exports[name] = export
    except (OSError, AttributeError) as exc:
        record_event("simd_unavailable", 0, reason=f"{module.name} did not load: {exc}")
        return None
    return SimdKernels(exports, _address, _empty)
