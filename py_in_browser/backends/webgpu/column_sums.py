"""reduce_sum: over a float32 tensor's leading axes on software adapters, column_sums.wgsl (a
vec4 of columns per invocation, summed down slices of the rows, then the slices' sums); any
other on reductions.py's kernels."""

from __future__ import annotations

import math
from typing import Any

from .. import OutSpec
from . import codegen, reductions
from .plan import DeviceLimits, KernelPlan

# Rows per slice: W3s's bias gradients (8,192 and 2,048 rows) take 32 and 8 slices, so a
# software adapter has several workgroups to run side by side.
ROWS_PER_SLICE = 256


def plan_reduce_sum(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    shape, axes = out.in_shapes[0], tuple(sorted(attrs["axes"]))
    rows, columns = codegen.numel(shape[: len(axes)]), codegen.numel(shape[len(axes) :])
    leading = axes == tuple(range(len(axes)))
    vec4_columns = columns >= 4 and columns % 4 == 0
    float32 = out.in_dtypes[0] == "float32"
    if not (limits.resident_workgroups and float32 and leading and vec4_columns and rows):
        return reductions.plan_reduce_sum(op, attrs, out, limits)
    return _column_sums(op, rows, columns, limits)


def _column_sums(op: str, rows: int, columns: int, limits: DeviceLimits) -> KernelPlan:
    slices = math.ceil(rows / ROWS_PER_SLICE)
    per_slice = math.ceil(rows / slices)
    invocations = slices * (columns // 4)
    wgsl = codegen.render("column_sums.wgsl")
    words = [invocations, columns // 4, rows, per_slice]
    workgroups = codegen.grid(op, codegen.groups_for(invocations), limits)
    return reductions.summed_parts(
        op, "column_sums", wgsl, [codegen.INPUT_0], words, workgroups, slices, columns, limits
    )
