// Params and window helpers shared by the four pooling kernels (NHWC, explicit pads).
{{COMMON}}

struct Params {
  count: u32, n: u32, in_h: u32, in_w: u32,
  c: u32, out_h: u32, out_w: u32, k_h: u32,
  k_w: u32, stride_h: u32, stride_w: u32, pad_top: i32,
  pad_left: i32,
}
@group(0) @binding({{PARAMS_BINDING}}) var<uniform> p: Params;

fn invocation_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return workgroup_linear(wid, nwg) * 64u + lid;
}

// First input row/column of output window (oh, ow); negative inside the top/left padding.
fn window_origin(oh: u32, ow: u32) -> vec2<i32> {
  return vec2<i32>(i32(oh * p.stride_h) - p.pad_top, i32(ow * p.stride_w) - p.pad_left);
}

// Element i of an NHWC tensor of height h and width w, as (n, row, column, channel).
fn nhwc_position(i: u32, h: u32, w: u32) -> vec4<u32> {
  return vec4<u32>(i / (p.c * w * h), (i / (p.c * w)) % h, (i / p.c) % w, i % p.c);
}

// Flat indices of input element (n, h, w, ch) and output element (n, oh, ow, ch).
fn input_index(n: u32, h: u32, w: u32, ch: u32) -> u32 {
  return ((n * p.in_h + h) * p.in_w + w) * p.c + ch;
}

fn output_index(n: u32, oh: u32, ow: u32, ch: u32) -> u32 {
  return ((n * p.out_h + oh) * p.out_w + ow) * p.c + ch;
}

fn in_image(h: i32, w: i32) -> bool {
  return h >= 0 && w >= 0 && h < i32(p.in_h) && w < i32(p.in_w);
}

// How many real (unpadded) inputs window (oh, ow) covers: padding is not averaged in (TF rule).
fn window_size(oh: u32, ow: u32) -> f32 {
  let origin = window_origin(oh, ow);
  let rows = min(origin.x + i32(p.k_h), i32(p.in_h)) - max(origin.x, 0);
  let cols = min(origin.y + i32(p.k_w), i32(p.in_w)) - max(origin.y, 0);
  return f32(max(rows, 0) * max(cols, 0));
}

// The output windows whose tap (kh, kw) lands on input (h, w), as a per-axis output coordinate
// or -1 when none does.
fn window_at(coord: u32, pad: i32, tap: u32, stride: u32, out_size: u32) -> i32 {
  let t = i32(coord) + pad - i32(tap);
  if (t < 0 || u32(t) % stride != 0u || u32(t) / stride >= out_size) { return -1; }
  return t / i32(stride);
}
