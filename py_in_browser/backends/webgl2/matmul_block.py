"""Blocked matmul: each fragment computes ROWS output rows x COLS output texels (4 columns each)
into ROWS * COLS render targets, then one interleave draw puts the targets' texels in place.

Why: the one-texel kernel (matmul4.frag) fetches 1 texel of a and 4 of b per 16 multiply-adds;
a 4 x 2 block fetches 4 of a and 8 of b per 128 (10.7 per fetch instead of 3.2). Where texel
fetches dominate (SwiftShader, and bandwidth-bound GPUs) that is 2-3x faster on large products.
A fragment writes one texel per render target, so the block's texels go to separate targets
(MRT: up to MAX_DRAW_BUFFERS) and a cheap draw (one fetch per output texel) interleaves them.

Only whole-texel products whose matrix rows are texture rows ("aligned": matmul4 nn_aligned
and nt_aligned) take this path. Target t = i * COLS + j holds, at texel (x, y), output texel
column x * COLS + j of output row y * ROWS + i (rows counted over the batch: batch * M + m).
"""

from __future__ import annotations

# Block shapes (rows, texel columns), best first; one fits every WebGL2 device (4 draw buffers).
SHAPES = ((4, 2), (4, 1))


def shape_for(m: int, n: int, draw_buffers: int) -> tuple[int, int] | None:
    """The first block shape that tiles an M x N output (per batch) within the draw buffers."""
    for rows, cols in SHAPES:
        if rows * cols <= draw_buffers and m % rows == 0 and n % (4 * cols) == 0:
            return rows, cols
    return None


def warmup_keys(draw_buffers: int) -> list[str]:
    """The programs of the best block shape the device allows (others compile on first use)."""
    rows, cols = next((r, c) for r, c in SHAPES if r * c <= draw_buffers)
    shape = f"{rows}x{cols}"
    return [f"matmul_block:nn_{shape}", f"matmul_block:nt_{shape}", f"matmul_interleave:{shape}"]


def _names(rows: int, cols: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(rows) for j in range(cols)]


def block_source(variant: str, rows: int, cols: int) -> str:
    """The body of program "matmul_block:<nn|nt><rows>x<cols>": write_block(p) computes target
    texel p of every target. a is (B, M, K), one matrix row per texture row; b is (B, K, N)
    (nn) or (B, N, K) (nt), likewise. Unrolled: the compiler keeps the block in registers."""
    outputs = "".join(f"layout(location = {t}) out vec4 o_{t};\n" for t in range(1, rows * cols))
    fetch_a = "".join(
        f"    vec4 a{i} = texelFetch(u_x0, ivec2(k, row + {i}), 0);\n" for i in range(rows)
    )
    if variant == "nn":
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
    clear = "".join(f"  vec4 c{i}_{j} = vec4(0.0);\n" for i, j in _names(rows, cols))
    writes = "".join(
        f"  {'o_value' if t == 0 else f'o_{t}'} = c{i}_{j};\n"
        for t, (i, j) in enumerate(_names(rows, cols))
    )
    return (
        f"#define BLOCK_KERNEL\nuniform int u_m;\nuniform int u_n;\nuniform int u_k;\n{outputs}"
        "void write_block(ivec2 p) {\n"
        f"  int row = p.y * {rows};  // batch * M + m of the block's first row\n"
        f"  int col = p.x * {cols};  // its first output texel column\n"
        "  int batch = row / u_m;\n"
        f"{start}{clear}  for (int k = 0; k < u_k / 4; ++k) {{\n{fetch_a}{fetch_b}{update}  }}\n"
        f"{writes}}}\n"
    )


def interleave_source(rows: int, cols: int) -> str:
    """The body of program "matmul_interleave:<rows>x<cols>": output texel p (aligned output:
    texture row = output row) from target (p.y % rows) * cols + p.x % cols. Samplers cannot be
    indexed by a varying value in GLSL ES 3.00, hence the chain of fetches."""
    chain = "".join(
        f"  if (t == {t}) return texelFetch(u_x{t}, q, 0);\n" for t in range(rows * cols - 1)
    )
    last = rows * cols - 1
    return (
        "#define TEXEL_KERNEL\nvec4 value4(int texel) {\n  ivec2 p = ivec2(gl_FragCoord.xy);\n"
        f"  int t = (p.y % {rows}) * {cols} + p.x % {cols};\n"
        f"  ivec2 q = ivec2(p.x / {cols}, p.y / {rows});\n{chain}"
        f"  return texelFetch(u_x{last}, q, 0);\n}}\n"
    )
