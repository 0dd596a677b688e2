// Tiled matrix product C[batch] = A[batch] @ B[batch] with workgroup shared memory; matmul and
// the three convolutions (as implicit GEMMs over im2col) differ only in how A and B are loaded
// (LOAD_A, LOAD_B: one of the loaders below). 64 invocations compute a tile of C, 4x4 values
// each, stepping through K in slabs of 16 staged in shared memory. With splits > 1 each
// workgroup sums one slice of K and writes its partial product to scratch (split-K), which a
// reduction then sums: that keeps the GPU busy when C is small but K is long (filter gradients).
{{COMMON}}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;

struct Params {
  m: u32, n: u32, k: u32, tiles_m: u32,
  tiles_n: u32, batches: u32, splits: u32, k_per_split: u32,
  // Strided operands (matmul): element (row, col) of batch i is at i*batch + row*row + col*col.
  a_batch: u32, a_row: u32, a_col: u32, b_batch: u32,
  b_row: u32, b_col: u32,
  // Convolution geometry: input (N, in_h, in_w, in_c), filters HWIO, output (N, out_h, out_w, out_c).
  in_h: u32, in_w: u32,
  in_c: u32, out_h: u32, out_w: u32, out_c: u32,
  k_h: u32, k_w: u32, stride_h: u32, stride_w: u32,
  pad_top: i32, pad_left: i32,
}
@group(0) @binding(3) var<uniform> p: Params;

// Loaders of A come in threes: NAME_row(row) and NAME_col(col) return what NAME(batch, r, c)
// needs from the row and column index (the integer division and modulo of the convolutions'
// pixel and tap coordinates), so the tile loop below divides once per tile row and once per
// K slab instead of once per loaded element.

fn strided_a_row(row: u32) -> vec4<i32> { return vec4<i32>(i32(row * p.a_row), 0, 0, 0); }
fn strided_a_col(col: u32) -> vec4<i32> { return vec4<i32>(i32(col * p.a_col), 0, 0, 0); }
fn strided_a(batch: u32, r: vec4<i32>, c: vec4<i32>) -> f32 {
  return a[batch * p.a_batch + u32(r.x + c.x)];
}

fn strided_b(batch: u32, row: u32, col: u32) -> f32 {
  return b[batch * p.b_batch + row * p.b_row + col * p.b_col];
}

// An output pixel (n, oh, ow) as (image base, top input row, left input column) of its window.
fn conv_pixel(pixel: u32) -> vec4<i32> {
  let ow = pixel % p.out_w;
  let oh = (pixel / p.out_w) % p.out_h;
  let n = pixel / (p.out_w * p.out_h);
  return vec4<i32>(i32(n * p.in_h * p.in_w * p.in_c), i32(oh * p.stride_h) - p.pad_top,
                   i32(ow * p.stride_w) - p.pad_left, 0);
}

// A filter tap of the forward convolution as (kh, kw, ci).
fn conv_tap(tap: u32) -> vec4<i32> {
  return vec4<i32>(i32(tap / (p.in_c * p.k_w)), i32((tap / p.in_c) % p.k_w), i32(tap % p.in_c), 0);
}

// The conv2d input under filter tap (kh, kw, ci) of an output pixel: one element of the im2col
// matrix, zero in the padding.
fn im2col_value(pixel: vec4<i32>, tap: vec4<i32>) -> f32 {
  let ih = pixel.y + tap.x;
  let iw = pixel.z + tap.y;
  if (ih < 0 || iw < 0 || ih >= i32(p.in_h) || iw >= i32(p.in_w)) { return 0.0; }
  return a[u32(pixel.x + (ih * i32(p.in_w) + iw) * i32(p.in_c) + tap.z)];
}

// conv2d's A: rows are output pixels, columns taps.
fn im2col_a_row(row: u32) -> vec4<i32> { return conv_pixel(row); }
fn im2col_a_col(col: u32) -> vec4<i32> { return conv_tap(col); }
fn im2col_a(batch: u32, r: vec4<i32>, c: vec4<i32>) -> f32 { return im2col_value(r, c); }

// conv2d_backprop_filter's A: the im2col matrix transposed (rows are taps, columns pixels).
fn im2col_transposed_a_row(row: u32) -> vec4<i32> { return conv_tap(row); }
fn im2col_transposed_a_col(col: u32) -> vec4<i32> { return conv_pixel(col); }
fn im2col_transposed_a(batch: u32, r: vec4<i32>, c: vec4<i32>) -> f32 {
  return im2col_value(c, r);
}

// conv2d_backprop_input's A: the output gradient that reached input pixel (n, h, w) through tap
// (kh, kw, co), or zero where no output pixel's window puts that tap on this input pixel.
// Rows: input pixels as (image base in the gradient, h + pad_top, w + pad_left).
fn output_grad_a_row(pixel: u32) -> vec4<i32> {
  let w = pixel % p.in_w;
  let h = (pixel / p.in_w) % p.in_h;
  let n = pixel / (p.in_w * p.in_h);
  return vec4<i32>(i32(n * p.out_h * p.out_w * p.out_c), i32(h) + p.pad_top,
                   i32(w) + p.pad_left, 0);
}
// Columns: taps as (kh, kw, co).
fn output_grad_a_col(tap: u32) -> vec4<i32> {
  return vec4<i32>(i32(tap / (p.out_c * p.k_w)), i32((tap / p.out_c) % p.k_w), i32(tap % p.out_c), 0);
}
fn output_grad_a(batch: u32, r: vec4<i32>, c: vec4<i32>) -> f32 {
  var oh = r.y - c.x;
  var ow = r.z - c.y;
  if (oh < 0 || ow < 0) { return 0.0; }
  if (p.stride_h != 1u || p.stride_w != 1u) {
    if (u32(oh) % p.stride_h != 0u || u32(ow) % p.stride_w != 0u) { return 0.0; }
    oh = i32(u32(oh) / p.stride_h);
    ow = i32(u32(ow) / p.stride_w);
  }
  if (oh >= i32(p.out_h) || ow >= i32(p.out_w)) { return 0.0; }
  return a[u32(r.x + (oh * i32(p.out_w) + ow) * i32(p.out_c) + c.z)];
}

// conv2d_backprop_input's B: filter element (kh, kw, ci, co) with rows (kh, kw, co), columns ci.
fn transposed_filter_b(batch: u32, tap: u32, ci: u32) -> f32 {
  let co = tap % p.out_c;
  let khw = tap / p.out_c;
  return b[(khw * p.in_c + ci) * p.out_c + co];
}

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
  store_row(c_base, row0 + ty, col0 + tx, acc0);
  store_row(c_base, row0 + ty + THREADS_M, col0 + tx, acc1);
  store_row(c_base, row0 + ty + 2u * THREADS_M, col0 + tx, acc2);
  store_row(c_base, row0 + ty + 3u * THREADS_M, col0 + tx, acc3);
}

// The four values an invocation holds of one C row, at columns col + THREADS_N * j.
fn store_row(c_base: u32, row: u32, col: u32, values: vec4<f32>) {
  if (row >= p.m) { return; }
  for (var j = 0u; j < 4u; j++) {
    let column = col + THREADS_N * j;
    if (column < p.n) { c[c_base + row * p.n + column] = values[j]; }
  }
}
