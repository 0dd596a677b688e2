// The bindings, Params and operand loaders gemm.wgsl and gemm_direct.wgsl share (matmul and the
// three convolutions as implicit GEMMs differ only in how A and B are loaded: LOAD_A, LOAD_B
// name one of the loaders below), and how an invocation stores its values of one C row.
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
  // gemm_direct.wgsl's tile width in invocations (its tile shape is not compiled in).
  threads_n: u32,
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

// The four values an invocation holds of one C row, at columns col + step * j.
fn store_row(c_base: u32, row: u32, col: u32, step: u32, values: vec4<f32>) {
  if (row >= p.m) { return; }
  for (var j = 0u; j < 4u; j++) {
    let column = col + step * j;
    if (column < p.n) { c[c_base + row * p.n + column] = values[j]; }
  }
}
