"""conv2d_backprop_filter on software adapters: conv_filter_grad.wgsl, the filter gradient summed
per tap over slices of the output pixels (then the slices' partials summed), instead of the
im2col GEMM, whose loaders spend their time on index arithmetic there."""

from __future__ import annotations

import math

from . import codegen
from .plan import BufferRef, DeviceLimits, KernelPlan
from .reductions import summed_parts

# Per invocation: input channels at its tap, and vec4s of output channels.
CHANNELS = 4
VECS = 2
# Output pixels per slice: each invocation sums this many pixels' products; more slices give a
# software adapter more workgroups to run side by side (W3s's first layer: 16 slices). The
# slices' partials stay within SLICES_MAX_FLOATS (a large filter has invocations enough).
PIXELS_PER_SLICE = 512
SLICES_MAX_FLOATS = 1 << 22


def body(channels: int, vecs: int) -> dict[str, str]:
    """The generated parts of conv_filter_grad.wgsl, unrolled over its channels and vec4s (each
    accumulator a register): accumulators, one pixel's loads and multiply-adds, the stores."""
    accs = [(c, j) for c in range(channels) for j in range(vecs)]
    pixel = [f"    let g{j} = gy[min(g_at + {j}u, last_g)];" for j in range(vecs)]
    pixel += [
        f"    let x{c} = vec4<f32>(select(0.0, x[min(x_at + {c}u, last_x)], inside));"
        for c in range(channels)
    ]
    pixel += [f"    acc{c}_{j} = fma(x{c}, g{j}, acc{c}_{j});" for c, j in accs]
    store = [
        f"  if (c0 + {c}u < p.in_c && v0 + {j}u < p.out_c4) "
        f"{{ dw[first + {c}u * p.out_c4 + {j}u] = acc{c}_{j}; }}"
        for c, j in accs
    ]
    return {
        "CHANNELS": str(channels),
        "VECS": str(vecs),
        "DECLARE": "\n".join(f"  var acc{c}_{j} = vec4<f32>(0.0);" for c, j in accs),
        "PIXEL": "\n".join(pixel),
        "STORE": "\n".join(store),
    }


def plan(
    op: str,
    geo: dict[str, int],
    x: tuple[int, ...],
    gy: tuple[int, ...],
    w: tuple[int, ...],
    limits: DeviceLimits,
) -> KernelPlan:
    """The filter gradient (HWIO `w`) of input `x` and output gradient `gy` (channels in whole
    vec4s), `geo` as linalg's geometry."""
    pixels, size = gy[0] * gy[1] * gy[2], codegen.numel(w)
    slices = max(1, min(math.ceil(pixels / PIXELS_PER_SLICE), SLICES_MAX_FLOATS // size))
    per_slice = math.ceil(pixels / slices)
    taps, out_c4 = w[0] * w[1], w[3] // 4
    vec_groups, channel_groups = math.ceil(out_c4 / VECS), math.ceil(w[2] / CHANNELS)
    invocations = vec_groups * channel_groups * taps * slices
    words = [invocations, vec_groups, channel_groups, taps, pixels, per_slice]
    words += [x[1], x[2], x[3], gy[1], gy[2], out_c4, w[1]]
    words += [geo["stride_h"], geo["stride_w"], geo["pad_top"], geo["pad_left"]]
    wgsl = codegen.render("conv_filter_grad.wgsl", **body(CHANNELS, VECS))
    workgroups = codegen.grid(op, codegen.groups_for(invocations), limits)
    key = f"conv_filter_grad:{CHANNELS}x{VECS}"
    bindings = [codegen.INPUT_0, BufferRef("input", 1)]
    return summed_parts(op, key, wgsl, bindings, words, workgroups, slices, size, limits)
