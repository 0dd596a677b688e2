// Matrix product C[batch] = A[batch] @ B[batch] for C of one row (a dense layer's forward pass at
// batch 1: a matrix-vector product) with row-major operands whose K and N are multiples of 4.
// The tiled GEMMs spend a workgroup on 8 or more rows of C, so at one row most of their work is
// padding; here a workgroup's 64 invocations are COLS4 vec4 columns of C times LANES slices of
// K: each invocation sums its columns over every LANES-th vec4 of K (4 rows of B per step, one
// vec4 of A), then the workgroup adds its LANES partial sums in shared memory. One dispatch, no
// split-K scratch.
{{COMMON}}

{{VECTOR_GEMM_IO}}
// Here tiles_m is C's row count and tiles_n its vec4 column groups (COLS4 each).

const COLS4: u32 = {{COLUMN_VECS}}u;
const LANES: u32 = 64u / COLS4;

var<workgroup> partial: array<vec4<f32>, 64>;

{{TILE_LOOP}}

fn tile(group: u32, lid: u32) {
  let tile_n = group % p.tiles_n;
  let row = (group / p.tiles_n) % p.tiles_m;
  let batch = group / (p.tiles_n * p.tiles_m);
  let n4 = p.n / 4u;
  let k4 = p.k / 4u;
  // Neighbouring invocations read neighbouring vec4s of a B row.
  let col4 = tile_n * COLS4 + lid % COLS4;
  let lane = lid / COLS4;
  let a_base = batch * (p.a_batch / 4u) + row * (p.a_row / 4u);
  let b_row4 = p.b_row / 4u;
  var acc = vec4<f32>(0.0);
  if (col4 < n4) {
    var b_at = batch * (p.b_batch / 4u) + lane * 4u * b_row4 + col4;
    for (var kv = lane; kv < k4; kv += LANES) {
      let av = a[a_base + kv];
      acc = fma(vec4<f32>(av.x), b[b_at], acc);
      acc = fma(vec4<f32>(av.y), b[b_at + b_row4], acc);
      acc = fma(vec4<f32>(av.z), b[b_at + 2u * b_row4], acc);
      acc = fma(vec4<f32>(av.w), b[b_at + 3u * b_row4], acc);
      b_at += LANES * 4u * b_row4;
    }
  }
  workgroupBarrier();  // the previous tile's sums are read
  partial[lid] = acc;
  // Halving: lanes [0, s) add lanes [s, 2s) of the same columns.
  for (var s = LANES / 2u; s > 0u; s /= 2u) {
    workgroupBarrier();
    if (lane < s) { partial[lid] += partial[lid + s * COLS4]; }
  }
  workgroupBarrier();
  if (lane == 0u && col4 < n4) {
    c[(batch * p.m + row) * n4 + col4] = partial[lid];
  }
}
