// Matrix product C[batch] = A[batch] @ B[batch] for row-major operands whose K and N are
// multiples of 4 (matmul without transposes: dense layers' forward pass, big square products),
// or with A transposed (stored K x M, M a multiple of 4: a dense layer's weight gradient x^T g),
// where the A slab is staged as K rows of M vec4s and each invocation's 4 rows are one vec4.
// Every global and shared-memory access moves a vec4, so a CPU adapter (SwiftShader) issues a
// quarter of the loads gemm.wgsl's scalar loaders need. 64 invocations as 8x8 compute a tile of
// TILE_M x TILE_N: ROWS rows times VECS vec4 columns each, held in ROWS * VECS vec4 accumulators
// (generated unrolled, below, so that they stay in registers). K is walked in slabs of 32: half
// the barriers of 16-wide slabs. ROWS is 4 for C of 32 rows or more, 1 for fewer (a dense
// layer's forward pass at a small batch), where split-K then keeps workgroups busy. A workgroup whose tile and slab lie wholly inside C and K loads
// without any bounds test; only edge tiles take the guarded loads.
{{COMMON}}

{{VECTOR_GEMM_IO}}

const ROWS: u32 = {{ROWS}}u;  // rows of C per invocation
const VECS: u32 = {{VECS}}u;  // vec4 columns of C per invocation
const TILE_M: u32 = 8u * ROWS;
const TILE_N4: u32 = 8u * VECS;  // the tile's width in vec4s
const TILE_K: u32 = 32u;
const TILE_K4: u32 = TILE_K / 4u;
// vec4s of A and of B each invocation stages per slab.
const A_LOADS: u32 = TILE_M * TILE_K4 / 64u;
const B_LOADS: u32 = TILE_K * TILE_N4 / 64u;

// TILE_M rows x 8 vec4s of K; with A transposed, 32 rows of K x TILE_M / 4 vec4s of M.
var<workgroup> tile_a: array<vec4<f32>, TILE_M * TILE_K4>;
var<workgroup> tile_b: array<vec4<f32>, TILE_K * TILE_N4>;  // 32 rows of K x TILE_N4 vec4s

{{TILE_LOOP}}

fn tile(group: u32, lid: u32) {
  let tile_n = group % p.tiles_n;
  let tile_m = (group / p.tiles_n) % p.tiles_m;
  let batch = (group / (p.tiles_n * p.tiles_m)) % p.batches;
  // Split-K as in gemm.wgsl: k_per_split is a multiple of 32, so slices stay vec4-aligned.
  let split = group / (p.tiles_n * p.tiles_m * p.batches);
  let k_begin = split * p.k_per_split;
  let k_end = min(p.k, k_begin + p.k_per_split);
  let row0 = tile_m * TILE_M;
  let col0_4 = tile_n * TILE_N4;
  let n4 = p.n / 4u;
  let k4 = k_end / 4u;
  let a_base = batch * (p.a_batch / 4u);
  let b_base = batch * (p.b_batch / 4u);
  let a_row4 = p.a_row / 4u;
  let a_col4 = p.a_col / 4u;  // with A transposed: vec4s from one K row of A to the next
  let b_row4 = p.b_row / 4u;
  // Staging: invocation lid loads A vec4s (lid + 64 i) of the tile (row-major, TILE_K4 per row)
  // and B vec4s likewise (TILE_N4 per row).
{{A_STAGING}}
  let b_r = lid / TILE_N4;
  let b_c = lid % TILE_N4;
  let full_mn = row0 + TILE_M <= p.m && (col0_4 + TILE_N4) * 4u <= p.n;
  // Invocation (tx, ty) owns rows ty * ROWS + i and vec4 columns tx + 8 j of the tile.
  let tx = lid % 8u;
  let ty = lid / 8u;
{{DECLARE}}
  for (var k0 = k_begin; k0 < k_end; k0 += TILE_K) {
    let kv0 = k0 / 4u;
    if (full_mn && k0 + TILE_K <= k_end) {
      for (var i = 0u; i < A_LOADS; i++) {
{{A_LOAD_FULL}}
      }
      for (var i = 0u; i < B_LOADS; i++) {
        let r = b_r + i * (64u / TILE_N4);
        tile_b[r * TILE_N4 + b_c] = b[b_base + (k0 + r) * b_row4 + col0_4 + b_c];
      }
    } else {
      for (var i = 0u; i < A_LOADS; i++) {
{{A_LOAD_EDGE}}
      }
      for (var i = 0u; i < B_LOADS; i++) {
        let r = b_r + i * (64u / TILE_N4);
        var v = vec4<f32>(0.0);
        if (k0 + r < k_end && col0_4 + b_c < n4) {
          v = b[b_base + (k0 + r) * b_row4 + col0_4 + b_c];
        }
        tile_b[r * TILE_N4 + b_c] = v;
      }
    }
    workgroupBarrier();
    for (var kv = 0u; kv < TILE_K4; kv++) {
{{COMPUTE}}
    }
    workgroupBarrier();
  }
  let c_base = (split * p.batches + batch) * p.m * n4;
{{STORE}}
}

// ROWS x VECS results of one invocation: row `row`, vec4 column `col4` of C, if inside C.
fn store(c_base: u32, row: u32, col4: u32, value: vec4<f32>) {
  if (row < p.m && col4 < p.n / 4u) { c[c_base + row * (p.n / 4u) + col4] = value; }
}
