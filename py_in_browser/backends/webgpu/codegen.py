"""Shared plumbing of the WGSL generators: element types, templates, limits, grids and params."""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Sequence
from functools import cache
from importlib import resources

from .. import OutSpec
from .plan import BufferRef, DeviceLimits, Dispatch

# Every kernel runs 64 invocations per workgroup: a multiple of every GPU's SIMD width that fits
# the WebGPU minimum of 256 invocations, and the unit the dispatch grids below count in.
WORKGROUP_SIZE = 64
# Layout and reduction kernels carry per-axis tables of this many entries in their params.
MAX_RANK = 8

_WGSL_TYPES = {"float32": "f32", "int32": "i32", "bool": "u32"}
_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")

INPUT_0 = BufferRef("input", 0)
OUTPUT = BufferRef("output")


def wgsl_type(dtype: str, op: str) -> str:
    """The WGSL element type of `dtype`; WebGPU has no 64-bit floats, so float64 is refused."""
    try:
        return _WGSL_TYPES[dtype]
    except KeyError:
        raise TypeError(
            f"{op}: dtype {dtype} is not supported by the webgpu backend (WebGPU has no f64; "
            f"supported dtypes are {sorted(_WGSL_TYPES)}); cast to float32 first"
        ) from None


def require_float32(op: str, out: OutSpec) -> None:
    """Refuses other dtypes for kernels written for f32 only (matmul, convolutions, pooling)."""
    for dtype in (*out.in_dtypes, out.dtype):
        if dtype != "float32":
            wgsl_type(dtype, op)  # float64 gets the no-f64 message
            raise TypeError(f"{op}: the webgpu kernel takes float32 only, got {dtype}")


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def check_fits(op: str, what: str, shape: Sequence[int], limits: DeviceLimits) -> None:
    """Refuses a tensor bigger than one storage binding: the GPU would read it silently wrong."""
    nbytes = numel(shape) * 4
    if nbytes > limits.max_storage_buffer_binding_size:
        raise ValueError(
            f"{op}: {what} of shape {tuple(shape)} needs {nbytes} bytes, more than this device's "
            f"max_storage_buffer_binding_size of {limits.max_storage_buffer_binding_size} bytes"
        )


def check_spec_fits(op: str, out: OutSpec, limits: DeviceLimits) -> None:
    for i, shape in enumerate(out.in_shapes):
        check_fits(op, f"input {i}", shape, limits)
    check_fits(op, "output", out.shape, limits)


def grid(op: str, workgroups: int, limits: DeviceLimits) -> tuple[int, int, int]:
    """Spreads a linear workgroup count over x, y and z so that no dimension exceeds the limit.

    Kernels rebuild the linear index as x + nx * (y + ny * z) and skip the overshoot.
    """
    cap = limits.max_workgroups_per_dimension
    x = min(workgroups, cap)
    rest = math.ceil(workgroups / x)
    y = min(rest, cap)
    z = math.ceil(rest / y)
    if z > cap:
        raise ValueError(
            f"{op}: {workgroups} workgroups exceed {cap}^3 (max_workgroups_per_dimension)"
        )
    return (x, y, z)


def groups_for(elements: int) -> int:
    return math.ceil(elements / WORKGROUP_SIZE)


def pack_words(words: Sequence[int]) -> bytes:
    """Params as 32-bit words (negative ints as two's complement), padded to 16-byte rows as
    uniform buffers require."""
    padded = list(words) + [0] * (-len(words) % 4)
    return struct.pack(f"<{len(padded)}I", *(w & 0xFFFFFFFF for w in padded))


def f32_bits(value: float) -> int:
    bits: int = struct.unpack("<I", struct.pack("<f", value))[0]
    return bits


def value_bits(value: float, dtype: str) -> int:
    """The 32-bit pattern of `value` stored as `dtype` (for fill values passed in params)."""
    if dtype == "float32":
        return f32_bits(value)
    if dtype == "bool":
        return int(bool(value))
    return int(value) & 0xFFFFFFFF


def axis_table(values: Sequence[int]) -> list[int]:
    """One MAX_RANK-long row of a per-axis params table."""
    return list(values) + [0] * (MAX_RANK - len(values))


@cache
def template(name: str) -> str:
    """A .wgsl file shipped in the wgsl/ folder of this package."""
    return resources.files(__package__).joinpath("wgsl", name).read_text(encoding="utf-8")


def render(name: str, **fills: str) -> str:
    """Fills `{{NAME}}` placeholders of a template; COMMON (the shared helpers) is always filled.

    A placeholder left unfilled is a bug in the generator, so it raises instead of shipping.
    """
    fills.setdefault("COMMON", template("common.wgsl"))
    source = template(name)
    for _ in range(2):  # COMMON may itself hold placeholders filled by the caller
        source = _PLACEHOLDER.sub(lambda m: fills.get(m.group(1), m.group(0)), source)
    missing = set(_PLACEHOLDER.findall(source))
    if missing:
        raise KeyError(f"{name}: unfilled placeholders {sorted(missing)}")
    return source


def dispatch(
    key: str,
    wgsl: str,
    bindings: Sequence[BufferRef],
    words: Sequence[int],
    workgroups: tuple[int, int, int],
) -> Dispatch:
    return Dispatch(key, wgsl, tuple(bindings), pack_words(words), workgroups)
