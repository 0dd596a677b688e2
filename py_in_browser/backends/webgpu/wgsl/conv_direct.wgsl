// conv2d of an input with few channels (a first layer on RGB images: K = 3 x 3 x 3 = 27 taps;
// a small CNN's second layer: 144) computed directly: each invocation owns one output pixel and
// VECS vec4s of its output channels, walks the filter window over the input (skipping taps in
// the padding) and reads the filters (HWIO) as vec4s along the output channels. As an implicit
// GEMM the 27 taps would fill two 16-wide K slabs of which 5 of 32 columns are padding, each
// element staged through shared memory with its im2col index arithmetic; here there is no
// shared memory and no barrier, so a software adapter runs the workgroups without
// synchronising them.
{{COMMON}}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;

struct Params {
  invocations: u32, groups: u32, in_h: u32, in_w: u32,
  in_c: u32, out_h: u32, out_w: u32, out_c4: u32,
  k_h: u32, k_w: u32, stride_h: u32, stride_w: u32,
  pad_top: i32, pad_left: i32,
}
@group(0) @binding(3) var<uniform> p: Params;

const VECS: u32 = {{VECS}}u;  // vec4s of output channels per invocation

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = workgroup_linear(wid, nwg) * 64u + lid;
  if (i >= p.invocations) { return; }
  // p.groups vec4 groups of VECS per pixel; neighbouring invocations take neighbouring groups.
  let v0 = (i % p.groups) * VECS;
  let pixel = i / p.groups;
  let ow = pixel % p.out_w;
  let oh = (pixel / p.out_w) % p.out_h;
  let n = pixel / (p.out_w * p.out_h);
  let top = i32(oh * p.stride_h) - p.pad_top;
  let left = i32(ow * p.stride_w) - p.pad_left;
  var acc: array<vec4<f32>, VECS>;
  for (var kh = 0u; kh < p.k_h; kh++) {
    let ih = top + i32(kh);
    if (ih < 0 || ih >= i32(p.in_h)) { continue; }
    for (var kw = 0u; kw < p.k_w; kw++) {
      let iw = left + i32(kw);
      if (iw < 0 || iw >= i32(p.in_w)) { continue; }
      let x_at = ((n * p.in_h + u32(ih)) * p.in_w + u32(iw)) * p.in_c;
      let w_at = (kh * p.k_w + kw) * p.in_c * p.out_c4 + v0;
      for (var ci = 0u; ci < p.in_c; ci++) {
        let xv = vec4<f32>(x[x_at + ci]);
        let w_row = w_at + ci * p.out_c4;
        for (var j = 0u; j < VECS; j++) {
          if (v0 + j < p.out_c4) { acc[j] = fma(xv, w[w_row + j], acc[j]); }
        }
      }
    }
  }
  for (var j = 0u; j < VECS; j++) {
    if (v0 + j < p.out_c4) { y[pixel * p.out_c4 + v0 + j] = acc[j]; }
  }
}
