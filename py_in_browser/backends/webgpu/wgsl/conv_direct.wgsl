// conv2d of an input with few channels (a first layer on RGB images: K = 3 x 3 x 3 = 27 taps;
// a small CNN's second layer: 144) computed directly: each invocation owns COLS neighbouring
// output pixels of one row and VECS vec4s of their output channels, walks the filter window over
// the input (skipping taps in the padding, per pixel) and reads the filters (HWIO) as vec4s
// along the output channels, each filter vec4 once for its COLS pixels (software adapters load
// per lane: sharing the loads is what pays). As an implicit GEMM the 27 taps would fill two
// 16-wide K slabs of which 5 of 32 columns are padding, each element staged through shared
// memory with its im2col index arithmetic; here there is no shared memory and no barrier, so a
// software adapter runs the workgroups without synchronising them.
{{COMMON}}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;

struct Params {
  invocations: u32, groups: u32, in_h: u32, in_w: u32,
  in_c: u32, out_h: u32, out_w: u32, out_c4: u32,
  k_h: u32, k_w: u32, stride_h: u32, stride_w: u32,
  pad_top: i32, pad_left: i32, col_groups: u32,
}
@group(0) @binding(3) var<uniform> p: Params;

const VECS: u32 = {{VECS}}u;  // vec4s of output channels per invocation
const COLS: u32 = {{COLS}}u;  // neighbouring output pixels of a row per invocation

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = workgroup_linear(wid, nwg) * 64u + lid;
  if (i >= p.invocations) { return; }
  // p.groups vec4 groups of VECS per pixel; neighbouring invocations take neighbouring groups.
  let v0 = (i % p.groups) * VECS;
  let rest = i / p.groups;
  let ow0 = (rest % p.col_groups) * COLS;
  let oh = (rest / p.col_groups) % p.out_h;
  let n = rest / (p.col_groups * p.out_h);
  let top = i32(oh * p.stride_h) - p.pad_top;
  var vecs_here = min(VECS, p.out_c4 - v0);
  var acc: array<vec4<f32>, COLS * VECS>;
  for (var kh = 0u; kh < p.k_h; kh++) {
    let ih = top + i32(kh);
    if (ih < 0 || ih >= i32(p.in_h)) { continue; }
    let row = (n * p.in_h + u32(ih)) * p.in_w;
    for (var kw = 0u; kw < p.k_w; kw++) {
      var x_at: array<u32, COLS>;
      var inside: array<bool, COLS>;
      for (var o = 0u; o < COLS; o++) {
        let iw = i32((ow0 + o) * p.stride_w + kw) - p.pad_left;
        inside[o] = ow0 + o < p.out_w && iw >= 0 && iw < i32(p.in_w);
        x_at[o] = select(0u, (row + u32(iw)) * p.in_c, inside[o]);
      }
      let w_at = (kh * p.k_w + kw) * p.in_c * p.out_c4 + v0;
      for (var ci = 0u; ci < p.in_c; ci++) {
        var xv: array<f32, COLS>;
        for (var o = 0u; o < COLS; o++) { xv[o] = x[x_at[o] + ci]; }
        let w_row = w_at + ci * p.out_c4;
        for (var j = 0u; j < VECS; j++) {
          if (j >= vecs_here) { break; }
          let wv = w[w_row + j];
          for (var o = 0u; o < COLS; o++) {
            if (inside[o]) { acc[o * VECS + j] = fma(vec4<f32>(xv[o]), wv, acc[o * VECS + j]); }
          }
        }
      }
    }
  }
  let first = ((n * p.out_h + oh) * p.out_w + ow0) * p.out_c4 + v0;
  for (var o = 0u; o < COLS; o++) {
    if (ow0 + o >= p.out_w) { break; }
    for (var j = 0u; j < vecs_here; j++) { y[first + o * p.out_c4 + j] = acc[o * VECS + j]; }
  }
}
