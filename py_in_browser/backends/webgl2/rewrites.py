"""Rewrite rules: primitive calls that run better as other draws than their planned kernel
(split-K and padded products, blocks, two-pass reductions, a transposed operand, concat in
groups, views without a draw) and the whole-texel variant of a planned kernel."""

from __future__ import annotations

import math
from typing import Any, Protocol

from .. import OutSpec
from . import blocks, epilogues, kernels, shaders, wire
from .draw_queue import DrawQueue
from .memory import TextureMemory
from .texture_layout import choose_layout
from .textures import Handle

# (1, K) @ (K, N) products with K at least this are cut into K slices (see matmul_split_k).
SPLIT_K_AT = 2048
# Whole-texel products and convolutions of at least this many multiply-adds run as blocks (see
# blocks.py): below it the extra interleave draw and targets cost more than they save.
BLOCKS_AT = 2**20
# Depthwise convolutions (multiply-adds: outputs x filter taps) run as blocks from this many: a
# depthwise layer has no input-channel sum, so its blocks pay off at a smaller size (the hand
# model's 7x7x672 5x5 layers, 0.8M each: 17 ms as depthwise_conv2d4 and its bias and relu6
# draws on SwiftShader, 6 ms as a block and interleave with both fused; profiled H1 runs).
DEPTHWISE_BLOCKS_AT = 2**17
# Products of at least this many multiply-adds whose dimensions are not whole texels are padded
# to whole texels (see matmul_padded); below it the pad and slice draws cost more.
PAD_MATMUL_AT = 2**15
# Whole-texel kernels that have a block form: (block program, its variant, profile label).
BLOCK_PROGRAMS = {
    "matmul4:nn_aligned": ("matmul_block", "nn", "matmul"),
    "matmul4:nt_aligned": ("matmul_block", "nt", "matmul"),
    "matmul4:tn_aligned": ("matmul_block", "tn", "matmul"),  # a^T @ b (blocked_transposed_a)
    "conv2d4:vec": ("conv2d_block", "vec", "conv2d"),
    "conv2d4:scalar": ("conv2d_block", "scalar", "conv2d"),
}
# A filter gradient of fewer output texels than this is split into partial sums over its
# gradient rows (see split_filter_gradient), into about this many texels in all.
SPLIT_FILTER_TEXELS = 8192
# Filter gradients of at least BLOCKS_AT multiply-adds whose output channels fill blocks run as
# a product of patches (see filter_gradient_as_product), cut into parts along the positions
# until the product has about this many blocks to run in parallel.
PATCH_PRODUCT_BLOCKS = 256
# Reductions of at least this many values into at most this many outputs run in two passes.
SPLIT_REDUCTION_AT = 2048
SPLIT_REDUCTION_OUTPUTS = 1024
# Expands of one element and same-layout reshapes share their source's texture (see alias);
# False draws a copy for each (for comparisons).
ALIAS_VIEWS = True
FLOAT_DTYPES = ("float32", "float64")


class Drawing(Protocol):
    """What the rules draw with: the backend's memory and queue, and run/free for sub-calls."""

    memory: TextureMemory
    queue: DrawQueue
    draw_buffers: int

    def run(self, op: str, inputs: list[Any], attrs: dict[str, Any], out: OutSpec) -> Handle: ...

    def free(self, handle: Handle) -> None: ...


def rewrite(
    backend: Drawing, op: str, inputs: list[Any], attrs: dict[str, Any], out: OutSpec
) -> Handle | None:
    """The call rewritten into other draws (or none), or None where the planned kernel runs."""
    if op == "concat" and len(inputs) > wire.MAX_INPUTS_PER_DRAW:
        return concat_in_groups(backend, inputs, attrs, out)
    if op == "matmul" and transpose_first(backend, attrs, out, inputs):
        folded = blocked_transposed_a(backend, inputs, attrs, out)
        return folded or matmul_transposed_a(backend, inputs, attrs, out)
    if op == "matmul":
        split = matmul_split_k(backend, inputs, attrs, out) or matmul_padded(
            backend, inputs, attrs, out
        )
        if split is not None:
            return split
    if op == "conv2d_backprop_filter":
        product = filter_gradient_as_product(backend, inputs, attrs, out)
        if product is not None:
            return product
    if op == "conv2d_backprop_input":
        conv = input_gradient_as_conv(backend, inputs, attrs, out)
        if conv is not None:
            return conv
    if op in ("reduce_sum", "reduce_max") and out.dtype in FLOAT_DTYPES:
        split = split_reduction(backend, op, inputs, attrs, out)
        if split is not None:
            return split
    if op in ("expand", "reshape") and ALIAS_VIEWS:
        return alias(backend, op, inputs[0], out)
    return None


def split_reduction(
    backend: Drawing, op: str, inputs: list[Handle], attrs: dict[str, Any], out: OutSpec
) -> Handle | None:
    """A long reduction over few outputs in two passes: each output element's reduced
    indices are cut into about sqrt(n) chunks reduced in parallel (one fragment each), then
    the chunks are reduced. One fragment walking all n indices alone left the GPU idle (a
    conv bias gradient sums 8192 values per channel)."""
    shape = out.in_shapes[0]
    count = math.prod(shape[a] for a in attrs["axes"])
    kept = math.prod(shape) // max(count, 1)
    if count < SPLIT_REDUCTION_AT or kept > SPLIT_REDUCTION_OUTPUTS:
        return None
    chunk = math.isqrt(count - 1) + 1
    parts = -(-count // chunk)
    key, uniforms = kernels.plan(op, attrs, out)
    uniforms = [u for u in uniforms if u[0] not in ("u_parts", "u_chunk")]
    uniforms += [kernels.ints("u_parts", [parts]), kernels.ints("u_chunk", [chunk])]
    partial = backend.memory.allocate((kept, parts), out.dtype, False)
    backend.queue.draw(key, partial, inputs, uniforms, op, pair=False)
    spec = OutSpec(out.shape, out.dtype, ((kept, parts),), (out.dtype,))
    result = backend.run(op, [partial], {**attrs, "axes": (1,)}, spec)
    backend.free(partial)
    return result


def alias(backend: Drawing, op: str, source: Handle, out: OutSpec) -> Handle | None:
    """The result as another handle on source's texture(s), with no draw, where that reads
    the same: an expand of one element (kernels read a one-element texture at every index:
    element() and x<k>v in shaders.py), or a reshape whose natural layout is source's
    texture layout. Textures shared this way are counted, so free() pools them once."""
    layout = source.texture.layout
    repeat = 1
    if op == "expand":
        periodic = periodic_view(source.shape, out.shape, layout.size)
        if periodic is None or source.repeat != 1:
            return None
        choose_layout(out.shape, backend.memory.max_side)  # what reads it densely must hold it
        repeat = periodic
    elif source.repeat != 1 or choose_layout(out.shape, backend.memory.max_side) != layout:
        return None
    backend.memory.share(source)
    return Handle(source.texture, source.lo, out.shape, out.dtype, repeat)


def vector_variant(
    max_side: int,
    op: str,
    attrs: dict[str, Any],
    out: OutSpec,
    inputs: list[Handle],
    key: str,
    uniforms: list[kernels.Uniform],
) -> tuple[str, list[kernels.Uniform]]:
    """The whole-texel kernel for this call where the textures allow one (see
    kernels.vector_plan and shaders.VECTOR_KERNELS), else the element kernel planned."""
    layout = choose_layout(out.shape, max_side)
    ins = [h.texture.layout for h in inputs]
    if any(h.repeat != 1 for h in inputs):
        return key, uniforms  # a trailing broadcast view: element kernels read it in place
    if op == "reduce_sum" and all(item.channels == 4 for item in [layout, *ins]):
        dense = ins[0].size == math.prod(inputs[0].shape)
        rows = kernels.sum_rows_plan(attrs, out) if dense else None
        if rows is not None:
            return rows
    if op == "depthwise_conv2d":
        dense = all(h.texture.layout.size == math.prod(h.shape) for h in inputs)
        rgba = dense and layout.channels == 4 == ins[0].channels
        vector = kernels.depthwise_vector_plan(attrs, out, rgba, ins[1].channels == 1)
        return vector if vector is not None else (key, uniforms)
    if op in kernels.VECTOR_OPS:
        if any(h.texture.layout.size != math.prod(h.shape) for h in inputs):
            return key, uniforms  # a broadcast view: element kernels read it periodically
        all_rgba = all(item.channels == 4 for item in [layout, *ins])
        aligned = all(
            item.width * 4 == shape[-1] for item, shape in zip(ins, out.in_shapes, strict=True)
        )
        vector = kernels.vector_plan(op, attrs, out, all_rgba, aligned)
        return vector if vector is not None else (key, uniforms)
    kind, _, arg = key.partition(":")
    same = (layout.width, layout.height, layout.channels)
    if kind in shaders.ELEMENTWISE_KINDS and all(
        (item.width, item.height, item.channels) == same
        or item.size == 1
        or (  # a broadcast view repeating whole texels (see shaders._inputs)
            item.channels == 4 == layout.channels
            and item.size % 4 == 0
            and layout.size % item.size == 0
        )
        for item in ins
    ):
        # Elementwise uniforms (a fused program's constants) serve both forms.
        periodic = any(1 < item.size < layout.size for item in ins)
        texel_key = f"{kind}4:{arg}" if arg else f"{kind}4"
        return texel_key + ("+periodic" if periodic else ""), uniforms
    if op == "reshape" and ins[0].channels == layout.channels and ins[0].size == layout.size:
        return "copy4", []
    return key, uniforms


def transpose_first(
    backend: Drawing, attrs: dict[str, Any], out: OutSpec, inputs: list[Handle]
) -> bool:
    """a^T @ b with whole-texel operands: the vector kernel would fetch a texel of a for
    every element it uses, so transposing a once (a quarter of the fetches of the product
    per output column block) and running the plain product is cheaper."""
    if not attrs["transpose_a"] or attrs["transpose_b"]:
        return False
    a = out.in_shapes[0]
    k, m, n = a[-2], a[-1], out.shape[-1]
    rgba = all(h.texture.layout.channels == 4 for h in inputs)
    rgba = rgba and all(h.texture.layout.size == math.prod(h.shape) for h in inputs)
    out_rgba = choose_layout(out.shape, backend.memory.max_side).channels == 4
    return rgba and out_rgba and min(k, m, n) > 0 and not (k % 4 or m % 4 or n % 4)


def matmul_split_k(
    backend: Drawing, inputs: list[Handle], attrs: dict[str, Any], out: OutSpec
) -> Handle | None:
    """A row vector times a tall matrix (a batch-1 Dense layer: (1, K) @ (K, N), K large)
    has N / 4 output texels, each a K-long loop: the GPU sat nearly idle. Cut K into P
    slices, a batched product (P, 1, K/P) @ (P, K/P, N) on the same textures (the same
    flat elements), then a sum over the slices."""
    if attrs["transpose_a"] or attrs["transpose_b"] or len(out.shape) != 2:
        return None
    (m, k), (_, n) = out.in_shapes
    rgba = all(h.texture.layout.channels == 4 for h in inputs)
    rgba = rgba and all(h.texture.layout.size == math.prod(h.shape) for h in inputs)
    if m != 1 or k < SPLIT_K_AT or n % 4 or not rgba:
        return None
    parts = next((p for p in (64, 32, 16, 8) if k % (4 * p) == 0 and k // p >= 64), 0)
    if not parts:
        return None
    rows = k // parts
    a = Handle(inputs[0].texture, None, (parts, 1, rows), out.in_dtypes[0])
    b = Handle(inputs[1].texture, None, (parts, rows, n), out.in_dtypes[1])
    spec = OutSpec((parts, 1, n), out.dtype, (a.shape, b.shape), out.in_dtypes)
    key, uniforms = kernels.plan("matmul", attrs, spec)
    key, uniforms = vector_variant(
        backend.memory.max_side, "matmul", attrs, spec, [a, b], key, uniforms
    )
    partial = backend.memory.allocate(spec.shape, out.dtype, False)
    backend.queue.draw(key, partial, [a, b], uniforms, "matmul", pair=False)
    # The sum of the parts, whole texels; a layer's bias and relu can join it (epilogues.py),
    # so the partial sums live on with the result.
    summed = backend.memory.allocate(out.shape, out.dtype, False)
    sums = [kernels.ints("u_parts", [parts]), kernels.ints("u_texels", [n // 4])]
    draw = backend.queue.draw("sum_parts4", summed, [partial], sums, "matmul", pair=False)
    record = epilogues.Summed(draw, partial, sums, bias=None, relu=False, stamps=())
    backend.memory.attach(summed, [partial], record)
    return summed


def blocked(
    backend: Drawing, key: str, inputs: list[Handle], out: OutSpec, uniforms: list[kernels.Uniform]
) -> Handle | None:
    """A large product or convolution as blocks (blocks.py): one draw into rows * cols
    targets, then one interleaving them into the output."""
    program, variant, label = BLOCK_PROGRAMS[key]
    rows, columns = out.shape[-2], out.shape[-1]  # matmul: M, N; conv2d: OW, CO
    a, b = out.in_shapes  # K: a's last dim, or its second last for a^T; KH * KW * CI
    inner = math.prod(b[:-1]) if label != "matmul" else a[-2] if variant == "tn" else a[-1]
    shape = blocks.shape_for(rows, columns, backend.draw_buffers, label == "conv2d")
    if shape is None or math.prod(out.shape) * inner < BLOCKS_AT:
        return None
    block_rows, cols = shape
    block = (math.prod(out.shape[:-1]) // block_rows, columns // cols)
    # The matmul block kernel addresses its targets by texture row and column; the aligned
    # interleave shifts by the block's sides (powers of two).
    aligned = choose_layout(block, backend.memory.max_side).width * 4 * cols == columns
    aligned = aligned and block_rows & (block_rows - 1) == 0
    if label == "matmul" and not aligned:
        return None
    if variant == "vec":
        variant = pointwise(backend, inputs, out, block, uniforms) or variant
    targets = None
    if variant.startswith("pw"):
        targets = block_targets(backend, inputs[0], block_rows, "depthwise_conv2d", 3)
    if targets is not None:
        variant, inputs = f"pwt{targets[0]}", [*targets[1], inputs[1]]
    if variant == "scalar" and window_channels(a[-1], block_rows, uniforms):
        # A first layer on images: input windows, not single elements.
        stride = int(next(values for name, _, values in uniforms if name == "u_stride")[1])
        variant = f"c{a[-1]}" + (f"s{stride}" if stride != 1 else "")
        if blocks.window_texels(a[-1], block_rows, stride, b[1]) <= blocks.MAX_WINDOW_TEXELS:
            variant += f"k{b[1]}"  # one window per filter row, not per tap
    key = f"{program}:{variant}_{block_rows}x{cols}"
    return _draw_blocks(backend, key, inputs, uniforms, label, out, (block_rows, cols), aligned)


def depthwise_blocked(
    backend: Drawing, inputs: list[Handle], attrs: dict[str, Any], out: OutSpec,
    uniforms: list[kernels.Uniform],
) -> Handle | None:  # fmt: skip
    """A whole-texel depthwise convolution (depthwise_conv2d4) as blocks of
    neighbouring output pixels (blocks.depthwise_source: each input and filter texel fetched
    once per block, not once per pixel and tap), then an interleave; a bias and relu or relu6
    after it join them as after a convolution's blocks (epilogues.py)."""
    (_, kw, _, _), width = out.in_shapes[1], out.shape[2]
    rows = blocks.depthwise_rows(width, backend.draw_buffers)
    if rows is None or kw > blocks.MAX_DEPTHWISE_WINDOW:
        return None  # (a filter gradient's whole-image window stays with the texel kernel)
    if math.prod(out.shape) * math.prod(out.in_shapes[1][:2]) < DEPTHWISE_BLOCKS_AT:
        return None
    packed = packed_filter(backend, inputs[1], out.in_dtypes[1])
    filter_ = inputs[1] if packed is None else packed
    variant = f"k{kw}s{attrs['strides'][1]}" + "r" * (filter_.texture.layout.channels == 1)
    # An expansion's conv blocks of as many pixels: read in place (blocks.depthwise_source).
    targets = block_targets(backend, inputs[0], rows, "conv2d", 2) or narrowed_targets(
        backend, inputs[0], rows
    )
    reads = [inputs[0], filter_]
    if targets is not None:
        pad = int(next(values for name, _, values in uniforms if name == "u_pad")[1])
        variant, reads = f"{variant}t{pad}{targets[0]}", [*targets[1], filter_]
    key = f"depthwise_block:{variant}_{rows}x1"
    result = _draw_blocks(backend, key, reads, uniforms, "depthwise_conv2d", out, (rows, 1), False)
    if packed is not None:
        backend.memory.keep_with(result, packed)  # a bias fused in draws the block again
    return result


def packed_filter(backend: Drawing, filter_: Handle, dtype: str) -> Handle | None:
    """A depthwise filter (KH, KW, C, 1) held in an R texture (a small one: texture_layout's
    PACK_MIN_ELEMENTS) drawn into an RGBA texture, its elements in the same order, or None
    where it is RGBA already (or has a float16 low part). A block fetches one texel a tap from
    it instead of 4 (H1's 24- to 96-channel 3x3 layers at 112 and 56 pixels); the copy, a
    small draw, stays part of the call so that it follows the filter's values in a recording."""
    if filter_.texture.layout.channels != 1 or filter_.lo is not None or filter_.repeat != 1:
        return None
    kh, kw, channels, _ = filter_.shape
    rows = (kh * kw, channels)  # whole texels of channels: an RGBA layout
    spec = OutSpec(rows, dtype, (filter_.shape,), (dtype,))
    copy = backend.run("reshape", [filter_], {"shape": rows}, spec)
    return Handle(copy.texture, None, filter_.shape, dtype)


def _draw_blocks(
    backend: Drawing,
    key: str,
    inputs: list[Handle],
    uniforms: list[kernels.Uniform],
    label: str,
    out: OutSpec,
    shape: tuple[int, int],
    aligned: bool,
) -> Handle:
    """Block program `key` drawn into rows * cols targets of `shape`'s blocks, then their
    interleave into the output; the targets live on with the output (epilogues.Blocked)."""
    block_rows, cols = shape
    columns = out.shape[-1]
    block = (math.prod(out.shape[:-1]) // block_rows, columns // cols)
    targets = [backend.memory.allocate(block, out.dtype, False) for _ in range(block_rows * cols)]
    block_draw = backend.queue.draw(key, targets[0], inputs, uniforms, label, False, targets[1:])
    handle = backend.memory.allocate(out.shape, out.dtype, False)
    # One matrix row per texture row in the output and one block row in each target: the
    # interleave finds its texels from the fragment's position alone (blocks.interleave_source).
    rows_aligned = aligned and handle.texture.layout.width * 4 == columns
    interleave = f"block_interleave:{'aligned_' if rows_aligned else ''}{block_rows}x{cols}"
    cols4 = [kernels.ints("u_cols4", [columns // 4])]
    interleave_draw = backend.queue.draw(interleave, handle, targets, cols4, label, False)
    # The targets live on with the output, for a bias or relu fused in later (epilogues.py).
    record = epilogues.Blocked(
        block=block_draw,
        interleave=interleave_draw,
        block_key=key,
        inputs=list(inputs),
        uniforms=uniforms,
        targets=targets,
        interleave_key=interleave,
        interleave_uniforms=cols4,
        label=label,
        biased=False,
        relu=False,
        stamps=epilogues.stamps(backend.memory.pool, inputs),
    )
    backend.memory.attach(handle, targets, record)
    return handle


def split_filter_gradient(
    backend: Drawing, key: str, inputs: list[Handle], out: OutSpec, uniforms: list[kernels.Uniform]
) -> Handle | None:
    """A filter gradient sums over every gradient row (n, oh) of the batch, and has few
    outputs (3x3x3x16 filters: 108 texels, each an 8192-long loop at batch 8 of 32x32): the
    GPU sat nearly idle. P fragments per output texel each sum a slice of the rows into a
    (P, KH, KW, CI, CO) partial, then a sum over P (the way split_reduction cuts long sums)."""
    texels = math.prod(out.shape) // 4
    rows = out.in_shapes[0][0] * out.in_shapes[1][1]  # N * OH
    parts = min(rows, SPLIT_FILTER_TEXELS // max(texels, 1))
    if parts < 2:
        return None
    chunk = -(-rows // parts)
    parts = -(-rows // chunk)
    uniforms = [u for u in uniforms if u[0] != "u_rows"] + [kernels.ints("u_rows", [chunk])]
    partial = backend.memory.allocate((parts, *out.shape), out.dtype, False)
    backend.queue.draw(key, partial, inputs, uniforms, "conv2d_backprop_filter", pair=False)
    spec = OutSpec(out.shape, out.dtype, (partial.shape,), (out.dtype,))
    result = backend.run("reduce_sum", [partial], {"axes": (0,), "keepdims": False}, spec)
    backend.free(partial)
    return result


def filter_gradient_as_product(
    backend: Drawing, inputs: list[Handle], attrs: dict[str, Any], out: OutSpec
) -> Handle | None:
    """dw as a block product (blocks.py): the transposed patch matrix of x, (P, R, Q / P)
    with R = KH * KW * CI rows (glsl/patches4.frag, one draw), times g viewed as P (Q / P, CO)
    matrices (the same texture: Q = N * OH * OW positions by CO), then a sum over the P parts.
    The direct kernel (conv2d_backprop_filter4) fetches an input and a gradient texel for every
    4 multiply-adds (one input element a step); a 4 x 2 block fetches 12 texels per 128, and
    writing the patches costs about one fetch per 4 of their elements. Float32 storage only
    (float16's compensated sums stay on the direct kernel)."""
    x, g = inputs
    kh, kw, ci, co = out.shape
    positions = math.prod(out.in_shapes[1][:3])
    rows = kh * kw * ci
    rows4 = rows + -rows % 4  # zero rows: the product's rows are whole blocks
    layout = g.texture.layout
    whole_rows = layout.channels == 4 and layout.width * 4 == co and layout.size == positions * co
    rgba = x.texture.layout.channels == 4 and x.texture.layout.size == math.prod(x.shape)
    shape = blocks.shape_for(rows4, co, backend.draw_buffers)
    if (
        backend.memory.half
        or out.dtype != "float32"
        or x.repeat != 1
        or g.repeat != 1
        or not (whole_rows and rgba)
        or shape is None
        or out.in_shapes[1][2] % 4  # a patch texel's 4 positions lie in one output row
        or rows4 * co * positions < BLOCKS_AT
    ):
        return None
    block_rows, cols = shape
    parts = 1
    while (
        rows4 // block_rows * (co // (4 * cols)) * parts < PATCH_PRODUCT_BLOCKS
        and positions % (8 * parts) == 0
        and positions // (2 * parts) >= 256
    ):
        parts *= 2
    per_part = positions // parts
    _, uniforms = kernels.plan("conv2d_backprop_filter", attrs, out)
    uniforms += [kernels.ints("u_rows", [rows4]), kernels.ints("u_cols", [per_part])]
    patches = backend.memory.allocate((parts, rows4, per_part), out.in_dtypes[0], False)
    backend.queue.draw("patches4", patches, [x], uniforms, "conv2d_backprop_filter", pair=False)
    grads = Handle(g.texture, None, (parts, per_part, co), out.in_dtypes[1])
    spec = OutSpec((parts, rows4, co), out.dtype, (patches.shape, grads.shape), out.in_dtypes)
    plain = {"transpose_a": False, "transpose_b": False}
    result = backend.run("matmul", [patches, grads], plain, spec)
    backend.free(patches)
    if parts > 1:  # whole texels: the parts' texel t, part after part
        summed = backend.memory.allocate((rows4, co), out.dtype, False)
        sums = [kernels.ints("u_parts", [parts]), kernels.ints("u_texels", [rows4 * co // 4])]
        backend.queue.draw("sum_parts4", summed, [result], sums, "conv2d_backprop_filter", False)
        backend.free(result)
        result = summed
    if rows4 != rows:  # the zero rows' sums go
        kept = OutSpec((rows, co), out.dtype, (result.shape,), (out.dtype,))
        sliced = backend.run("slice", [result], {"begin": (0, 0)}, kept)
        backend.free(result)
        result = sliced
    return Handle(result.texture, result.lo, out.shape, out.dtype)


def input_gradient_as_conv(
    backend: Drawing, inputs: list[Handle], attrs: dict[str, Any], out: OutSpec
) -> Handle | None:
    """dx of a stride-1 convolution is a convolution of g with the filter turned (spatially
    flipped, input and output channels swapped: glsl/flip_filter.frag, a small draw) and the
    padding mirrored (K - 1 - pad), which runs on conv2d's block kernels (blocks.py): 12
    texel fetches per 128 multiply-adds, where the gather kernel (conv2d_backprop_input4)
    fetches 5 per 16. Float32 storage (float16's low parts stay on the gather kernel)."""
    g, w = inputs
    kh, kw, ci, co = out.in_shapes[1]
    (top, bottom), (left, right) = attrs["pads"]
    mirrored = ((kh - 1 - top, kh - 1 - bottom), (kw - 1 - left, kw - 1 - right))
    shape = blocks.shape_for(out.shape[2], ci, backend.draw_buffers)
    if (
        backend.memory.half
        or out.dtype != "float32"
        or tuple(attrs["strides"]) != (1, 1)
        or min(min(pair) for pair in mirrored) < 0
        or ci % 4
        or co % 4
        or g.repeat != 1
        or shape is None
        or math.prod(out.shape) * kh * kw * co < BLOCKS_AT
    ):
        return None
    turned = backend.memory.allocate((kh, kw, co, ci), out.in_dtypes[1], False)
    uniforms = [kernels.ints("u_w", [kh, kw, ci, co])]
    backend.queue.draw("flip_filter", turned, [w], uniforms, "conv2d_backprop_input", False)
    spec = OutSpec(out.shape, out.dtype, (out.in_shapes[0], turned.shape), out.in_dtypes)
    geometry = {"strides": (1, 1), "pads": mirrored}
    result = backend.run("conv2d", [g, turned], geometry, spec)
    backend.free(turned)
    return result


def pointwise(
    backend: Drawing,
    inputs: list[Handle],
    out: OutSpec,
    block: tuple[int, int],
    uniforms: list[kernels.Uniform],
) -> str | None:
    """The blocks.pointwise_source variant of a whole-texel conv block that is a 1x1
    convolution at stride 1 without padding, or None: "pw" where the input has one pixel per
    texture row, "pwc" where its texture is squarish; either way the filter has one input
    channel and the targets one block row per texture row."""
    x, w = out.in_shapes
    geometry = {name: values for name, _, values in uniforms if name in ("u_stride", "u_pad")}
    plain = tuple(w[:2]) == (1, 1) and tuple(out.shape[1:3]) == tuple(x[1:3])
    plain = plain and list(geometry["u_stride"]) == [1, 1] and not any(geometry["u_pad"])
    dense = all(
        h.repeat == 1 and h.texture.layout.channels == 4 and h.texture.layout.size == math.prod(s)
        for h, s in zip(inputs, (x, w), strict=True)
    )
    target = choose_layout(block, backend.memory.max_side)
    filter_rows = inputs[1].texture.layout.width * 4 == w[-1]
    if not (plain and dense and filter_rows and target.width * 4 == block[1]):
        return None
    return "pw" if inputs[0].texture.layout.width * 4 == x[-1] else "pwc"


def block_targets(
    backend: Drawing, source: Handle, block_rows: int, label: str, extra_inputs: int
) -> tuple[str, list[Handle]] | None:
    """The targets of the `label` block of `block_rows` pixels x 1 texel column that drew
    `source`, and the activation its interleave applies ("" or "-<activation>"), for a block
    draw reading them in place of source: a pointwise one after a depthwise block ("pwt",
    blocks.pointwise_source), a depthwise one after an expansion ("k<w>s<s>t<pad>",
    blocks.depthwise_source). Where the targets hold one block row per texture row and the draw
    has room for them and `extra_inputs` more (the filter, a skip, a bias); else None. The
    interleave then has no reader, unless something else reads source."""
    record = backend.memory.blocked.get(source.texture.id)
    if not isinstance(record, epilogues.Blocked) or record.label != label:
        return None
    if not record.block_key.endswith(f"_{block_rows}x1") or record.residual is not None:
        return None
    # Its program samples no float16 low parts: one texture unit per input (7-pixel blocks: 10).
    if block_rows + extra_inputs > wire.MAX_SINGLE_UNIT_INPUTS or source.repeat != 1:
        return None
    # (The targets live with source's texture (memory.attach) and hold what its interleave reads,
    # whatever became of the block's own inputs since: a depthwise block that read an expansion's
    # targets outlives them.)
    layouts = [t.texture.layout for t in record.targets]
    if any(layout.channels != 4 or layout.width * 4 != source.shape[-1] for layout in layouts):
        return None
    backend.queue.mark_droppable(record.interleave)  # drawn only if something else reads it
    return _activation_suffix(record), list(record.targets)


def _activation_suffix(record: epilogues.Blocked) -> str:
    """The activation a block's interleave applies, as a reading block's variant names it."""
    activation = "relu6" if record.relu6 else "relu" if record.relu else ""
    return f"-{activation}" if activation else ""


def narrowed_targets(
    backend: Drawing, source: Handle, rows: int
) -> tuple[str, list[Handle]] | None:
    """For a depthwise block of `rows` pixels reading its input in place (block_targets): where
    a pointwise block of `rows` x 2 texel columns drew `source` (the 112-, 56- and 28-pixel
    expansions), that block drawn again as `rows` x 1 (its bias and skip included) and its new
    targets, with the activation its interleave applies; else None. The 1-column block fetches
    a third more per multiply-add, which costs less than the interleave's pass (a chain of up to
    8 conditional fetches per texel: 112 x 112 x 64, 8-17 ms in profiled H1 runs); the 2-column
    block and its interleave are droppable and go. The new targets live with source's texture."""
    record = backend.memory.blocked.get(source.texture.id)
    if not isinstance(record, epilogues.Blocked) or record.label != "conv2d":
        return None
    program, _, name = record.block_key.partition(":")
    variant, _, shape = name.rpartition("_")
    if variant not in ("pw", "pwc") or shape != f"{rows}x2" or source.repeat != 1:
        return None
    channels = source.shape[-1]
    block = (math.prod(source.shape[:-1]) // rows, channels)
    if choose_layout(block, backend.memory.max_side).width * 4 != channels:
        return None  # the pointwise program writes one block row per texture row
    if not epilogues.still_valid(backend.memory.pool, record):
        return None  # its inputs are gone: only the targets it drew are left
    added = [h for h in (record.residual, record.bias) if h is not None]
    epilogue = ".add" * (record.residual is not None) + ".bias" * (record.bias is not None)
    targets = [backend.memory.allocate(block, source.dtype, False) for _ in range(rows)]
    key = f"{program}:{variant}_{rows}x1{epilogue}"
    reads = [*record.inputs, *added]
    backend.queue.draw(key, targets[0], reads, record.uniforms, "conv2d", False, targets[1:])
    for target in targets:
        backend.memory.keep_with(source, target)
    backend.queue.mark_droppable(record.block)
    backend.queue.mark_droppable(record.interleave)
    return _activation_suffix(record), targets


def window_channels(channels: int, block_rows: int, uniforms: list[kernels.Uniform]) -> bool:
    """Whether a scalar conv block may read its input as texel windows (blocks.conv2d_source's
    c<n> variant): 1 to 3 input channels, the block's pixels within MAX_WINDOW_TEXELS texels."""
    stride = int(next(values for name, _, values in uniforms if name == "u_stride")[1])
    texels = blocks.window_texels(channels, block_rows, stride)
    return 1 <= channels <= 3 and texels <= blocks.MAX_WINDOW_TEXELS


def matmul_padded(
    backend: Drawing, inputs: list[Handle], attrs: dict[str, Any], out: OutSpec
) -> Handle | None:
    """A product whose inner, column (or, with a transposed, row) count is not a multiple
    of 4 runs on the element kernel, two element reads per multiply-add (a W2 logits layer
    of 10 units took 10x the time per multiply-add of a whole-texel product). Zero-padding
    those dims to multiples of 4 (zeros add nothing to the sums), the whole-texel product,
    then a slice of the result is cheaper from PAD_MATMUL_AT multiply-adds on."""
    ta, tb = attrs["transpose_a"], attrs["transpose_b"]
    a = out.in_shapes[0]
    m, n = out.shape[-2], out.shape[-1]
    k = a[-2] if ta else a[-1]
    dense = all(h.texture.layout.size == math.prod(h.shape) for h in inputs)
    up = {d: -d % 4 for d in (m, n, k)}  # padding to the next multiple of 4
    needed = up[k] or up[n] or (ta and up[m])
    if (ta and tb) or not dense or not needed or math.prod(out.shape) * k < PAD_MATMUL_AT:
        return None
    pads_a = (up[k], up[m]) if ta else (0, up[k])  # (rows, columns) of a as stored
    pads_b = (up[n], up[k]) if tb else (up[k], up[n])
    padded = [
        pad_matrix(backend, h, pad, dtype)
        for h, pad, dtype in zip(inputs, (pads_a, pads_b), out.in_dtypes, strict=True)
    ]
    rows = m + (up[m] if ta else 0)
    shape = (*out.shape[:-2], rows, n + up[n])
    spec = OutSpec(shape, out.dtype, tuple(h.shape for h in padded), out.in_dtypes)
    product = backend.run("matmul", padded, attrs, spec)
    if shape == out.shape:
        return product
    begin = {"begin": (0,) * len(shape)}
    result = backend.run(
        "slice", [product], begin, OutSpec(out.shape, out.dtype, (shape,), (out.dtype,))
    )
    backend.free(product)
    return result


def pad_matrix(backend: Drawing, handle: Handle, pads: tuple[int, int], dtype: str) -> Handle:
    """The matrix (batch) `handle` with pads[0] zero rows and pads[1] zero columns added: a
    copy that lives as long as handle's texture (memory.padded), so the next product padding
    the same tensor the same way (a step's backward pass reuses its forward's weight, and the
    logits' gradient feeds two products) draws no pad again."""
    if pads == (0, 0):
        return handle
    memory = backend.memory
    kept = memory.padded.setdefault(handle.texture.id, {})
    key = (memory.pool.generation(handle.texture.id), handle.shape, handle.repeat, pads)
    if key in kept:
        return kept[key]
    *batch, rows, cols = handle.shape
    shape = (*batch, rows + pads[0], cols + pads[1])
    paddings = [(0, 0)] * len(batch) + [(0, pads[0]), (0, pads[1])]
    spec = OutSpec(shape, dtype, (handle.shape,), (dtype,))
    padded = backend.run("pad", [handle], {"paddings": paddings, "value": 0.0}, spec)
    kept[key] = padded
    memory.keep_with(handle, padded)
    return padded


def blocked_transposed_a(
    backend: Drawing, inputs: list[Handle], attrs: dict[str, Any], out: OutSpec
) -> Handle | None:
    """a^T @ b as a block product reading a in place (matmul_block:tn), where a's and b's
    texture rows are their matrix rows and the product is large enough for blocks: the
    transpose draw matmul_transposed_a makes otherwise (a pass over a) is left out."""
    (a, b), (ta, tb) = out.in_shapes, inputs
    if ta.texture.layout.width * 4 != a[-1] or tb.texture.layout.width * 4 != b[-1]:
        return None
    m, n, k = a[-1], b[-1], a[-2]
    uniforms = [kernels.ints("u_m", [m]), kernels.ints("u_n", [n]), kernels.ints("u_k", [k])]
    return blocked(backend, "matmul4:tn_aligned", inputs, out, uniforms)


def matmul_transposed_a(
    backend: Drawing, inputs: list[Handle], attrs: dict[str, Any], out: OutSpec
) -> Handle:
    a = out.in_shapes[0]
    rows, cols = a[-1], a[-2]
    shape = (*a[:-2], rows, cols)
    transposed = backend.memory.allocate(shape, out.in_dtypes[0], False)
    backend.queue.draw(
        "transpose4",
        transposed,
        [inputs[0]],
        [kernels.ints("u_rows", [rows]), kernels.ints("u_cols", [cols])],
        "matmul",
        pair=False,
    )
    spec = OutSpec(out.shape, out.dtype, (shape, out.in_shapes[1]), out.in_dtypes)
    result = backend.run("matmul", [transposed, inputs[1]], {**attrs, "transpose_a": False}, spec)
    backend.free(transposed)
    return result


def concat_in_groups(
    backend: Drawing, inputs: list[Any], attrs: dict[str, Any], out: OutSpec
) -> Handle:
    """Concat of more inputs than a draw can sample: concatenate groups, then the groups."""
    axis = attrs["axis"]
    parts: list[Handle] = []
    for start in range(0, len(inputs), wire.MAX_INPUTS_PER_DRAW):
        group = inputs[start : start + wire.MAX_INPUTS_PER_DRAW]
        shapes = out.in_shapes[start : start + wire.MAX_INPUTS_PER_DRAW]
        shape = list(shapes[0])
        shape[axis] = sum(s[axis] for s in shapes)
        spec = OutSpec(tuple(shape), out.dtype, tuple(shapes), out.in_dtypes[: len(group)])
        parts.append(backend.run("concat", group, attrs, spec))
    spec = OutSpec(out.shape, out.dtype, tuple(p.shape for p in parts), (out.dtype,) * len(parts))
    result = backend.run("concat", parts, attrs, spec)
    for part in parts:
        backend.free(part)
    return result


def periodic_view(source: tuple[int, ...], shape: tuple[int, ...], elements: int) -> int | None:
    """Whether expanding `source` (held in a texture of `elements` elements) to `shape` reads
    element i of the result as element (i // repeat) % elements of the source, and that repeat:
    size-1 dims broadcast before its own (a bias over a batch: repeat 1) and after them (a
    per-row value over columns, (64, 1) -> (64, 10): repeat 10). None when another dim is
    broadcast in between."""
    if elements == 1:
        return 1
    aligned = (1,) * (len(shape) - len(source)) + tuple(source)
    dims = list(zip(aligned, shape, strict=True))
    while dims and dims[0][0] == 1:
        dims.pop(0)
    repeat = 1
    while dims and dims[-1][0] == 1:
        repeat *= dims.pop()[1]
    if any(s != n for s, n in dims) or math.prod(s for s, _ in dims) != elements:
        return None
    return repeat
