"""Per-primitive draw plans: which program runs and the uniforms it gets (shapes, strides, pads).

Each primitive's planner is registered in the backends' kernel table (backends.register_kernel)
and looked up there. Programs take shapes as uniforms, so one compiled program serves every
shape of its op.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from .. import OutSpec, counter_hash, kernel_for, register_kernel
from .shaders import BINARY, UNARY, fused_constant_bits, fused_token

NAME = "webgl2"

MAX_RANK = 6
Uniform = tuple[str, str, list[float]]  # name, kind ("i" ints / "f" floats), values
Plan = tuple[str, list[Uniform]]
Planner = Callable[[str, dict[str, Any], OutSpec], Plan]


def _strides(shape: Sequence[int]) -> list[int]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return out[::-1]


def _left_pad(values: Sequence[int], fill: int) -> list[int]:
    if len(values) > MAX_RANK:
        raise ValueError(f"webgl2 kernels handle tensors up to rank {MAX_RANK}, got {len(values)}")
    return [fill] * (MAX_RANK - len(values)) + [int(v) for v in values]


def ints(name: str, values: Sequence[int]) -> Uniform:
    return (name, "i", [float(v) for v in values])


def _merge_dims(
    shape: Sequence[int], stride: Sequence[int], low: Sequence[int], dim: Sequence[int], big: int
) -> tuple[list[int], list[int], list[int], list[int]]:
    """Fewer dims, same mapping: size-1 dims without bounds go, and a dim merges into the one
    after it when neither is bounds-checked and the strides are contiguous (fewer div/mod per
    element in the shader)."""
    dims = [
        [n, s, lo, big if lo == 0 and d >= n else d]
        for n, s, lo, d in zip(shape, stride, low, dim, strict=True)
        if not (n == 1 and lo == 0 and d >= 1)
    ]
    merged: list[list[int]] = []
    for n, s, lo, d in dims:
        if merged:
            pn, ps, plo, pd = merged[-1]
            if plo == 0 and pd == big and lo == 0 and d == big and ps == s * n:
                merged[-1] = [pn * n, s, 0, big]
                continue
        merged.append([n, s, lo, d])
    if not merged:
        merged = [[1, 0, 0, big]]
    return (
        [m[0] for m in merged],
        [m[1] for m in merged],
        [m[2] for m in merged],
        [m[3] for m in merged],
    )


def _strided(
    shape: Sequence[int],
    stride: Sequence[int],
    low: Sequence[int],
    dim: Sequence[int],
    fill: float = 0.0,
) -> Plan:
    big = 2**30  # an extent no coordinate reaches: no bounds check on this dim
    shape, stride, low, dim = _merge_dims(shape, stride, low, [min(d, big) for d in dim], big)
    if stride[-1] == 1 and (len(shape) == 1 or (len(shape) == 2 and low[0] == 0 and dim[0] == big)):
        # Rows (or one row) of contiguous elements, only the last dim sliced or padded.
        row_stride = stride[0] if len(shape) == 2 else 0
        return "rows", [
            ints("u_rows", [shape[-1], row_stride, -low[-1], dim[-1]]),
            ("u_fill", "f", [float(fill)]),
        ]
    return "strided", [
        ints("u_rank", [len(shape)]),
        ints("u_shape", _left_pad(shape, 1)),
        ints("u_stride", _left_pad(stride, 0)),
        ints("u_low", _left_pad(low, 0)),
        ints("u_dim", _left_pad(dim, big)),
        ("u_fill", "f", [float(fill)]),
    ]


def _expand(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    src = (1,) * (len(out.shape) - len(out.in_shapes[0])) + tuple(out.in_shapes[0])
    stride = [s if n != 1 else 0 for s, n in zip(_strides(src), src, strict=True)]
    return _strided(out.shape, stride, [0] * len(src), [2**30] * len(src))


def _reshape(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    return _strided([math.prod(out.shape)], [1], [0], [2**30])


def _transpose(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    src_strides = _strides(out.in_shapes[0])
    perm = attrs["perm"]
    return _strided(out.shape, [src_strides[p] for p in perm], [0] * len(perm), [2**30] * len(perm))


def _slice(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    src = out.in_shapes[0]
    return _strided(out.shape, _strides(src), [-b for b in attrs["begin"]], src)


def _pad(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    src = out.in_shapes[0]
    low = [p[0] for p in attrs["paddings"]]
    return _strided(out.shape, _strides(src), low, src, float(attrs["value"]))


def _concat(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    axis = attrs["axis"]
    offsets = [0]
    for shape in out.in_shapes:
        offsets.append(offsets[-1] + shape[axis])
    inner = math.prod(out.shape[axis + 1 :])
    return f"concat:{len(out.in_shapes)}", [
        ints("u_inner", [max(inner, 1)]),
        ints("u_total", [max(offsets[-1], 1)]),
        ints("u_offsets", offsets),
    ]


def _merge_index_space(dims: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(extent, stride) dims with size-1 dims dropped and contiguous neighbours merged: the
    same offsets in row-major order, with fewer div/mod per element in the shader."""
    merged: list[tuple[int, int]] = []
    for n, s in dims:
        if n == 1:
            continue
        if merged and merged[-1][1] == s * n:
            merged[-1] = (merged[-1][0] * n, s)
        else:
            merged.append((n, s))
    return merged


def _reduce(kind: str, shape: Sequence[int], axes: Sequence[int]) -> Plan:
    """Kept and reduced index spaces over the input's strides (trailing 1-dims dropped)."""
    strides = _strides(shape)
    kept = [(n, s) for i, (n, s) in enumerate(zip(shape, strides, strict=True)) if i not in axes]
    red = [(n, s) for i, (n, s) in enumerate(zip(shape, strides, strict=True)) if i in axes]
    kept, red = _merge_index_space(kept), _merge_index_space(red)
    # One reduced and at most one kept axis (rows of a matrix, a whole tensor): the "_axis"
    # program, which indexes without a loop over dims.
    one_axis = "_axis" if len(red) == 1 and len(kept) <= 1 else ""
    return f"reduce:{kind}{one_axis}", [
        ints("u_parts", [1]),  # one pass (rewrites.split_reduction sets more)
        ints("u_chunk", [0]),
        ints("u_kept_rank", [len(kept)]),
        ints("u_red_rank", [len(red)]),
        ints("u_kept_shape", _left_pad([n for n, _ in kept], 1)),
        ints("u_kept_stride", _left_pad([s for _, s in kept], 0)),
        ints("u_red_shape", _left_pad([n for n, _ in red], 1)),
        ints("u_red_stride", _left_pad([s for _, s in red], 0)),
        ints("u_red_count", [math.prod(n for n, _ in red)]),
    ]


def sum_rows_plan(attrs: dict[str, Any], out: OutSpec) -> Plan | None:
    """reduce_sum over the leading axes of its input, whose other axes hold a multiple of 4
    elements, as the whole-texel kernel sum_rows4 (glsl/sum_rows4.frag), else None."""
    shape = out.in_shapes[0]
    lead = len(attrs["axes"])
    if tuple(sorted(attrs["axes"])) != tuple(range(lead)) or lead == len(shape):
        return None
    rows, cols = math.prod(shape[:lead]), math.prod(shape[lead:])
    if cols % 4 or rows == 0 or cols == 0:
        return None
    return "sum_rows4", [ints("u_rows", [rows]), ints("u_cols4", [cols // 4])]


def _reduce_op(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    kind = "sum" if op == "reduce_sum" else "max"
    return _reduce(kind, out.in_shapes[0], tuple(attrs["axes"]))


def _argmax(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    return _reduce("argmax", out.in_shapes[0], (attrs["axis"],))


def _matmul(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    a, b = out.in_shapes
    m, n = out.shape[-2], out.shape[-1]
    k = a[-2] if attrs["transpose_a"] else a[-1]
    # (batch, row, inner) strides of a and (batch, inner, column) strides of b.
    a_stride = [a[-1] * a[-2], 1 if attrs["transpose_a"] else a[-1]]
    a_stride.append(a[-1] if attrs["transpose_a"] else 1)
    b_stride = [b[-1] * b[-2], 1 if attrs["transpose_b"] else b[-1]]
    b_stride.append(b[-1] if attrs["transpose_b"] else 1)
    return "matmul", [
        ints("u_m", [m]),
        ints("u_n", [n]),
        ints("u_k", [k]),
        ints("u_a_stride", a_stride),
        ints("u_b_stride", b_stride),
    ]


def _geometry(attrs: dict[str, Any]) -> list[Uniform]:
    (top, _), (left, _) = attrs["pads"]
    return [ints("u_stride", attrs["strides"]), ints("u_pad", [top, left])]


def _conv(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    if op == "conv2d":
        x, w, o = out.in_shapes[0], out.in_shapes[1], out.shape
    elif op == "conv2d_backprop_input":
        x, w, o = out.shape, out.in_shapes[1], out.in_shapes[0]
    else:
        x, w, o = out.in_shapes[0], out.shape, out.in_shapes[1]
    return op, [ints("u_x", x), ints("u_w", w), ints("u_o", o[1:3]), *_geometry(attrs)]


def _depthwise(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    x, w = out.in_shapes
    return op, [ints("u_x", x), ints("u_w", w), ints("u_o", out.shape[1:3]), *_geometry(attrs)]


def depthwise_vector_plan(
    attrs: dict[str, Any], out: OutSpec, rgba: bool, r_filter: bool
) -> Plan | None:
    """glsl/depthwise_conv2d4.frag where input and output are RGBA textures of whole texels of
    channels and each output channel is its input channel (M == 1: every model layer here),
    else None. The filter may have either layout: "depthwise_conv2d4:r" reads an R one."""
    x, w = out.in_shapes
    if not rgba or w[3] != 1 or x[3] % 4 or 0 in out.shape or 0 in x:
        return None
    key = "depthwise_conv2d4:r" if r_filter else "depthwise_conv2d4"
    return key, _depthwise("depthwise_conv2d", attrs, out)[1]


def _pool(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    kind = {"max_pool2d": "max", "avg_pool2d": "avg"}.get(op)
    if kind is not None:
        x, o = out.in_shapes[0], out.shape
    else:
        kind = "max_grad" if op == "max_pool2d_grad" else "avg_grad"
        x, o = out.shape, out.in_shapes[-1]
    return f"pool:{kind}", [
        ints("u_x", x),
        ints("u_o", o[1:3]),
        ints("u_k", attrs["pool_size"]),
        *_geometry(attrs),
    ]


def _fused(program: Any, count: int) -> Plan:
    bits = fused_constant_bits(program)
    return f"fused:{fused_token(program, count)}", [ints("u_c", bits)] if bits else []


def _random_uniform(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    key = counter_hash.stream_key(attrs["seed"], attrs["stream"])
    return "random_uniform", [
        ints("u_key", [key >> 16, key & 0xFFFF]),
        ints("u_shift", [32 - attrs["bits"]]),
        ("u_scale", "f", [2.0 ** -attrs["bits"]]),
    ]


def _affine_sample(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    return "affine_sample", [ints("u_x", out.in_shapes[0]), ints("u_o", attrs["size"])]


# Bits of a random_uniform value float16 storage holds exactly: 11 in one half; 22 as the half
# rounding plus the compensation texture's remainder (below 2^11 units of 2^-22, whichever way
# the driver rounds to half).
HALF_DRAW_BITS = 11
COMPENSATED_DRAW_BITS = 22


def check_half_draw(bits: int, compensated: bool) -> None:
    """Refuses a random_uniform draw float16 storage would round (values would differ)."""
    limit = COMPENSATED_DRAW_BITS if compensated else HALF_DRAW_BITS
    if bits > limit:
        raise ValueError(
            f"random_uniform: webgl2 on float16 storage holds {limit} bits of a uniform draw "
            f"exactly, not {bits}; pass bits <= {limit} (Dropout draws {limit} or fewer)"
        )


def _elementwise(kind: str) -> Planner:
    return lambda op, attrs, out: (f"{kind}:{op}", [])


# Registered below into backends.KERNELS, where plan() looks them up.
PLANNERS: dict[str, Planner] = {
    **{op: _elementwise("unary") for op in UNARY},
    **{op: _elementwise("binary") for op in BINARY},
    "where": lambda op, attrs, out: ("where", []),
    "cast": lambda op, attrs, out: (f"cast:{attrs['dtype']}", []),
    "fused": lambda op, attrs, out: _fused(attrs["program"], len(out.in_shapes)),
    "expand": _expand,
    "reshape": _reshape,
    "transpose": _transpose,
    "slice": _slice,
    "pad": _pad,
    "concat": _concat,
    "reduce_sum": _reduce_op,
    "reduce_max": _reduce_op,
    "argmax": _argmax,
    "matmul": _matmul,
    "conv2d": _conv,
    "conv2d_backprop_input": _conv,
    "conv2d_backprop_filter": _conv,
    "depthwise_conv2d": _depthwise,
    "max_pool2d": _pool,
    "max_pool2d_grad": _pool,
    "avg_pool2d": _pool,
    "avg_pool2d_grad": _pool,
    "random_uniform": _random_uniform,
    "affine_sample": _affine_sample,
}


for _op, _planner in PLANNERS.items():
    register_kernel(NAME, _op)(_planner)


VECTOR_OPS = frozenset(
    {
        "matmul",
        "conv2d",
        "conv2d_backprop_input",
        "conv2d_backprop_filter",
        "max_pool2d",
        "avg_pool2d",
        "max_pool2d_grad",
        "avg_pool2d_grad",
    }
)


def _vector_matmul(attrs: dict[str, Any], out: OutSpec) -> Plan | None:
    ta, tb = bool(attrs["transpose_a"]), bool(attrs["transpose_b"])
    a = out.in_shapes[0]
    m, n = out.shape[-2], out.shape[-1]
    k = a[-2] if ta else a[-1]
    # Every dimension a texel spans must be whole texels: the inner dims of a, b and out.
    variant = {(False, False): "nn", (False, True): "nt", (True, False): "tn"}.get((ta, tb))
    need = {"nn": (k, n), "nt": (k, n), "tn": (m, n)}.get(variant or "", ())
    if variant is None or any(d % 4 for d in need) or min(m, n, k) == 0:
        return None
    return f"matmul4:{variant}", [ints("u_m", [m]), ints("u_n", [n]), ints("u_k", [k])]


def _vector_conv(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan | None:
    _, uniforms = _conv(op, attrs, out)
    if op == "conv2d":
        x, w = out.in_shapes[0], out.in_shapes[1]
    elif op == "conv2d_backprop_input":
        x, w = out.shape, out.in_shapes[1]
    else:
        x, w = out.in_shapes[0], out.shape
    ci, co = x[3], w[3]
    if co % 4 or 0 in x or 0 in w or 0 in out.shape:
        return None
    if op == "conv2d_backprop_input":
        return (f"{op}4:vec", uniforms) if ci % 4 == 0 else None
    if op == "conv2d_backprop_filter":  # one sum over every gradient row (n, oh)
        uniforms.append(ints("u_rows", [x[0] * out.in_shapes[1][1]]))
    return f"{op}4:{'vec' if ci % 4 == 0 else 'scalar'}", uniforms


def vector_plan(
    op: str, attrs: dict[str, Any], out: OutSpec, all_rgba: bool, rows_aligned: bool = False
) -> Plan | None:
    """A whole-texel kernel for matmul, the convolutions and pooling when every texture involved
    is RGBA and the dimensions a texel spans are multiples of 4 (see texture_layout.choose_layout), else
    None. rows_aligned: every input's texture row is one row of its innermost dim."""
    if not all_rgba:
        return None
    if op == "matmul":
        matmul = _vector_matmul(attrs, out)
        if matmul is not None and rows_aligned and matmul[0] in ("matmul4:nn", "matmul4:nt"):
            return f"{matmul[0]}_aligned", matmul[1]
        return matmul
    if op in ("conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"):
        return _vector_conv(op, attrs, out)
    key, uniforms = _pool(op, attrs, out)  # pooling: channels (innermost) a multiple of 4
    if out.shape[-1] % 4 or 0 in out.shape:
        return None
    if key == "pool:max_grad" and tuple(attrs["strides"]) == tuple(attrs["pool_size"]):
        return "pool4:max_grad_disjoint", uniforms  # each input pixel in one window at most
    return key.replace("pool:", "pool4:"), uniforms


def plan(op: str, attrs: dict[str, Any], out: OutSpec) -> Plan:
    """The program key and uniforms of one primitive call."""
    planner: Planner = kernel_for(NAME, op)
    return planner(op, attrs, out)
