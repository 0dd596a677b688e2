"""matmul and the convolutions as tiled GEMMs on gemm.wgsl or gemm_vec4.wgsl (convolutions as
implicit GEMMs), on gemm_direct.wgsl on software adapters; products of one row on gemv.wgsl."""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, replace
from typing import Any

from .. import OutSpec
from . import codegen, filter_grad
from .plan import BufferRef, DeviceLimits, KernelPlan
from .reductions import summed_parts

TILE_K = 16
# (rows, columns) of the output tile one workgroup computes, by the output's shape: tall tiles
# for outputs with few columns, wide ones for few rows, square otherwise.
TILE_SHAPES = ((128, 8), (64, 16), (32, 32), (16, 64), (8, 128))


def tile_shape(m: int, n: int) -> tuple[int, int]:
    if n <= 8:
        return TILE_SHAPES[0]
    if n <= 16:
        return TILE_SHAPES[1]
    if m <= 8:
        return TILE_SHAPES[4]
    if m <= 16:
        return TILE_SHAPES[3]
    return TILE_SHAPES[2]


# Split-K kicks in when the output has fewer tiles than this and K is at least SPLIT_K_MIN long;
# each split then covers at least SPLIT_K_MIN / 2 of K, and there are at most MAX_SPLITS.
FEW_TILES = 16
SPLIT_K_MIN = 2048
MAX_SPLITS = 64

# gemm_vec4.wgsl: rows and vec4 columns of C per invocation (8x8 invocations per workgroup);
# 1 row when C has fewer than 32 rows. Its K slabs are 32 long.
VEC4_ROWS = 4
VEC4_VECS = 2
VEC4_TILE_K = 32

# conv_direct.wgsl: conv2d of inputs with this many channels or fewer (RGB images, a small
# CNN's second layer), whose output channels are whole vec4s; each invocation computes
# DIRECT_CONV_VECS vec4s of them for DIRECT_CONV_COLS neighbouring pixels of a row. On lavapipe
# it beat the implicit GEMM 3x at 3 input channels and 2.5-4x at 16 (32x32x16 -> 32 channels,
# batch 1 and 8): few taps leave the GEMM's shared-memory reuse little to win against its
# staging and barriers. On SwiftShader 8 pixels x 2 vec4s ran I3's two layers (64x64x3 -> 16,
# 32x32x16 -> 32) in 8-17 and 27-36 ms against 35-59 and 108-132 ms for 1 pixel x 4 vec4s
# (fastest GPU times of one page, on a loaded host); 4 pixels x 4 vec4s was within noise of it.
# Unrolled (conv_direct_body) the two took 4.6-5.2 ms against 15 ms as loops over arrays, for
# 8x2, 4x4, 8x4, 4x2, 2x4 and 8x1 alike (one page, alternated); a page that also ran 16 pixels x
# 2 vec4s lost its SwiftShader device.
DIRECT_CONV_MAX_IN = 16
# The same kernel computes an input gradient at stride 1 on software adapters (gemm_direct.wgsl's
# im2col loaders cost W3s's 16 -> 32 channel layer 32 ms a step there), for output gradients of
# at most this many channels.
DIRECT_GRAD_MAX_IN = 32
DIRECT_CONV_VECS = 2
DIRECT_CONV_COLS = 8

# gemm_direct_vec4.wgsl (software adapters, gemm_vec4.wgsl's layouts): vec4 columns of C per
# invocation, each with 4 rows.
DIRECT_VEC4_VECS = 2

# gemv.wgsl: vec4 columns of C per workgroup (the other 64 / cols4 invocations split K). A
# software adapter runs few workgroups at a time and pays for each shared-memory halving step:
# there 8 vec4 columns a workgroup (8 lanes of K, 3 halvings) ran I3's 8192 -> 64 dense layer in
# 1.0-1.1 ms against 1.7 ms at 2 (32 lanes, 5 halvings) and 1.9-2.0 ms at 1 (SwiftShader, one
# page each, GPU-bound queues of 20).
GEMV_COLS4 = 2
GEMV_COLS4_SOFTWARE = 8


# How an invocation stages its A_LOADS vec4s of a slab (r: slab row, c: vec4 column): rows of A
# along K, or, with A transposed (stored K x M), rows of K along M.
_A_STAGING = {
    False: "  let a_r = lid / TILE_K4;\n  let a_c = lid % TILE_K4;",
    True: "  let a_r = lid / (TILE_M / 4u);\n  let a_c = lid % (TILE_M / 4u);",
}
_A_ROW = {False: "a_r + i * (64u / TILE_K4)", True: "a_r + i * (64u / (TILE_M / 4u))"}
_A_TILE = {False: "tile_a[r * TILE_K4 + a_c]", True: "tile_a[r * (TILE_M / 4u) + a_c]"}
_A_GLOBAL = {
    False: "a[a_base + (row0 + r) * a_row4 + kv0 + a_c]",
    True: "a[a_base + (k0 + r) * a_col4 + row0 / 4u + a_c]",
}
_A_INSIDE = {
    False: "row0 + r < p.m && kv0 + a_c < k4",
    True: "k0 + r < k_end && row0 / 4u + a_c < p.m / 4u",
}


def vec4_body(rows: int, vecs: int, a_transposed: bool = False) -> dict[str, str]:
    """The generated parts of gemm_vec4.wgsl: A staging, the unrolled accumulators (declared,
    one K step of 4, stored). With A transposed, rows must be 4: an invocation's 4 rows of C
    are then one vec4 of the staged A, read once per k."""
    accs = [(i, v) for i in range(rows) for v in range(vecs)]
    declare = [f"  var acc{i}_{v} = vec4<f32>(0.0);" for i, v in accs]
    compute = [
        f"      let b{j}_{v} = tile_b[(kv * 4u + {j}u) * TILE_N4 + tx + {8 * v}u];"
        for j in range(4)
        for v in range(vecs)
    ]
    if a_transposed:
        assert rows == 4, "a transposed A tile gives each invocation one vec4 of 4 rows"
        compute += [
            f"      let a{j} = tile_a[(kv * 4u + {j}u) * (TILE_M / 4u) + ty];" for j in range(4)
        ]
        lanes = [[f"a{j}.{'xyzw'[i]}" for j in range(4)] for i in range(rows)]
    else:
        compute += [
            f"      let a{i} = tile_a[(ty * ROWS + {i}u) * TILE_K4 + kv];" for i in range(rows)
        ]
        lanes = [[f"a{i}.{lane}" for lane in "xyzw"] for i in range(rows)]
    for i in range(rows):
        for v in range(vecs):
            for j in range(4):
                compute.append(
                    f"      acc{i}_{v} = fma(vec4<f32>({lanes[i][j]}), b{j}_{v}, acc{i}_{v});"
                )
    store = [
        f"  store(c_base, row0 + ty * ROWS + {i}u, col0_4 + tx + {8 * v}u, acc{i}_{v});"
        for i, v in accs
    ]
    t = a_transposed
    row = f"        let r = {_A_ROW[t]};"
    return {
        "A_STAGING": _A_STAGING[t],
        "A_LOAD_FULL": f"{row}\n        {_A_TILE[t]} = {_A_GLOBAL[t]};",
        "A_LOAD_EDGE": f"{row}\n        var v = vec4<f32>(0.0);\n"
        f"        if ({_A_INSIDE[t]}) {{ v = {_A_GLOBAL[t]}; }}\n        {_A_TILE[t]} = v;",
        "DECLARE": "\n".join(declare),
        "COMPUTE": "\n".join(compute),
        "STORE": "\n".join(store),
    }


def direct_vec4_body(vecs: int, a_transposed: bool) -> dict[str, str]:
    """The generated parts of gemm_direct_vec4.wgsl (unrolled, so the accumulators stay in
    registers): clamped operand indices, accumulators, the K loop and the stores."""
    accs = [(i, v) for i in range(4) for v in range(vecs)]
    clamp = [f"  let c{v} = min(col4 + {8 * v}u, n4 - 1u);" for v in range(vecs)]
    if a_transposed:  # A stored K x M: the invocation's 4 rows are one vec4 of a K row
        clamp.append("  let r4 = min(row, p.m - 4u) / 4u;")
        body = ["    let av = a[a_base + k * a_col4 + r4];"]
        body += [f"    let b{v} = b[b_base + k * b_row4 + c{v}];" for v in range(vecs)]
        body += [
            f"    acc{i}_{v} = fma(vec4<f32>(av.{'xyzw'[i]}), b{v}, acc{i}_{v});" for i, v in accs
        ]
        loop = ["  for (var k = k_begin; k < k_end; k++) {", *body, "  }"]
    else:
        clamp += [f"  let r{i} = min(row + {i}u, p.m - 1u) * a_row4;" for i in range(4)]
        body = [f"    let a{i} = a[a_base + r{i} + kv];" for i in range(4)]
        body += [
            f"    let b{j}_{v} = b[b_base + (kv * 4u + {j}u) * b_row4 + c{v}];"
            for j in range(4)
            for v in range(vecs)
        ]
        body += [
            f"    acc{i}_{v} = fma(vec4<f32>(a{i}.{lane}), b{j}_{v}, acc{i}_{v});"
            for i, v in accs
            for j, lane in enumerate("xyzw")
        ]
        loop = ["  for (var kv = k_begin / 4u; kv < k_end / 4u; kv++) {", *body, "  }"]
    return {
        "VECS": str(vecs),
        "CLAMP": "\n".join(clamp),
        "DECLARE": "\n".join(f"  var acc{i}_{v} = vec4<f32>(0.0);" for i, v in accs),
        "LOOP": "\n".join(loop),
        "STORE": "\n".join(
            f"  store(c_base, row + {i}u, col4 + {8 * v}u, acc{i}_{v});" for i, v in accs
        ),
    }


def _vec4_layout(g: Gemm, load_a: str, load_b: str) -> str | None:
    """ "plain" for row-major operands whose rows are whole vec4s and a C at least as wide as a
    tile; "a_transposed" for the same with A stored K x M (M a multiple of 4, at least 32 rows
    of C so each invocation owns 4); None otherwise (gemm.wgsl's scalar loaders)."""
    if (load_a, load_b) != ("strided_a", "strided_b") or g.b_col != 1:
        return None
    if g.k % 4 or g.n % 4 or g.n < 32 * VEC4_VECS:
        return None
    if g.a_col == 1:
        return "plain"
    if g.a_row == 1 and g.m % 4 == 0 and g.m >= 8 * VEC4_ROWS and g.a_batch % 4 == 0:
        return "a_transposed"
    return None


def _is_gemv(g: Gemm, load_a: str, load_b: str) -> bool:
    """C of one row from row-major operands whose rows are whole vec4s (with one row, A's
    transposed layout is the same vector)."""
    return (
        (load_a, load_b) == ("strided_a", "strided_b")
        and g.m == 1
        and g.a_col == 1
        and g.b_col == 1
        and g.k % 4 == 0
        and g.n % 4 == 0
        and g.a_batch % 4 == 0
    )


@dataclass(frozen=True)
class Gemm:
    """The params of gemm.wgsl, in its Params struct's field order (counts come from m, n, k)."""

    m: int
    n: int
    k: int
    batches: int = 1
    a_batch: int = 0
    a_row: int = 0
    a_col: int = 0
    b_batch: int = 0
    b_row: int = 0
    b_col: int = 0
    in_h: int = 0
    in_w: int = 0
    in_c: int = 0
    out_h: int = 0
    out_w: int = 0
    out_c: int = 0
    k_h: int = 0
    k_w: int = 0
    stride_h: int = 1
    stride_w: int = 1
    pad_top: int = 0
    pad_left: int = 0
    threads_n: int = 0  # gemm_direct.wgsl's tile width in invocations (set by gemm_plan)


def _splits(tiles: int, k: int) -> tuple[int, int]:
    """(splits, k_per_split): a K slice per workgroup only when the output alone is too small."""
    if tiles >= FEW_TILES or k < SPLIT_K_MIN:
        return 1, k
    wanted = min(MAX_SPLITS, k // (SPLIT_K_MIN // 2), max(1, 2 * FEW_TILES // tiles))
    per_split = math.ceil(k / wanted / TILE_K) * TILE_K
    return math.ceil(k / per_split), per_split


def gemm_plan(
    op: str, out: OutSpec, g: Gemm, load_a: str, load_b: str, limits: DeviceLimits
) -> KernelPlan:
    """The dispatch computing C = A @ B of `g`, plus the split-K sum when that pays."""
    codegen.require_float32(op, out)
    if g.m * g.n * g.batches == 0:
        return KernelPlan(())
    if _is_gemv(g, load_a, load_b):
        cols4 = GEMV_COLS4_SOFTWARE if limits.resident_workgroups else GEMV_COLS4
        tiles_n = math.ceil(g.n // 4 / cols4)
        wgsl = codegen.render(
            "gemv.wgsl",
            TILE_LOOP=codegen.template("tile_loop.wgsl"),
            VECTOR_GEMM_IO=codegen.template("vec4_gemm_io.wgsl"),
            COLUMN_VECS=str(cols4),
        )
        return _product_and_sum(op, g, f"gemv:{cols4}", wgsl, (1, tiles_n, 1, g.k), limits)
    layout = _vec4_layout(g, load_a, load_b)
    if limits.resident_workgroups and layout is not None:
        # A software adapter: vec4 loads straight from the buffers, no workgroup memory.
        tiles_m, tiles_n = math.ceil(g.m / 32), math.ceil(g.n / (32 * DIRECT_VEC4_VECS))
        splits, per_split = _splits(tiles_m * tiles_n * g.batches, g.k)
        per_split = math.ceil(per_split / 4) * 4
        splits = math.ceil(g.k / per_split)
        wgsl = codegen.render(
            "gemm_direct_vec4.wgsl",
            TILE_LOOP=codegen.template("tile_loop.wgsl"),
            VECTOR_GEMM_IO=codegen.template("vec4_gemm_io.wgsl"),
            **direct_vec4_body(DIRECT_VEC4_VECS, layout == "a_transposed"),
        )
        key = f"gemm_direct_vec4:{DIRECT_VEC4_VECS}" + (":ta" if layout == "a_transposed" else "")
        return _product_and_sum(op, g, key, wgsl, (tiles_m, tiles_n, splits, per_split), limits)
    # A software adapter takes gemm_direct.wgsl: no workgroup memory to compile (see there).
    layout = None if limits.resident_workgroups else layout
    if layout is not None:
        row_count = VEC4_ROWS if g.m >= 8 * VEC4_ROWS else 1
        rows, cols = 8 * row_count, 32 * VEC4_VECS
        tiles_m, tiles_n = math.ceil(g.m / rows), math.ceil(g.n / cols)
        splits, per_split = _splits(tiles_m * tiles_n * g.batches, g.k)
        per_split = math.ceil(per_split / VEC4_TILE_K) * VEC4_TILE_K
        splits = math.ceil(g.k / per_split)
        wgsl = codegen.render(
            "gemm_vec4.wgsl",
            TILE_LOOP=codegen.template("tile_loop.wgsl"),
            VECTOR_GEMM_IO=codegen.template("vec4_gemm_io.wgsl"),
            ROWS=str(row_count),
            VECS=str(VEC4_VECS),
            **vec4_body(row_count, VEC4_VECS, layout == "a_transposed"),
        )
        key = f"gemm_vec4:{row_count}x{VEC4_VECS}" + (":ta" if layout == "a_transposed" else "")
        return _product_and_sum(op, g, key, wgsl, (tiles_m, tiles_n, splits, per_split), limits)
    rows, cols = tile_shape(g.m, g.n)
    tiles_m, tiles_n = math.ceil(g.m / rows), math.ceil(g.n / cols)
    splits, per_split = _splits(tiles_m * tiles_n * g.batches, g.k)
    fills = {"LOAD_A": load_a, "LOAD_B": load_b, "TILE_M": str(rows), "TILE_N": str(cols)}
    key = f"gemm:{load_a}:{load_b}:{rows}x{cols}"
    if limits.resident_workgroups:  # the tile shape in params: one pipeline per loader pair
        g = replace(g, threads_n=cols // 4)
        key = f"gemm_direct:{load_a}:{load_b}"
    wgsl = codegen.render(
        f"{key.split(':')[0]}.wgsl",
        TILE_LOOP=codegen.template("tile_loop.wgsl"),
        GEMM_IO=codegen.template("gemm_io.wgsl"),
        **fills,
    )
    return _product_and_sum(op, g, key, wgsl, (tiles_m, tiles_n, splits, per_split), limits)


def _product_and_sum(
    op: str, g: Gemm, key: str, wgsl: str, grid: tuple[int, int, int, int], limits: DeviceLimits
) -> KernelPlan:
    """The GEMM dispatch over (tiles_m, tiles_n, splits, k_per_split); split-K adds the sum."""
    tiles_m, tiles_n, splits, per_split = grid
    words = [g.m, g.n, g.k, tiles_m, tiles_n, g.batches, splits, per_split, *astuple(g)[4:]]
    bindings = [BufferRef("input", 0), BufferRef("input", 1)]
    tiles = tiles_m * tiles_n * splits * g.batches
    # The kernels loop over tiles, so fewer workgroups than tiles is fine (DeviceLimits).
    resident = limits.resident_workgroups
    workgroups = codegen.grid(op, min(tiles, resident) if resident else tiles, limits)
    size = g.batches * g.m * g.n
    return summed_parts(op, key, wgsl, bindings, words, workgroups, splits, size, limits)


def plan_matmul(op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits) -> KernelPlan:
    a = out.in_shapes[0]
    m, n = out.shape[-2], out.shape[-1]
    k = a[-2] if attrs["transpose_a"] else a[-1]
    a_strides = (1, m) if attrs["transpose_a"] else (k, 1)
    b_strides = (1, k) if attrs["transpose_b"] else (n, 1)
    g = Gemm(
        m,
        n,
        k,
        batches=codegen.numel(out.shape[:-2]),
        a_batch=m * k,
        a_row=a_strides[0],
        a_col=a_strides[1],
        b_batch=k * n,
        b_row=b_strides[0],
        b_col=b_strides[1],
    )
    return gemm_plan(op, out, g, "strided_a", "strided_b", limits)


def _geometry(
    attrs: dict[str, Any], x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...]
) -> dict[str, int]:
    (pad_top, _), (pad_left, _) = attrs["pads"]
    return {
        "in_h": x[1],
        "in_w": x[2],
        "in_c": x[3],
        "out_h": y[1],
        "out_w": y[2],
        "out_c": y[3],
        "k_h": w[0],
        "k_w": w[1],
        "stride_h": attrs["strides"][0],
        "stride_w": attrs["strides"][1],
        "pad_top": pad_top,
        "pad_left": pad_left,
    }


# What conv_direct.wgsl's finish() does to a vec4 of sums v before it is stored: a layer's bias
# add and relu, exactly as the add and relu kernels compute them (relu passes NaN, told by its
# bits). The bias binding sits between y and the params.
_RELU4 = (
    "select(max(s, vec4<f32>(0.0)), s, "
    "(bitcast<vec4<u32>>(s) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u))"
)
EPILOGUES = {
    "": "  return v;",
    "bias": "  return v + bias[c4];",
    "relu": f"  let s = v;\n  return {_RELU4};",
    "bias_relu": f"  let s = v + bias[c4];\n  return {_RELU4};",
}
_BIAS_BINDING = "@group(0) @binding(3) var<storage, read> bias: array<vec4<f32>>;"


def conv_direct_body(
    cols: int, vecs: int, input_grad: bool = False, epilogue: str = ""
) -> dict[str, str]:
    """The generated parts of conv_direct.wgsl, unrolled over its `cols` pixels and `vecs` filter
    vec4s (so each accumulator stays a register): accumulators, per-pixel tap positions, one
    input channel's multiply-adds (skipped for a pixel whose tap is in the padding) and the
    stores. With `input_grad` the input is an output gradient and the filters are the forward
    convolution's (HWIO, its I our output channels): read flipped and transposed, one scalar
    per lane."""
    accs = [(o, j) for o in range(cols) for j in range(vecs)]
    pixels = []
    for o in range(cols):
        pixels += [
            f"      let iw{o} = left + i32({o}u * p.stride_w);",
            f"      let in{o} = ow0 + {o}u < p.out_w && iw{o} >= 0 && iw{o} < i32(p.in_w);",
            f"      let x{o} = select(0u, (row + u32(iw{o})) * p.in_c, in{o});",
        ]
    if input_grad:
        filter_tap = (
            "      let w_at = ((p.k_h - 1u - kh) * p.k_w + p.k_w - 1u - kw) * p.out_c4 * 4u * p.in_c"
            " + v0 * 4u * p.in_c;"
        )
        tap = ["        let w_row = w_at + ci;"]
        for j in range(vecs):
            loads = [f"w[min(w_row + {4 * j + lane}u * p.in_c, last_w)]" for lane in range(4)]
            tap.append(f"        let w{j} = vec4<f32>({', '.join(loads)});")
    else:
        filter_tap = "      let w_at = (kh * p.k_w + kw) * p.in_c * p.out_c4 + v0;"
        tap = ["        let w_row = w_at + ci * p.out_c4;"]
        tap += [f"        let w{j} = w[min(w_row + {j}u, last_w)];" for j in range(vecs)]
    for o in range(cols):
        tap.append(f"        let xv{o} = vec4<f32>(x[x{o} + ci]);")
        tap += [
            f"        acc{o}_{j} = select(acc{o}_{j}, fma(xv{o}, w{j}, acc{o}_{j}), in{o});"
            for j in range(vecs)
        ]
    store = [
        f"  if (ow0 + {o}u < p.out_w && {j}u < vecs_here) "
        f"{{ y[first + {o}u * p.out_c4 + {j}u] = finish(acc{o}_{j}, v0 + {j}u); }}"
        for o, j in accs
    ]
    biased = epilogue.startswith("bias")
    return {
        "COLS": str(cols),
        "VECS": str(vecs),
        "FILTER": "f32" if input_grad else "vec4<f32>",
        "DECLARE": "\n".join(f"  var acc{o}_{j} = vec4<f32>(0.0);" for o, j in accs),
        "PIXELS": "\n".join(pixels),
        "FILTER_TAP": filter_tap,
        "TAP": "\n".join(tap),
        "STORE": "\n".join(store),
        "FINISH": EPILOGUES[epilogue],
        "BIAS_BINDING": _BIAS_BINDING if biased else "",
        "PARAMS_BINDING": "4" if biased else "3",
    }


def _plan_direct_conv2d(
    op: str,
    geo: dict[str, int],
    rows: int,
    limits: DeviceLimits,
    input_grad: bool = False,
    epilogue: str = "",
) -> KernelPlan:
    """conv_direct.wgsl: one invocation per DIRECT_CONV_COLS pixels of an output row and
    DIRECT_CONV_VECS vec4s of their output channels (`rows`: output rows over the batch);
    `input_grad`: see conv_direct_body; `epilogue`: a key of EPILOGUES (a bias is input 2)."""
    out_c4 = geo["out_c"] // 4
    groups = math.ceil(out_c4 / DIRECT_CONV_VECS)
    col_groups = math.ceil(geo["out_w"] / DIRECT_CONV_COLS)
    invocations = rows * col_groups * groups
    words = [invocations, groups, geo["in_h"], geo["in_w"], geo["in_c"], geo["out_h"]]
    words += [geo["out_w"], out_c4, geo["k_h"], geo["k_w"], geo["stride_h"], geo["stride_w"]]
    words += [geo["pad_top"], geo["pad_left"], col_groups]
    body = conv_direct_body(DIRECT_CONV_COLS, DIRECT_CONV_VECS, input_grad, epilogue)
    wgsl = codegen.render("conv_direct.wgsl", **body)
    workgroups = codegen.grid(op, codegen.groups_for(invocations), limits)
    bindings = [codegen.INPUT_0, BufferRef("input", 1), codegen.OUTPUT]
    if epilogue.startswith("bias"):
        bindings.append(BufferRef("input", 2))
    key = f"conv_direct:{DIRECT_CONV_COLS}x{DIRECT_CONV_VECS}" + (
        ":input_grad" if input_grad else ""
    )
    key += f":{epilogue}" if epilogue else ""
    return KernelPlan((codegen.dispatch(key, wgsl, bindings, words, workgroups),))


def _direct(out: OutSpec) -> bool:
    """Whether conv2d of `out` takes conv_direct.wgsl: few input channels, output channels in
    whole vec4s."""
    x, y = out.in_shapes[0], out.shape
    return x[3] <= DIRECT_CONV_MAX_IN and y[3] % 4 == 0 and codegen.numel(y) > 0 < codegen.numel(x)


def takes_epilogue(out: OutSpec) -> bool:
    """Whether conv2d of `out` can apply its layer's bias and relu as it stores (attrs
    "epilogue" of plan_conv2d): float32 on conv_direct.wgsl."""
    return _direct(out) and out.dtype == "float32" == out.in_dtypes[0]


def _pointwise(attrs: dict[str, Any], w: tuple[int, ...]) -> bool:
    """A 1x1 filter at stride 1 without padding: every output pixel is its input pixel's
    channels times the filter matrix."""
    unpadded = all(side == 0 for pair in attrs["pads"] for side in pair)
    return w[0] == w[1] == 1 and tuple(attrs["strides"]) == (1, 1) and unpadded


def plan_conv2d(op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits) -> KernelPlan:
    """Output pixels x taps (im2col, never materialised) @ filters as (taps, out channels); an
    input of at most DIRECT_CONV_MAX_IN channels is convolved directly, and a pointwise (1x1,
    stride 1, unpadded) convolution is the plain product of pixels x channels @ filters.
    attrs "epilogue" (a key of EPILOGUES; only where takes_epilogue) also applies the layer's
    bias (input 2, one value per output channel) and/or relu as it stores (epilogues.py)."""
    x, w = out.in_shapes[:2]
    y = out.shape
    geo = _geometry(attrs, x, w, y)
    epilogue = attrs.get("epilogue", "")
    if _direct(out):
        codegen.require_float32(op, out)
        return _plan_direct_conv2d(op, geo, y[0] * y[1], limits, epilogue=epilogue)
    if epilogue:
        raise ValueError(f"conv2d: epilogue {epilogue!r} needs conv_direct.wgsl (takes_epilogue)")
    if _pointwise(attrs, w):
        # Row-major operands take the vec4 products: the hand model's 31 convolutions (mostly
        # these) went 247 -> 106 ms a frame on SwiftShader, same bits.
        m, n, k = y[0] * y[1] * y[2], y[3], x[3]
        g = Gemm(m, n, k, a_batch=m * k, a_row=k, a_col=1, b_batch=k * n, b_row=n, b_col=1)
        return gemm_plan(op, out, g, "strided_a", "strided_b", limits)
    g = Gemm(y[0] * y[1] * y[2], y[3], w[0] * w[1] * w[2], b_row=y[3], b_col=1, **geo)
    return gemm_plan(op, out, g, "im2col_a", "strided_b", limits)


def plan_conv2d_backprop_input(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    """Input pixels x (taps, out channels) of the output gradient @ the filters transposed; on a
    software adapter, at stride 1, a convolution of the output gradient by the flipped filters
    (conv_direct.wgsl)."""
    gy, w = out.in_shapes
    x = out.shape
    geo = _geometry(attrs, x, w, gy)
    direct = tuple(attrs["strides"]) == (1, 1) and x[3] % 4 == 0 and gy[3] <= DIRECT_GRAD_MAX_IN
    if limits.resident_workgroups and direct and codegen.numel(x) and codegen.numel(gy):
        codegen.require_float32(op, out)
        flipped = {"in_h": gy[1], "in_w": gy[2], "in_c": gy[3], "out_h": x[1], "out_w": x[2]}
        flipped |= {"out_c": x[3], "k_h": w[0], "k_w": w[1], "stride_h": 1, "stride_w": 1}
        flipped |= {"pad_top": w[0] - 1 - geo["pad_top"], "pad_left": w[1] - 1 - geo["pad_left"]}
        return _plan_direct_conv2d(op, flipped, x[0] * x[1], limits, input_grad=True)
    g = Gemm(x[0] * x[1] * x[2], x[3], w[0] * w[1] * w[3], **geo)
    return gemm_plan(op, out, g, "output_grad_a", "transposed_filter_b", limits)


def plan_conv2d_backprop_filter(
    op: str, attrs: dict[str, Any], out: OutSpec, limits: DeviceLimits
) -> KernelPlan:
    """im2col transposed (taps x pixels) @ the output gradient (pixels x out channels); on a
    software adapter, with output channels in whole vec4s, summed per tap (filter_grad.py)."""
    x, gy = out.in_shapes
    w = out.shape
    geo = _geometry(attrs, x, w, gy)
    if limits.resident_workgroups and w[3] % 4 == 0 and codegen.numel(w) and codegen.numel(gy):
        codegen.require_float32(op, out)
        return filter_grad.plan(op, geo, x, gy, w, limits)
    g = Gemm(w[0] * w[1] * w[2], w[3], gy[0] * gy[1] * gy[2], b_row=w[3], b_col=1, **geo)
    return gemm_plan(op, out, g, "im2col_transposed_a", "strided_b", limits)
