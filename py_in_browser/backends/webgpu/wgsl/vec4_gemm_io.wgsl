// The bindings gemm_vec4.wgsl and gemv.wgsl share: A, B and C as vec4 arrays, and the leading
// fields and strides of gemm.wgsl's Params (the host fills one layout for all three kernels).
// Counts and strides of A and B are in floats, and all of them are multiples of 4.
@group(0) @binding(0) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> c: array<vec4<f32>>;

struct Params {
  m: u32, n: u32, k: u32, tiles_m: u32,
  tiles_n: u32, batches: u32, splits: u32, k_per_split: u32,
  a_batch: u32, a_row: u32, a_col: u32, b_batch: u32,
  b_row: u32, b_col: u32,
}
@group(0) @binding(3) var<uniform> p: Params;
