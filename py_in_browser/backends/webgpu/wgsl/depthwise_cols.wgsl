// depthwise_conv2d of a layer's small filters (multiplier 1, channels in whole vec4s, the filter
// width KW and column stride SW baked in): each invocation computes COLS neighbouring output
// pixels of one row for one vec4 of channels. Per window row it loads the (COLS - 1) * SW + KW
// input vec4s those pixels share once (a 5x5 layer at stride 1: 8 loads, not 20) and each
// filter vec4 once. The window row's loads, taps and stores are generated unrolled
// (depthwise.columns_body), one variable each: as arrays indexed in constant-bound loops,
// SwiftShader kept them in memory, per lane (the hand model's 16 layers: 97 -> 30 ms).
// Padded taps multiply a zero in (0 * Inf is NaN, as numpy's padded reference).
{{COMMON}}

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;

struct Params {
  invocations: u32, in_h: u32, in_w: u32, units: u32,
  out_h: u32, out_w: u32, col_groups: u32, k_h: u32,
  stride_h: u32, pad_top: i32, pad_left: i32,
}
@group(0) @binding(3) var<uniform> p: Params;

const KW: u32 = {{KW}}u;
const SW: u32 = {{SW}}u;
const COLS: u32 = {{COLS}}u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = workgroup_linear(wid, nwg) * 64u + lid;
  if (i >= p.invocations) { return; }
  let u = i % p.units;
  let rest = i / p.units;
  let ow0 = (rest % p.col_groups) * COLS;
  let oh = (rest / p.col_groups) % p.out_h;
  let n = rest / (p.col_groups * p.out_h);
  let top = i32(oh * p.stride_h) - p.pad_top;
  let left = i32(ow0 * SW) - p.pad_left;
{{DECLARE}}
  for (var kh = 0u; kh < p.k_h; kh++) {
    let ih = top + i32(kh);
    let row_inside = ih >= 0 && ih < i32(p.in_h);
    let row = (n * p.in_h + u32(ih)) * p.in_w;
    // The (COLS - 1) * SW + KW input vec4s of this window row (a padded one reads index 0 and takes a zero).
{{SPAN}}
    let w_row = kh * KW * p.units + u;
{{TAPS}}
  }
  let first = ((n * p.out_h + oh) * p.out_w + ow0) * p.units + u;
{{STORE}}
}
