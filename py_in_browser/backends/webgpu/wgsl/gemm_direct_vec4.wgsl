// gemm_vec4.wgsl's operand layouts (row-major, K and N multiples of 4; or A stored K x M) without
// workgroup memory, for adapters that run on the CPU (SwiftShader; see gemm_direct.wgsl for why
// no workgroup memory there): each invocation reads its operands as vec4s straight from the
// buffers and computes 4 neighbouring rows x VECS vec4 columns of C. Per 4 steps of K it loads 4
// vec4s of A and 4 * VECS of B for 16 * VECS vec4 multiply-adds, where gemm_direct.wgsl's scalar
// loaders take 8 loads per 4 of them. Invocations (tx, ty) of a workgroup take vec4 columns
// tx + 8 v and rows 4 ty + i of a 32-row tile. Split-K as in gemm.wgsl, K slices a multiple of 4.
{{COMMON}}

{{VECTOR_GEMM_IO}}

{{TILE_LOOP}}

fn tile(group: u32, lid: u32) {
  let at = tile_at(group);
  let batch = at.batch;
  let k_begin = at.k_begin;
  let k_end = at.k_end;
  let n4 = p.n / 4u;
  let a_base = batch * (p.a_batch / 4u);
  let b_base = batch * (p.b_batch / 4u);
  let a_row4 = p.a_row / 4u;
  let a_col4 = p.a_col / 4u;
  let b_row4 = p.b_row / 4u;
  let row = at.m * 32u + (lid / 8u) * 4u;
  let col4 = at.n * 8u * {{VECS}}u + lid % 8u;
  // Rows and columns past C's edge load clamped (in-bounds) operands; their values are not stored.
{{CLAMP}}
{{DECLARE}}
{{LOOP}}
  let c_base = (at.c_slice + batch) * p.m * n4;
{{STORE}}
}

fn store(c_base: u32, row: u32, col4: u32, value: vec4<f32>) {
  if (row < p.m && col4 < p.n / 4u) { c[c_base + row * (p.n / 4u) + col4] = value; }
}
