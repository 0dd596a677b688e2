"""Zero-copy layout ops: reshape aliases its input's buffer, expand becomes a broadcast view (the
source buffer read with zero strides) that elementwise kernels index directly. Anything else that
meets a view materializes it first with one strided copy.

Pure helpers shared by the browser runtime and the native test backend; no GPU, no js.
"""

from __future__ import annotations

from functools import lru_cache

from . import codegen, movement
from .plan import DeviceLimits, KernelPlan

Strides = tuple[int, ...]


def expand_strides(
    src_shape: tuple[int, ...], src_strides: Strides | None, dst_shape: tuple[int, ...]
) -> Strides | None:
    """Element strides of `expand(src, dst_shape)` into src's buffer; None when the result is
    laid out contiguously anyway (nothing was stretched and src was contiguous)."""
    base = src_strides if src_strides is not None else codegen.contiguous_strides(src_shape)
    strides = tuple(
        0 if s == 1 and d != 1 else st for s, d, st in zip(src_shape, dst_shape, base, strict=True)
    )
    return None if is_contiguous(dst_shape, strides) else strides


def is_contiguous(shape: tuple[int, ...], strides: Strides) -> bool:
    """Whether `strides` walk `shape` as a dense row-major array (length-1 axes do not count)."""
    return all(
        d == 1 or st == want
        for d, st, want in zip(shape, strides, codegen.contiguous_strides(shape), strict=True)
    )


@lru_cache(maxsize=1024)
def materialize_plan(
    dtype: str, shape: tuple[int, ...], strides: Strides, limits: DeviceLimits
) -> KernelPlan:
    """One strided gather writing the view contiguously (input 0: the view's buffer)."""
    axes = [
        movement.Axis(d, st, dst)
        for d, st, dst in zip(shape, strides, codegen.contiguous_strides(shape), strict=True)
    ]
    found = movement.copy_dispatch("expand", dtype, axes, limits, codegen.INPUT_0)
    return KernelPlan(() if found is None else (found,))
