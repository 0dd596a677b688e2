"""depthwise_conv2d: depthwise_cols.wgsl for a layer's small filters (several output pixels per
invocation sharing their input loads), depthwise.wgsl for any other (one pixel per invocation,
a vec4 or one channel of it)."""

from __future__ import annotations

import math
from typing import Any

from .. import OutSpec
from . import codegen
from .plan import BufferRef, DeviceLimits, KernelPlan

# depthwise_cols.wgsl: output pixels per invocation, and the filter widths and column strides
# it is compiled for (one pipeline each: the hand model's layers need four).
COLS = 4
MAX_COLS_KW = 7
MAX_COLS_STRIDE = 2

_BINDINGS = (codegen.INPUT_0, BufferRef("input", 1), codegen.OUTPUT)


def plan_depthwise_conv2d(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    codegen.require_float32(op, out)
    x, w = out.in_shapes
    y = out.shape
    if not codegen.numel(y):
        return KernelPlan(())
    # vec4s of channels where each output channel is its input channel (M == 1) and C is whole
    # vec4s: the hand model's and MobileNet's layers.
    lanes = 4 if w[3] == 1 and x[3] % 4 == 0 else 1
    (sh, sw), ((pad_top, _), (pad_left, _)) = attrs["strides"], attrs["pads"]
    if lanes == 4 and w[1] <= MAX_COLS_KW and sw <= MAX_COLS_STRIDE:
        return _plan_columns(op, x, w, y, sh, sw, pad_top, pad_left, limits)
    invocations = codegen.numel(y) // lanes
    words = [invocations, x[1], x[2], x[3] // lanes, y[1], y[2], y[3] // lanes, w[3]]
    words += [w[0], w[1], sh, sw, pad_top, pad_left]
    wgsl = codegen.render("depthwise.wgsl", T="vec4<f32>" if lanes == 4 else "f32")
    workgroups = codegen.grid(op, codegen.groups_for(invocations), limits)
    return KernelPlan((codegen.dispatch(f"depthwise:{lanes}", wgsl, _BINDINGS, words, workgroups),))


def columns_body(kw: int, sw: int, cols: int) -> dict[str, str]:
    """The generated parts of depthwise_cols.wgsl, unrolled over a window row (so every input
    vec4, filter vec4 and accumulator stays a register): accumulators, the row's shared input
    loads, the taps and the stores."""
    span = (cols - 1) * sw + kw
    loads = []
    for j in range(span):
        loads += [
            f"    let in{j} = row_inside && left + {j} >= 0 && left + {j} < i32(p.in_w);",
            f"    let x{j} = select(vec4<f32>(0.0), "
            f"x[select(0u, (row + u32(left + {j})) * p.units + u, in{j})], in{j});",
        ]
    taps = []
    for k in range(kw):
        taps.append(f"    let w{k} = w[w_row + {k}u * p.units];")
        taps += [f"    acc{o} = fma(x{o * sw + k}, w{k}, acc{o});" for o in range(cols)]
    return {
        "KW": str(kw),
        "SW": str(sw),
        "COLS": str(cols),
        "DECLARE": "\n".join(f"  var acc{o} = vec4<f32>(0.0);" for o in range(cols)),
        "SPAN": "\n".join(loads),
        "TAPS": "\n".join(taps),
        "STORE": "\n".join(
            f"  if (ow0 + {o}u < p.out_w) {{ y[first + {o}u * p.units] = acc{o}; }}"
            for o in range(cols)
        ),
    }


def _plan_columns(
    op: str,
    x: tuple[int, ...],
    w: tuple[int, ...],
    y: tuple[int, ...],
    sh: int,
    sw: int,
    pad_top: int,
    pad_left: int,
    limits: DeviceLimits,
) -> KernelPlan:
    units, col_groups = x[3] // 4, math.ceil(y[2] / COLS)
    invocations = y[0] * y[1] * col_groups * units
    words = [invocations, x[1], x[2], units, y[1], y[2], col_groups, w[0], sh, pad_top, pad_left]
    wgsl = codegen.render("depthwise_cols.wgsl", **columns_body(w[1], sw, COLS))
    workgroups = codegen.grid(op, codegen.groups_for(invocations), limits)
    key = f"depthwise_cols:{w[1]}x{sw}"
    return KernelPlan((codegen.dispatch(key, wgsl, _BINDINGS, words, workgroups),))
