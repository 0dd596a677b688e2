// conv2d of an input with few channels (a first layer on RGB images: K = 3 x 3 x 3 = 27 taps;
// a small CNN's second layer: 144) computed directly: each invocation owns COLS neighbouring
// output pixels of one row and VECS vec4s of their output channels, walks the filter window over
// the input (skipping taps in the padding, per pixel) and reads the filters (HWIO) as vec4s
// along the output channels, each filter vec4 once for its COLS pixels (software adapters load
// per lane: sharing the loads is what pays). As an implicit GEMM the 27 taps would fill two
// 16-wide K slabs of which 5 of 32 columns are padding, each element staged through shared
// memory with its im2col index arithmetic; here there is no shared memory and no barrier, so a
// software adapter runs the workgroups without synchronising them.
// The per-pixel and per-vec4 parts are generated unrolled (linalg.conv_direct_body), one named
// variable each: as arrays indexed in loops, SwiftShader kept them in memory, per lane, and
// the two convolutions of I3 took 15 ms instead of 5.
// A layer's bias add and relu may be applied as the outputs are stored (FINISH; the runtime's
// epilogues.py), so they cost no pass of their own over y.
{{COMMON}}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<{{FILTER}}>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;
{{BIAS_BINDING}}

struct Params {
  invocations: u32, groups: u32, in_h: u32, in_w: u32,
  in_c: u32, out_h: u32, out_w: u32, out_c4: u32,
  k_h: u32, k_w: u32, stride_h: u32, stride_w: u32,
  pad_top: i32, pad_left: i32, col_groups: u32,
}
@group(0) @binding({{PARAMS_BINDING}}) var<uniform> p: Params;

const VECS: u32 = {{VECS}}u;  // vec4s of output channels per invocation
const COLS: u32 = {{COLS}}u;  // neighbouring output pixels of a row per invocation

// What is stored for the sums v of output channel vec4 c4.
fn finish(v: vec4<f32>, c4: u32) -> vec4<f32> {
{{FINISH}}
}

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
  let vecs_here = min(VECS, p.out_c4 - v0);
  // Filter vec4s past the last output channel load clamped (in bounds); they are not stored.
  let last_w = arrayLength(&w) - 1u;
{{DECLARE}}
  for (var kh = 0u; kh < p.k_h; kh++) {
    let ih = top + i32(kh);
    if (ih < 0 || ih >= i32(p.in_h)) { continue; }
    let row = (n * p.in_h + u32(ih)) * p.in_w;
    for (var kw = 0u; kw < p.k_w; kw++) {
      let left = i32(ow0 * p.stride_w + kw) - p.pad_left;
      // Per pixel: whether this tap is inside the input, and where its channels start (0 when
      // not: an in-bounds read whose product is dropped, so padding adds nothing, not 0 * w).
{{PIXELS}}
{{FILTER_TAP}}
      for (var ci = 0u; ci < p.in_c; ci++) {
{{TAP}}
      }
    }
  }
  let first = ((n * p.out_h + oh) * p.out_w + ow0) * p.out_c4 + v0;
{{STORE}}
}
