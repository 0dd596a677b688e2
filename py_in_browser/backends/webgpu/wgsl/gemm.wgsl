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

fn strided_a(batch: u32, row: u32, col: u32) -> f32 {
  return a[batch * p.a_batch + row * p.a_row + col * p.a_col];
}

fn strided_b(batch: u32, row: u32, col: u32) -> f32 {
  return b[batch * p.b_batch + row * p.b_row + col * p.b_col];
}

// The conv2d input under filter tap `tap` = (kh, kw, ci) of output pixel `pixel` = (n, oh, ow):
// one element of the im2col matrix, zero in the padding.
fn im2col_a(batch: u32, pixel: u32, tap: u32) -> f32 {
  let ci = tap % p.in_c;
  let kw = (tap / p.in_c) % p.k_w;
  let kh = tap / (p.in_c * p.k_w);
  let ow = pixel % p.out_w;
  let oh = (pixel / p.out_w) % p.out_h;
  let n = pixel / (p.out_w * p.out_h);
  let ih = i32(oh * p.stride_h + kh) - p.pad_top;
  let iw = i32(ow * p.stride_w + kw) - p.pad_left;
  if (ih < 0 || iw < 0 || ih >= i32(p.in_h) || iw >= i32(p.in_w)) { return 0.0; }
  return a[((n * p.in_h + u32(ih)) * p.in_w + u32(iw)) * p.in_c + ci];
}

// conv2d_backprop_filter's A: the im2col matrix transposed (rows are taps, columns pixels).
fn im2col_transposed_a(batch: u32, tap: u32, pixel: u32) -> f32 {
  return im2col_a(batch, pixel, tap);
}

// conv2d_backprop_input's A: the output gradient that reached input pixel (n, h, w) through tap
// (kh, kw, co), or zero where no output pixel's window puts that tap on this input pixel.
fn output_grad_a(batch: u32, pixel: u32, tap: u32) -> f32 {
  let co = tap % p.out_c;
  let kw = (tap / p.out_c) % p.k_w;
  let kh = tap / (p.out_c * p.k_w);
  let w = pixel % p.in_w;
  let h = (pixel / p.in_w) % p.in_h;
  let n = pixel / (p.in_w * p.in_h);
  let th = i32(h + u32(p.pad_top)) - i32(kh);
  let tw = i32(w + u32(p.pad_left)) - i32(kw);
  if (th < 0 || tw < 0) { return 0.0; }
  if (u32(th) % p.stride_h != 0u || u32(tw) % p.stride_w != 0u) { return 0.0; }
  let oh = u32(th) / p.stride_h;
  let ow = u32(tw) / p.stride_w;
  if (oh >= p.out_h || ow >= p.out_w) { return 0.0; }
  return a[((n * p.out_h + oh) * p.out_w + ow) * p.out_c + co];
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

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let group = workgroup_linear(wid, nwg);
  // Uniform per workgroup, so the barriers below stay in uniform control flow.
  if (group >= p.tiles_m * p.tiles_n * p.batches * p.splits) { return; }
  let tile_n = group % p.tiles_n;
  let tile_m = (group / p.tiles_n) % p.tiles_m;
  let batch = (group / (p.tiles_n * p.tiles_m)) % p.batches;
  let split = group / (p.tiles_n * p.tiles_m * p.batches);
  let row0 = tile_m * TILE_M;
  let col0 = tile_n * TILE_N;
  let k_begin = split * p.k_per_split;
  let k_end = min(p.k, k_begin + p.k_per_split);
  // Invocation (tx, ty) owns rows ty + THREADS_M * i and columns tx + THREADS_N * j of the
  // tile: interleaved, so neighbouring invocations read neighbouring shared-memory words.
  let tx = lid % THREADS_N;
  let ty = lid / THREADS_N;
  var acc: array<f32, 16>;
  for (var k0 = k_begin; k0 < k_end; k0 += TILE_K) {
    for (var e = lid; e < TILE_M * TILE_K; e += 64u) {
      let a_row = row0 + e / TILE_K;
      let a_col = k0 + e % TILE_K;
      var a_value = 0.0;
      if (a_row < p.m && a_col < k_end) { a_value = {{LOAD_A}}(batch, a_row, a_col); }
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
      var a_regs: array<f32, 4>;
      var b_regs: array<f32, 4>;
      for (var i = 0u; i < 4u; i++) {
        a_regs[i] = tile_a[(ty + THREADS_M * i) * TILE_K + kk];
        b_regs[i] = tile_b[kk * TILE_N + tx + THREADS_N * i];
      }
      for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
          acc[i * 4u + j] = fma(a_regs[i], b_regs[j], acc[i * 4u + j]);
        }
      }
    }
    workgroupBarrier();
  }
  let c_base = (split * p.batches + batch) * p.m * p.n;
  for (var i = 0u; i < 4u; i++) {
    for (var j = 0u; j < 4u; j++) {
      let row = row0 + ty + THREADS_M * i;
      let col = col0 + tx + THREADS_N * j;
      if (row < p.m && col < p.n) { c[c_base + row * p.n + col] = acc[i * 4u + j]; }
    }
  }
}
