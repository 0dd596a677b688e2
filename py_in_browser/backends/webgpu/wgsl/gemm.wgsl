// Tiled matrix product C[batch] = A[batch] @ B[batch] with workgroup shared memory; matmul and
// the three convolutions (as implicit GEMMs over im2col) differ only in how A and B are loaded
// (LOAD_A, LOAD_B: loaders of gemm_io.wgsl). 64 invocations compute a tile of C, 4x4 values
// each, stepping through K in slabs of 16 staged in shared memory. With splits > 1 each
// workgroup sums one slice of K and writes its partial product to scratch (split-K), which a
// reduction then sums: that keeps the GPU busy when C is small but K is long (filter gradients).
{{COMMON}}

{{GEMM_IO}}

// The tile shape is specialised (TILE_M x TILE_N with TILE_M * TILE_N = 1024, both multiples of
// 4): a 128x8 tile wastes far less work than 32x32 when C has 3 or 8 columns (a first conv
// layer's input gradient), and 8x128 the same for few rows.
const TILE_M: u32 = {{TILE_M}}u;
const TILE_N: u32 = {{TILE_N}}u;
const TILE_K: u32 = 16u;
const THREADS_N: u32 = TILE_N / 4u;
const THREADS_M: u32 = TILE_M / 4u;

var<workgroup> tile_a: array<f32, TILE_M * TILE_K>;  // TILE_M rows x 16 columns of A
var<workgroup> tile_b: array<f32, TILE_K * TILE_N>;  // 16 rows x TILE_N columns of B
var<workgroup> a_rows: array<vec4<i32>, TILE_M>;  // {{LOAD_A}}_row of the tile's rows

{{TILE_LOOP}}

// Looping over tiles, the next tile writes a_rows while others may still compute the last one,
// which reads only tile_a and tile_b.
fn tile(group: u32, lid: u32) {
  let tile_n = group % p.tiles_n;
  let tile_m = (group / p.tiles_n) % p.tiles_m;
  let batch = (group / (p.tiles_n * p.tiles_m)) % p.batches;
  let split = group / (p.tiles_n * p.tiles_m * p.batches);
  let row0 = tile_m * TILE_M;
  let col0 = tile_n * TILE_N;
  let k_begin = split * p.k_per_split;
  let k_end = min(p.k, k_begin + p.k_per_split);
  for (var r = lid; r < TILE_M; r += 64u) { a_rows[r] = {{LOAD_A}}_row(min(row0 + r, p.m - 1u)); }
  // Invocation (tx, ty) owns rows ty + THREADS_M * i and columns tx + THREADS_N * j of the
  // tile: interleaved, so neighbouring invocations read neighbouring shared-memory words.
  let tx = lid % THREADS_N;
  let ty = lid / THREADS_N;
  // 64 is a multiple of TILE_K: every A element this invocation stages is in column lid % 16.
  let a_slab_col = lid % TILE_K;
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  for (var k0 = k_begin; k0 < k_end; k0 += TILE_K) {
    workgroupBarrier();  // a_rows written; the previous slab's tiles fully read
    let a_col = k0 + a_slab_col;
    let a_col_info = {{LOAD_A}}_col(min(a_col, p.k - 1u));
    for (var e = lid; e < TILE_M * TILE_K; e += 64u) {
      let r = e / TILE_K;
      var a_value = 0.0;
      if (row0 + r < p.m && a_col < k_end) { a_value = {{LOAD_A}}(batch, a_rows[r], a_col_info); }
      tile_a[e] = a_value;
    }
    for (var e = lid; e < TILE_K * TILE_N; e += 64u) {
      let b_row = k0 + e / TILE_N;
      let b_col = col0 + e % TILE_N;
      var b_value = 0.0;
      if (b_row < k_end && b_col < p.n) { b_value = {{LOAD_B}}(batch, b_row, b_col); }
      tile_b[e] = b_value;
    }
    workgroupBarrier();
    for (var kk = 0u; kk < TILE_K; kk++) {
      let bk = kk * TILE_N + tx;
      let bv = vec4<f32>(tile_b[bk], tile_b[bk + THREADS_N], tile_b[bk + 2u * THREADS_N],
                         tile_b[bk + 3u * THREADS_N]);
      let ak = ty * TILE_K + kk;
      acc0 = fma(vec4<f32>(tile_a[ak]), bv, acc0);
      acc1 = fma(vec4<f32>(tile_a[ak + THREADS_M * TILE_K]), bv, acc1);
      acc2 = fma(vec4<f32>(tile_a[ak + 2u * THREADS_M * TILE_K]), bv, acc2);
      acc3 = fma(vec4<f32>(tile_a[ak + 3u * THREADS_M * TILE_K]), bv, acc3);
    }
  }
  let c_base = (split * p.batches + batch) * p.m * p.n;
  store_row(c_base, row0 + ty, col0 + tx, THREADS_N, acc0);
  store_row(c_base, row0 + ty + THREADS_M, col0 + tx, THREADS_N, acc1);
  store_row(c_base, row0 + ty + 2u * THREADS_M, col0 + tx, THREADS_N, acc2);
  store_row(c_base, row0 + ty + 3u * THREADS_M, col0 + tx, THREADS_N, acc3);
}
