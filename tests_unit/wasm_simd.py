"""The cpu backend's SIMD side module run natively under wasmtime, as Pyodide's linker would.

It builds the same kernels.wasm / kernels-relaxed.wasm the engine wheel ships (server/simd_build.py), gives it what
Emscripten's dynamic linker gives a side module (a memory, a stack, __memory_base placed after
the stack with the size its dylink.0 section asks for, a function table) and wraps its exports in
the engine's own SimdKernels, so the Python wrappers and the C kernels are tested together.
Arrays live in the module's memory: `empty` allocates there, and `address` stages an outside
array into it (in Pyodide both are the identity, numpy's heap being that memory).
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import wasmtime

from py_in_browser.backends.cpu_simd import SimdKernels
from server.settings import Paths
from server.simd_build import ensure_simd_module

PAGE = 65536
MEMORY_PAGES = 8192  # 512 MiB, reserved lazily by wasmtime
STACK_BYTES = 1 << 20
ALIGN = 16


def _leb128(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def dylink_memory(module: bytes) -> tuple[int, int]:
    """(bytes, alignment) of static memory the side module's dylink.0 MEM_INFO asks for."""
    at = 8  # magic and version
    section_id, at = module[at], at + 1
    _, at = _leb128(module, at)  # section size
    name_length, at = _leb128(module, at)
    name = module[at : at + name_length]
    assert section_id == 0 and name == b"dylink.0", "not a side module: no leading dylink.0"
    at += name_length
    kind, at = module[at], at + 1
    assert kind == 1, "dylink.0 does not start with MEM_INFO"
    _, at = _leb128(module, at)
    memory_size, at = _leb128(module, at)
    memory_align, at = _leb128(module, at)
    return memory_size, 1 << memory_align


@dataclass
class WasmSimd:
    path: Path
    store: wasmtime.Store = field(init=False)
    kernels: SimdKernels = field(init=False)

    def __post_init__(self) -> None:
        engine = wasmtime.Engine()
        self.store = wasmtime.Store(engine)
        raw = self.path.read_bytes()
        module = wasmtime.Module(engine, raw)
        self.memory = wasmtime.Memory(
            self.store, wasmtime.MemoryType(wasmtime.Limits(MEMORY_PAGES, None))
        )
        static_size, static_align = dylink_memory(raw)
        memory_base = -(-(PAGE + STACK_BYTES) // static_align) * static_align
        self._next = -(-(memory_base + static_size) // ALIGN) * ALIGN
        i32 = wasmtime.ValType.i32()
        provided: dict[str, wasmtime.Memory | wasmtime.Table | wasmtime.Global] = {
            "memory": self.memory,
            "__indirect_function_table": wasmtime.Table(
                self.store,
                wasmtime.TableType(wasmtime.ValType.funcref(), wasmtime.Limits(0, None)),
                None,
            ),
            "__stack_pointer": wasmtime.Global(
                self.store, wasmtime.GlobalType(i32, True), wasmtime.Val.i32(PAGE + STACK_BYTES)
            ),
            "__memory_base": wasmtime.Global(
                self.store, wasmtime.GlobalType(i32, False), wasmtime.Val.i32(memory_base)
            ),
            "__table_base": wasmtime.Global(
                self.store, wasmtime.GlobalType(i32, False), wasmtime.Val.i32(0)
            ),
        }
        imports = [provided[str(item.name)] for item in module.imports]
        instance = wasmtime.Instance(self.store, module, imports)
        exports = instance.exports(self.store)
        functions = {
            item.name: export
            for item in module.exports
            if isinstance(export := exports[item.name], wasmtime.Func)
        }
        for init in ("__wasm_apply_data_relocs", "__wasm_call_ctors"):
            if init in functions:
                functions[init](self.store)
        self._base = ctypes.addressof(self.memory.data_ptr(self.store).contents)
        self._staged: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # root id -> (root, copy)
        self._length = self.memory.data_len(self.store)
        callables = {name: partial(function, self.store) for name, function in functions.items()}
        self.kernels = SimdKernels(callables, self.address, self.empty)

    def empty(self, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        start, self._next = self._next, -(-(self._next + nbytes) // ALIGN) * ALIGN
        if self._next > self._length:
            raise MemoryError("the test's wasm memory is exhausted; use smaller cases")
        raw = (ctypes.c_ubyte * nbytes).from_address(self._base + start)
        return np.ctypeslib.as_array(raw).view(dtype).reshape(shape)

    def address(self, array: np.ndarray) -> int:
        """The array's address in the module's memory. An array outside it is staged: the
        memory its base array spans is copied in (again on every call, so eager calls read
        current values), always to the same place, so views keep their offsets and strides and
        a recorded step's replays write where its calls read."""
        pointer = int(array.__array_interface__["data"][0])
        if self._base <= pointer < self._base + self._length:
            return pointer - self._base
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        low, high = _byte_bounds(root)
        staged = self._staged.get(id(root))
        if staged is None:
            staged = self._staged[id(root)] = (root, self.empty((high - low + ALIGN,), np.uint8))
        start = self.address(staged[1]) + (low % ALIGN)  # the root's alignment kept
        ctypes.memmove(self._base + start, low, high - low)
        return start + pointer - low


def _byte_bounds(x: np.ndarray) -> tuple[int, int]:
    """[first, last + 1) host addresses of x's elements."""
    start = int(x.__array_interface__["data"][0])
    if x.size == 0:
        return start, start
    low = sum((n - 1) * s for n, s in zip(x.shape, x.strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(x.shape, x.strides, strict=True) if s > 0)
    return start + low, start + high + x.itemsize


# Both builds the wheel ships (wasmtime runs relaxed SIMD): fixtures parametrize over them.
BUILDS = ("kernels.wasm", "kernels-relaxed.wasm")


def native_simd(build: str) -> WasmSimd:
    """A build from the current sources (a build failure fails the test, never skips)."""
    built = ensure_simd_module(Paths.default())
    return WasmSimd({path.name: path for path in (built.path, built.relaxed_path)}[build])
