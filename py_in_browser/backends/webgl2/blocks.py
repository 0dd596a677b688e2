"""Block kernels: each fragment computes ROWS output rows x COLS output texels (4 columns each)
into ROWS * COLS render targets, then one interleave draw puts the targets' texels in place.

Why: the one-texel kernels (matmul4.frag, conv2d4.frag) fetch 1 texel of a (an input pixel)
and 4 of b (the filter) per 16 multiply-adds; a 4 x 2 block fetches 4 and 8 per 128 (10.7 per
fetch instead of 3.2). Where texel fetches dominate (SwiftShader, and bandwidth-bound GPUs)
that is 2-3x faster on large products. A fragment writes one texel per render target, so the
block's texels go to separate targets (MRT: up to MAX_DRAW_BUFFERS) and a cheap draw (one fetch
per output texel) interleaves them.

Both outputs are matrices of whole texels: a product's rows are batch * M + m, a convolution's
are its output pixels (n, oh, ow) and its columns the output channels. Target t = i * COLS + j
holds row block r / ROWS, texel column block c / COLS of rows r = ROWS * (r / ROWS) + i and
texel columns c = COLS * (c / COLS) + j, at texel index (r / ROWS) * (texel columns / COLS) +
c / COLS (interleave_source reads it back from there).
"""

from __future__ import annotations

import re

# Block shapes (rows, texel columns), best first; one fits every WebGL2 device (4 draw buffers).
SHAPES = ((4, 2), (4, 1))
# And for convolutions, whose output rows may be 14 or 7 pixels wide (a MobileNet's last
# stages, most of its multiply-adds): 7 pixels where the device has 8 draw buffers, else 2.
CONV_SHAPES = (*SHAPES, (7, 1), (2, 2))


def shape_for(
    rows: int, columns: int, draw_buffers: int, convolution: bool = False
) -> tuple[int, int] | None:
    """The first block shape tiling `rows` x `columns` outputs within the draw buffers (rows:
    a product's M, a convolution's output width, so that no block spans two matrices/rows)."""
    for block_rows, cols in CONV_SHAPES if convolution else SHAPES:
        if (
            block_rows * cols <= draw_buffers
            and rows % block_rows == 0
            and columns % (4 * cols) == 0
        ):
            return block_rows, cols
    return None


def best_shape(draw_buffers: int) -> tuple[int, int]:
    """The largest block shape (rows, texel columns) the device's draw buffers allow."""
    return next((r, c) for r, c in SHAPES if r * c <= draw_buffers)


def warmup_keys(draw_buffers: int) -> list[str]:
    """The programs of the best block shape the device allows (others compile on first use)."""
    rows, cols = best_shape(draw_buffers)
    shape = f"{rows}x{cols}"
    programs = ["matmul_block:nn", "matmul_block:nt", "matmul_block:tn"]
    programs += ["conv2d_block:vec", "conv2d_block:scalar"]
    programs.append("conv2d_block:c3k3")  # a first layer on RGB images (3x3)
    interleaves = [f"block_interleave:{shape}", f"block_interleave:aligned_{shape}"]
    return [f"{p}_{shape}" for p in programs] + interleaves


def _names(rows: int, cols: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(rows) for j in range(cols)]


def _block(
    rows: int,
    cols: int,
    uniforms: str,
    body: str,
    bias_column: str | None = None,
    out_rows: int | None = None,
    residual_texel: str | None = None,
    first_extra: int = 2,
) -> str:
    """write_block around `body`, which adds to the accumulators c<i>_<j> (row i, texel column j
    of the block); target i * cols + j gets c<i>_<j>. With `residual_texel` (a GLSL expression
    in {i}, {j}: the output texel index of c<i>_<j>), input 2 is a tensor of the output's shape
    added texel by texel (a residual block's skip: epilogues.py fuses it this way). With
    `bias_column` (the body's variable holding the block's first texel column), the next input
    is a bias of one value per output column, added to every row after the skip (epilogues.py
    fuses a layer's bias this way; TensorFlow's optimizer sums a convolution and its skip before
    the bias). With `out_rows`, the body leaves the block's results in out_rows rows of p<i>_<j>
    instead (a pooled block). `first_extra`: the input slot of the skip (or else the bias), after
    the body's own inputs."""
    out_rows = rows if out_rows is None else out_rows
    result = "c" if out_rows == rows else "p"
    targets = out_rows * cols
    outputs = "".join(f"layout(location = {t}) out vec4 o_{t};\n" for t in range(1, targets))
    clear = "".join(f"  vec4 c{i}_{j} = vec4(0.0);\n" for i, j in _names(rows, cols))
    skip = ""
    if residual_texel is not None:
        skip = "".join(
            f"  {result}{i}_{j} += texelFetch(u_x{first_extra}, "
            f"texel_at({residual_texel.format(i=i, j=j)}, u_l{first_extra}.x), 0);\n"
            for i, j in _names(out_rows, cols)
        )
    slot = first_extra + (residual_texel is not None)
    bias = ""
    if bias_column is not None:
        bias = "".join(
            f"  vec4 bias{j} = texelFetch(u_x{slot}, texel_at({bias_column} + {j}, u_l{slot}.x), 0);\n"
            for j in range(cols)
        ) + "".join(f"  {result}{i}_{j} += bias{j};\n" for i, j in _names(out_rows, cols))
    writes = "".join(
        f"  {'o_value' if t == 0 else f'o_{t}'} = {result}{i}_{j};\n"
        for t, (i, j) in enumerate(_names(out_rows, cols))
    )
    return (
        f"#define BLOCK_KERNEL\n{uniforms}{outputs}void write_block(ivec2 p) {{\n"
        f"{clear}{body}{skip}{bias}{writes}}}\n"
    )


def matmul_source(variant: str, rows: int, cols: int, bias: bool = False) -> str:
    """Program "matmul_block:<nn|nt|tn>_<rows>x<cols>": target texel p holds output row
    p.y * rows + i (batch * M + m), texel column p.x * cols + j. a is (B, M, K) (nn, nt) or
    (B, K, M) (tn: a^T @ b read in place, 4 rows per block), one matrix row per texture row;
    b is (B, K, N) (nn, tn) or (B, N, K) (nt), likewise; so are the targets."""
    fetch_a = "".join(
        f"    vec4 a{i} = texelFetch(u_x0, ivec2(k, row + {i}), 0);\n" for i in range(rows)
    )
    start_a = ""
    if variant == "tn":
        # a^T: a rows ka + q (its K index) hold the block's 4 rows m4 .. m4 + 3 in one texel.
        assert rows == 4, "a texel of a^T spans exactly the block's rows"
        start_a = "  int m4 = (row - batch * u_m) / 4;\n  int kab = batch * u_k;\n"
        fetch_a = "".join(
            f"    vec4 t{q} = texelFetch(u_x0, ivec2(m4, kab + 4 * k + {q}), 0);\n"
            for q in range(4)
        ) + "".join(
            f"    vec4 a{i} = vec4(t0.{c}, t1.{c}, t2.{c}, t3.{c});\n" for i, c in enumerate("xyzw")
        )
    if variant in ("nn", "tn"):
        # b rows kb + 4k .. kb + 4k + 3 at texel columns col + j: element (k + q, 4(col + j) + c).
        start = "  int kb = batch * u_k;\n"
        fetch_b = "    int r = kb + 4 * k;\n" + "".join(
            f"    vec4 b{j}_{q} = texelFetch(u_x1, ivec2(col + {j}, r + {q}), 0);\n"
            for j in range(cols)
            for q in range(4)
        )
        update = "".join(
            f"    c{i}_{j} += a{i}.x * b{j}_0 + a{i}.y * b{j}_1 + a{i}.z * b{j}_2 + a{i}.w * b{j}_3;\n"
            for i, j in _names(rows, cols)
        )
    else:
        # b rows nb + 4j + q are output columns 4(col + j) + q; texel k holds their k-th 4 elements.
        start = "  int nb = batch * u_n + 4 * col;\n"
        fetch_b = "".join(
            f"    vec4 b{j}_{q} = texelFetch(u_x1, ivec2(k, nb + {4 * j + q}), 0);\n"
            for j in range(cols)
            for q in range(4)
        )
        update = "".join(
            f"    c{i}_{j} += vec4(dot(a{i}, b{j}_0), dot(a{i}, b{j}_1), dot(a{i}, b{j}_2), "
            f"dot(a{i}, b{j}_3));\n"
            for i, j in _names(rows, cols)
        )
    body = (
        f"  int row = p.y * {rows};  // batch * M + m of the block's first row\n"
        f"  int col = p.x * {cols};  // its first output texel column\n"
        f"  int batch = row / u_m;\n{start}{start_a}"
        f"  for (int k = 0; k < u_k / 4; ++k) {{\n{fetch_a}{fetch_b}{update}  }}\n"
    )
    uniforms = "uniform int u_m;\nuniform int u_n;\nuniform int u_k;\n"
    return _block(rows, cols, uniforms, body, "col" if bias else None)


def conv2d_source(
    variant: str,
    rows: int,
    cols: int,
    bias: bool = False,
    pool: bool = False,
    residual: bool = False,
) -> str:
    """Program "conv2d_block:<vec|scalar|c1|c2|c3>_<rows>x<cols>" (NHWC input, HWIO filters, as
    conv2d4.frag): the block is `rows` neighbouring output pixels of one output row (the output
    width is a multiple of rows) x `cols` texels of output channels. Target texel index
    x = (first pixel / rows) * (CO / 4 / cols) + texel column / cols, at any target layout.
    vec: input channels a multiple of 4, read a texel at a time; scalar: one element each;
    c<n> (n = 1, 2, 3 input channels, column stride 1: a first layer on images): the block's
    rows * n input values of a tap are neighbours in the RGBA-packed input, read as a window of
    4 texels (rows * n + 3 <= 16 elements) instead of one element at a time.
    With `pool` (".maxpool"), the convolution's 2 x 2 max-pool, stride 2: the block covers the
    same pixels of 2 output rows, whose taps share each filter fetch (pixel p = g * rows + i is
    pixel i of row g), and writes rows / 2 pooled pixels x `cols` texels at the pooled output's
    block index (see _conv_loops). With `residual` (".add", unpooled only), a tensor of the
    output's shape is added to the block's texels, before any bias (_block)."""
    assert not (pool and residual), "a pooled block's texels are not the output's"
    groups = 2 if pool else 1
    width = 1  # filter taps per tap (the kw loop's step)
    if variant.startswith("c"):  # c<n>, c<n>s<column stride>, either with k<filter width>
        window = re.fullmatch(r"c(\d)(?:s(\d+))?(?:k(\d+))?", variant)
        assert window is not None, variant
        channels, stride, width = (int(d or 1) for d in window.groups())
        tap = _window_tap(channels, rows, cols, groups, stride, width)
    else:
        tap = _texel_tap(variant, rows, cols, groups)
    loops = _conv_loops(rows, cols, tap, pool, width > 1)
    bias_column = "co4" if bias else None
    # Pixel pix + i of the block, texel column co4 + j (see _conv_loops).
    skip = "(pix + {i}) * co4n + co4 + {j}" if residual else None
    out_rows = rows // 2 if pool else None
    return _block(rows * groups, cols, CONV_UNIFORMS, loops, bias_column, out_rows, skip)


def pointwise_source(
    rows: int,
    cols: int,
    bias: bool = False,
    residual: bool = False,
    cursors: bool = False,
    targets: str | None = None,
) -> str:
    """Program "conv2d_block:pw_<rows>x<cols>": a 1x1 convolution at stride 1 without padding
    (a MobileNet's expansions and projections, most of its multiply-adds) whose input has one
    pixel per texture row (CI / 4 texels), its filter one input channel per texture row (CO / 4
    texels) and its targets one block row per texture row (rewrites.pointwise checks all three).
    It is a product of the pixels and the filter, addressed by the fragment's position and the
    loop counter as matmul_source's blocks are, without the general block's cursors, padding
    masks and divisions (_conv_loops), which cost more than the multiply-adds of a layer with
    few input channels. Same targets, sums in the same order, as conv2d_source's "vec".
    "conv2d_block:pwc_<rows>x<cols>" (`cursors`): the input's texture is too tall for one pixel
    per row (a 112 x 112 image) and squarish instead; each pixel's texels are found once per
    fragment and stepped through (advance).
    "conv2d_block:pwt[-<activation>]_<rows>x<cols>" (`targets`: the activation, "" for none):
    the input is still in the `rows` targets of a depthwise block of as many pixels, one block
    row per texture row (rewrites.block_targets): pixel pix + i is row p.y of target i, and the
    activation its interleave would apply (INTERLEAVE_ACTIVATIONS) is applied as it is read; the
    interleave's pass goes (epilogues.dead_draws), and the filter is input `rows`."""
    activation = ""
    if targets is not None:
        activation = _source_activation(targets)
        start = ""
        fetch_x = "".join(
            f"    vec4 v{i} = source_activation(texelFetch(u_x{i}, ivec2(k, p.y), 0));\n"
            for i in range(rows)
        )
    elif cursors:
        start = "".join(
            f"  ivec2 px{i} = texel_at((pix + {i}) * (u_w.z / 4), u_l0.x);\n" for i in range(rows)
        )
        fetch_x = "".join(
            f"    vec4 v{i} = texelFetch(u_x0, px{i}, 0);\n"
            f"    px{i} = advance(px{i}, ivec2(1, 0), u_l0.x);\n"
            for i in range(rows)
        )
    else:
        start = ""
        fetch_x = "".join(
            f"    vec4 v{i} = texelFetch(u_x0, ivec2(k, pix + {i}), 0);\n" for i in range(rows)
        )
    filter_slot = 1 if targets is None else rows
    fetch_w = "".join(
        f"    vec4 w{j}_{q} = texelFetch(u_x{filter_slot}, ivec2(co4 + {j}, 4 * k + {q}), 0);\n"
        for j in range(cols)
        for q in range(4)
    )
    update = "".join(
        f"    c{i}_{j} += v{i}.x * w{j}_0 + v{i}.y * w{j}_1 + v{i}.z * w{j}_2 + v{i}.w * w{j}_3;\n"
        for i, j in _names(rows, cols)
    )
    body = (
        f"  int pix = p.y * {rows};  // the block's first pixel (n, oh, ow)\n"
        f"  int co4 = p.x * {cols};  // its first output texel column\n"
        f"  int co4n = u_w.w / 4;\n{start}"
        f"  for (int k = 0; k < u_w.z / 4; ++k) {{\n{fetch_x}{fetch_w}{update}  }}\n"
    )
    skip = "(pix + {i}) * co4n + co4 + {j}" if residual else None
    uniforms = CONV_UNIFORMS + activation
    bias_column = "co4" if bias else None
    return _block(rows, cols, uniforms, body, bias_column, None, skip, filter_slot + 1)


def _column_masks(rows: int, groups: int) -> str:
    """Per pixel p = g * rows + i: in<p>, whether its input pixel is inside the input (row g's
    row<g> from _conv_loops, column iw + i * stride)."""
    columns = "".join(
        f"      int iw{i} = iw + {i} * u_stride.y;\n"
        f"      bool col{i} = iw{i} >= 0 && iw{i} < u_x.z;\n"
        for i in range(rows)
    )
    return columns + "".join(
        f"      bool in{g * rows + i} = row{g} && col{i};\n"
        for g in range(groups)
        for i in range(rows)
    )


def _texel_tap(variant: str, rows: int, cols: int, groups: int) -> str:
    """The vec and scalar variants' tap: input texels (or elements) per pixel and channel step."""
    pixels = range(rows * groups)
    where = _column_masks(rows, groups) + "".join(
        f"      int xb{p} = (xrow{p // rows} + clamp(iw{p % rows}, 0, u_x.z - 1)) * u_x.w;\n"
        for p in pixels
    )
    fetch_w = _filter_fetches(4 if variant == "vec" else 1, cols)
    names = _names(rows * groups, cols)
    if variant == "vec":
        cursors = "".join(f"      ivec2 px{p} = texel_at(xb{p} / 4, wx);\n" for p in pixels)
        fetch_x = "".join(
            f"        vec4 v{p} = in{p} ? texelFetch(u_x0, px{p}, 0) : vec4(0.0);\n"
            f"        px{p} = advance(px{p}, ivec2(1, 0), wx);\n"
            for p in pixels
        )
        update = "".join(
            f"        c{p}_{j} += v{p}.x * w{j}_0 + v{p}.y * w{j}_1 + v{p}.z * w{j}_2 + v{p}.w * w{j}_3;\n"
            for p, j in names
        )
        loop = f"{cursors}      for (int ci = 0; ci < u_w.z; ci += 4) {{\n{fetch_x}{fetch_w}{update}      }}\n"
    else:
        fetch_x = "".join(f"        float v{p} = in{p} ? x0(xb{p} + ci) : 0.0;\n" for p in pixels)
        update = "".join(f"        c{p}_{j} += v{p} * w{j}_0;\n" for p, j in names)
        loop = f"      for (int ci = 0; ci < u_w.z; ++ci) {{\n{fetch_x}{fetch_w}{update}      }}\n"
    return f"{where}      ivec2 pw = texel_at((kh * u_w.y + kw) * u_w.z * co4n + co4, ww);\n{loop}"


CONV_UNIFORMS = (
    "uniform ivec4 u_x;  // input N, H, W, C\nuniform ivec4 u_w;  // filter KH, KW, CI, CO\n"
    "uniform ivec2 u_o;  // output OH, OW\nuniform ivec2 u_stride;\nuniform ivec2 u_pad;\n"
)


def _filter_fetches(channels: int, cols: int) -> str:
    """Filter rows (kh, kw, ci + q) for q < channels, a step of sw texels each: texels
    co4 .. co4 + cols - 1 into w<j>_<q>."""
    at = ["pw", *(f"advance(pw, ivec2({j}, 0), ww)" for j in range(1, cols))]
    return "".join(
        "".join(f"        vec4 w{j}_{q} = texelFetch(u_x1, {at[j]}, 0);\n" for j in range(cols))
        + "        pw = advance(pw, sw, ww);\n"
        for q in range(channels)
    )


def _conv_loops(rows: int, cols: int, tap: str, pool: bool = False, row_tap: bool = False) -> str:
    """The block's output pixels and the loops over the filter taps around `tap`, which sees,
    per row group g, row<g> (its input row lies inside the input) and xrow<g> (that input row's
    first pixel), and n, iw (the first pixel's input column), co4n. With `pool`, the fragment is
    rows / 2 pixels of the 2 x 2 max-pooled output (u_out_size counts its elements) over 2 output
    rows (groups), and leaves the pool's maxima in p<i>_<j>, taken in the window order of
    pool4.frag (row by row). With `row_tap`, `tap` covers a filter row's taps (iw: tap 0's)."""
    if pool:
        places = (
            f"  int pix = (index / blocks) * {rows // 2};  // pooled pixels\n"
            "  int pw = pix % (u_o.y / 2);\n  int t = pix / (u_o.y / 2);\n"
            "  int ow = 2 * pw;\n  int oh = 2 * (t % (u_o.x / 2));\n  int n = t / (u_o.x / 2);\n"
        )
        input_rows = (
            "    int ih0 = oh * u_stride.x - u_pad.x + kh;\n"
            "    int ih1 = ih0 + u_stride.x;\n"
            "    bool row0 = ih0 >= 0 && ih0 < u_x.y;\n"
            "    bool row1 = ih1 >= 0 && ih1 < u_x.y;\n"
            "    if (!row0 && !row1) continue;\n"
            "    int xrow0 = (n * u_x.y + clamp(ih0, 0, u_x.y - 1)) * u_x.z;\n"
            "    int xrow1 = (n * u_x.y + clamp(ih1, 0, u_x.y - 1)) * u_x.z;\n"
        )
        pooled = "".join(
            f"  vec4 p{a}_{j} = max_nan4(max_nan4(max_nan4(max_nan4(vec4(-INF), "
            f"c{2 * a}_{j}), c{2 * a + 1}_{j}), c{rows + 2 * a}_{j}), c{rows + 2 * a + 1}_{j});\n"
            for a in range(rows // 2)
            for j in range(cols)
        )
    else:
        places = (
            f"  int pix = (index / blocks) * {rows};\n"
            "  int ow = pix % u_o.y;\n  int t = pix / u_o.y;\n  int oh = t % u_o.x;\n  int n = t / u_o.x;\n"
        )
        input_rows = (
            "    int ih = oh * u_stride.x - u_pad.x + kh;\n"
            "    if (ih < 0 || ih >= u_x.y) continue;\n"
            "    const bool row0 = true;\n"
            "    int xrow0 = (n * u_x.y + ih) * u_x.z;\n"
        )
        pooled = ""
    columns = (
        "    {\n      const int kw = 0;\n"
        if row_tap
        else "    for (int kw = 0; kw < u_w.y; ++kw) {\n"
    )
    return (
        "  int index = p.y * u_out.x + p.x;\n"
        "  if (index * 4 >= u_out_size) return;  // past the last texel of a squarish target\n"
        "  int co4n = u_w.w / 4;\n"
        f"  int blocks = co4n / {cols};\n"
        f"  int co4 = (index % blocks) * {cols};\n"
        f"{places}"
        "  int wx = u_l0.x;\n  int ww = u_l1.x;\n  ivec2 sw = texel_step(co4n, ww);\n"
        "  for (int kh = 0; kh < u_w.x; ++kh) {\n"
        f"{input_rows}"
        f"{columns}"
        "      int iw = ow * u_stride.y - u_pad.y + kw;\n"
        f"{tap}    }}\n  }}\n{pooled}"
    )


def window_texels(channels: int, rows: int, stride: int, width: int = 1) -> int:
    """How many texels the c<n> variant's window of one tap (or of `width` neighbouring taps of
    a filter row) spans: its pixels' elements, from o (0 to 3) into the first texel on."""
    used = ((rows - 1) * stride + width) * channels  # window elements the block reads after o
    return -(-used // 4) + 1


# The most texels a c<n> window may fetch per tap (a first layer at column stride 2: 7).
MAX_WINDOW_TEXELS = 8


def _window_tap(
    channels: int, rows: int, cols: int, groups: int, stride: int = 1, width: int = 1
) -> str:
    """The c<n> variant's tap: per row group g, pixel i's channel ci is element
    o<g> + i * stride * n + ci of the window of texels q<g>_0, q<g>_1, ... from texel
    floor(f<g> / 4), f<g> the group's first pixel's flat index and o<g> = f<g> % 4; s<g>_<j>
    holds window elements o<g> + 4j .. o<g> + 4j + 3 (selected by o<g>, no dynamic indexing).
    Pixels outside the input read 0 (their window elements belong to other rows or lie left of
    or past the texture, whose fetches are clamped to texel 0 or read as robust out-of-range
    fetches). With `width` (c<n>...k<width>: the filter's width), one window holds the taps
    kw < width of a filter row (tap kw of pixel i: element (i * stride + kw) * n + ci), which
    the taps' overlapping windows fetched again (3 x 7 texels per row at stride 2, 8 here);
    the taps are summed in the same order."""
    texels = window_texels(channels, rows, stride, width)
    if texels > MAX_WINDOW_TEXELS:
        raise ValueError(f"conv2d_block:c{channels}: {rows} pixels span {texels} texels")
    offsets = sorted({i * stride + kw for i in range(rows) for kw in range(width)})
    masks = "".join(
        f"      bool col{c} = iw + {c} >= 0 && iw + {c} < u_x.z;\n" for c in offsets
    ) + "".join(
        f"      bool in{g * rows + i}_{kw} = row{g} && col{i * stride + kw};\n"
        for g in range(groups)
        for i in range(rows)
        for kw in range(width)
    )
    windows = ""
    for g in range(groups):
        fetches = "".join(
            f"      vec4 q{g}_{k} = texelFetch(u_x0, px{g}, 0);\n"
            + (
                f"      if (t{g} + {k} >= 0) px{g} = advance(px{g}, ivec2(1, 0), wx);\n"
                if k < texels - 1
                else ""
            )
            for k in range(texels)
        )
        shifts = "".join(
            f"      vec4 s{g}_{j} = o{g} < 2 ? (o{g} == 0 ? q{g}_{j} : vec4(q{g}_{j}.yzw, q{g}_{j + 1}.x))\n"
            f"                     : (o{g} == 2 ? vec4(q{g}_{j}.zw, q{g}_{j + 1}.xy) : vec4(q{g}_{j}.w, q{g}_{j + 1}.xyz));\n"
            for j in range(texels - 1)
        )
        windows += (
            f"      int f{g} = (xrow{g} + iw) * {channels};\n"
            f"      int o{g} = f{g} & 3;\n"
            f"      int t{g} = (f{g} - o{g}) / 4;  // below 0 left of the input's first pixel\n"
            f"      ivec2 px{g} = texel_at(max(t{g}, 0), wx);\n"
            f"{fetches}{shifts}"
        )
    values = "".join(
        f"      float v{g * rows + i}_{kw}_{ci} = in{g * rows + i}_{kw} ? s{g}_{k // 4}.{'xyzw'[k % 4]} : 0.0;\n"
        for g in range(groups)
        for i in range(rows)
        for kw in range(width)
        for ci in range(channels)
        for k in [(i * stride + kw) * channels + ci]
    )
    # The filter rows (kh, kw, ci) of a row's taps follow each other: the cursor steps on.
    fetch_w = _filter_fetches(channels, cols).replace("        ", "      ")
    taps = "".join(
        "      {\n"  # (a scope per tap: its filter texels' names)
        + fetch_w
        + "".join(
            f"      c{p}_{j} += "
            + " + ".join(f"v{p}_{kw}_{ci} * w{j}_{ci}" for ci in range(channels))
            + ";\n"
            for p, j in _names(rows * groups, cols)
        )
        + "      }\n"
        for kw in range(width)
    )
    return (
        f"{masks}{windows}{values}"
        "      ivec2 pw = texel_at((kh * u_w.y + kw) * u_w.z * co4n + co4, ww);\n"
        f"{taps}"
    )


# What an interleave may apply to the block's texels: relu (NaN passes, as the relu kernel) or
# relu6 (fusion.RELU6's values: a NaN passes, as the fused kernel computes it). One clamp and
# a NaN select, not two NaN-aware maxima: blocks reading another block's targets apply it per
# fetch (H1's 56-pixel depthwise block reading an expansion: 11.0 -> 5.3 ms, profiled runs).
INTERLEAVE_ACTIVATIONS = {
    "": "v",
    "relu": "mix(max(v, vec4(0.0)), v, is_nan4(v))",
    "relu6": "mix(clamp(v, vec4(0.0), vec4(6.0)), v, is_nan4(v))",
}


def _source_activation(activation: str) -> str:
    """GLSL source_activation(v): what the interleave of the block whose targets a program reads
    in its place would apply (INTERLEAVE_ACTIVATIONS)."""
    return (
        f"vec4 source_activation(vec4 v) {{\n  return {INTERLEAVE_ACTIVATIONS[activation]};\n}}\n"
    )


def interleave_source(rows: int, cols: int, activation: str = "", aligned: bool = False) -> str:
    """Program "block_interleave:<rows>x<cols>": output texel (row r, texel column c; u_cols4
    texel columns) from target (r % rows) * cols + c % cols, texel (r / rows) * (u_cols4 /
    cols) + c / cols. Samplers cannot be indexed by a varying value in GLSL ES 3.00, hence the
    chain of fetches. With an activation (".relu", ".relu6": INTERLEAVE_ACTIVATIONS), that of it.
    "block_interleave:aligned_<rows>x<cols>" (`aligned`): the output has one matrix row per
    texture row and the targets one block row each (u_cols4 / cols texels wide), so the
    fragment's position is (c, r) and that texel sits at (c / cols, r / rows): no integer
    division by a uniform, which SwiftShader does lane by lane (W2's 784 x 128 weight
    gradient: 0.74 -> 0.56 ms in a same-page A/B)."""
    chain = "".join(
        f"  if (t == {t}) return texelFetch(u_x{t}, q, 0);\n" for t in range(rows * cols - 1)
    )
    last = rows * cols - 1
    result = INTERLEAVE_ACTIVATIONS[activation]
    if aligned:
        # Both block sides are powers of two (SHAPES): shifts and masks, not divisions.
        assert rows & (rows - 1) == 0 and cols & (cols - 1) == 0, (rows, cols)
        shift_r, shift_c = rows.bit_length() - 1, cols.bit_length() - 1
        place = (
            "  ivec2 p = ivec2(gl_FragCoord.xy);  // (texel column, row) of the output\n"
            f"  int t = (p.y & {rows - 1}) * {cols} + (p.x & {cols - 1});\n"
            f"  ivec2 q = ivec2(p.x >> {shift_c}, p.y >> {shift_r});\n"
        )
    else:
        place = (
            "  int r = texel / u_cols4;\n  int c = texel % u_cols4;\n"
            f"  int t = (r % {rows}) * {cols} + c % {cols};\n"
            f"  ivec2 q = texel_at((r / {rows}) * (u_cols4 / {cols}) + c / {cols}, u_l0.x);\n"
        )
    return (
        "#define TEXEL_KERNEL\nuniform int u_cols4;\nvec4 block_texel(int texel) {\n"
        f"{place}{chain}  return texelFetch(u_x{last}, q, 0);\n}}\n"
        f"vec4 value4(int texel) {{\n  vec4 v = block_texel(texel);\n  return {result};\n}}\n"
    )


# Neighbouring output pixels per fragment of a blocked depthwise convolution, best first: 7
# serves the 14- and 7-pixel rows of a MobileNet's last stages where the device has 8 draw
# buffers.
DEPTHWISE_ROWS = (4, 7, 2)
# Filter widths a depthwise block compiles in (its window's taps and input texels are unrolled).
MAX_DEPTHWISE_WINDOW = 7


def depthwise_rows(width: int, draw_buffers: int) -> int | None:
    """The pixels per fragment of a blocked depthwise convolution whose output rows are
    `width` pixels wide (a block never spans two rows), or None where no block fits."""
    return next((r for r in DEPTHWISE_ROWS if r <= draw_buffers and width % r == 0), None)


def depthwise_source(
    window: int,
    stride: int,
    rows: int,
    bias: bool = False,
    targets: tuple[int, str] | None = None,
    r_filter: bool = False,
) -> str:
    """Program "depthwise_block:k<window>s<stride>_<rows>x1" (an RGBA NHWC input of channels
    a multiple of 4 and an RGBA HWC1 filter; "k<window>s<stride>r": an R one, `r_filter`, as
    depthwise_conv2d4.frag reads them): the block is `rows`
    neighbouring output pixels of one output row x one texel of channels, target texel index
    (first pixel / rows) * (C / 4) + texel column, as conv2d_source's blocks. The filter's
    width and column stride are compiled in: per filter row, its `window` texels are fetched
    once for all the pixels, and the (rows - 1) * stride + window input texels the pixels' taps
    cover once each, where one texel per pixel and tap (and a filter texel each) was fetched.
    Each pixel sums its taps in depthwise_conv2d4.frag's order, padded taps multiplying a zero
    in (0 * Inf is NaN, as numpy).
    "depthwise_block:k<window>s<stride>t<pad>[-<activation>]_<rows>x1" (`targets`: the left
    padding and the activation, "" for none): the input is still in the `rows` targets of the
    conv block of `rows` pixels x 1 texel column that drew it, one block row per texture row
    (rewrites.block_targets): input pixel c of a row is in target c % rows, and the block's
    first input column ow * stride - pad has ow a multiple of rows (as the source's blocks, it
    spans no row), so the target of each window column is known here. The activation that
    block's interleave would apply is applied as read; the interleave's pass goes, and the
    filter is input `rows`."""
    span = (rows - 1) * stride + window
    slot = 1 if targets is None else rows  # the filter's input
    filters = "".join(f"    vec4 w{k} = filter_tap(pw, tap_step, ww);\n" for k in range(window))
    columns = ""
    for j in range(span):
        inside = f"row_inside && left + {j} >= 0 && left + {j} < u_x.z"
        if targets is None:
            columns += (
                f"    vec4 x{j} = vec4(0.0);\n    if ({inside}) {{\n"
                f"      x{j} = texelFetch(u_x0, px, 0);\n"
                "      px = advance(px, pixel_step, wx);\n    }\n"
            )
        else:
            row, target = divmod(j - targets[0], rows)  # window column j is input column left + j
            columns += (
                f"    vec4 x{j} = vec4(0.0);\n    if ({inside}) "
                f"x{j} = source_activation(texelFetch(u_x{target}, ivec2(c4, block + {row}), 0));\n"
            )
        columns += "".join(
            f"    c{i}_0 += x{j} * w{j - i * stride};\n"
            for i in range(rows)
            if 0 <= j - i * stride < window
        )
    if targets is None:
        steps = "  int wx = u_l0.x;\n  ivec2 pixel_step = texel_step(c4n, wx);\n"
        cursor = (
            "    int first = ((n * u_x.y + max(ih, 0)) * u_x.z + max(left, 0)) * c4n + c4;\n"
            "    ivec2 px = texel_at(first, wx);  // moves one pixel per input column inside\n"
        )
    else:
        steps = ""
        cursor = (
            f"    int block = ((n * u_x.y + max(ih, 0)) * u_x.z + ow * {stride}) / {rows};"
            "  // the targets' row of input column ow * stride\n"
        )
    body = (
        "  int index = p.y * u_out.x + p.x;\n"
        "  if (index * 4 >= u_out_size) return;  // past the last texel of a squarish target\n"
        "  int c4n = u_x.w / 4;\n  int c4 = index % c4n;\n"
        f"  int pix = (index / c4n) * {rows};\n"
        "  int ow = pix % u_o.y;\n  int t = pix / u_o.y;\n  int oh = t % u_o.x;\n  int n = t / u_o.x;\n"
        f"{steps}  int ww = u_l{slot}.x;\n"
        "  // The filter elements of tap (0, 0): texel c4 (RGBA), or R texels from 4 * c4 on.\n"
        f"  ivec2 tap_step = texel_step({'u_x.w' if r_filter else 'c4n'}, ww);\n"
        f"  ivec2 pw = texel_at({'4 * c4' if r_filter else 'c4'}, ww);\n"
        "  int left = ow * u_stride.y - u_pad.y;\n"
        "  for (int kh = 0; kh < u_w.x; ++kh) {\n"
        "    int ih = oh * u_stride.x - u_pad.x + kh;\n"
        "    bool row_inside = ih >= 0 && ih < u_x.y;\n"
        f"{cursor}{filters}{columns}  }}\n"
    )
    uniforms = CONV_UNIFORMS + _filter_tap(slot, r_filter)
    if targets is not None:
        uniforms += _source_activation(targets[1])
    return _block(rows, 1, uniforms, body, "c4" if bias else None, first_extra=slot + 1)


def _filter_tap(slot: int, r_filter: bool) -> str:
    """GLSL filter_tap: the 4 filter elements of a depthwise tap from its texel (an RGBA filter,
    input `slot`) or its 4 R texels (`r_filter`), and the cursor moved to the next tap (as
    depthwise_conv2d4.frag reads them). The layout is compiled in: SwiftShader runs both sides
    of a branch on a uniform, 5 fetches a tap where 1 or 4 do (H1 on SwiftShader: 7% less time
    a frame in a same-page A/B)."""
    x = f"u_x{slot}"
    if not r_filter:
        return f"""vec4 filter_tap(inout ivec2 pw, ivec2 tap_step, int ww) {{
  vec4 w = texelFetch({x}, pw, 0);
  pw = advance(pw, tap_step, ww);
  return w;
}}
"""
    return f"""vec4 filter_tap(inout ivec2 pw, ivec2 tap_step, int ww) {{
  vec4 w;
  ivec2 q = pw;
  w.x = texelFetch({x}, q, 0).r;
  q = advance(q, ivec2(1, 0), ww);
  w.y = texelFetch({x}, q, 0).r;
  q = advance(q, ivec2(1, 0), ww);
  w.z = texelFetch({x}, q, 0).r;
  q = advance(q, ivec2(1, 0), ww);
  w.w = texelFetch({x}, q, 0).r;
  pw = advance(pw, tap_step, ww);
  return w;
}}
"""
