// depthwise_conv2d (NHWC input, HWCM filters, output channel c * M + m): one invocation per
// output pixel and unit of output channels, a vec4 of them where M == 1 and C is whole vec4s
// (every model layer here), else one channel. The filter of output channel u at tap t is
// w[t * out_units + u] in either case, so the filter reads of neighbouring invocations are
// contiguous; input channel u / M. Taps over the padding multiply a zero in (0 * Inf is NaN,
// as numpy's padded reference); a layer's 9 or 25 taps need no shared memory, and the filter
// gradient (ops.py: a whole gradient image as the filter, a tiny output) runs on the same loop.
{{COMMON}}

alias T = {{T}};

@group(0) @binding(0) var<storage, read> x: array<T>;
@group(0) @binding(1) var<storage, read> w: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;

struct Params {
  invocations: u32, in_h: u32, in_w: u32, in_units: u32,
  out_h: u32, out_w: u32, out_units: u32, multiplier: u32,
  k_h: u32, k_w: u32, stride_h: u32, stride_w: u32,
  pad_top: i32, pad_left: i32,
}
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = workgroup_linear(wid, nwg) * 64u + lid;
  if (i >= p.invocations) { return; }
  let u = i % p.out_units;
  let pixel = i / p.out_units;
  let ow = pixel % p.out_w;
  let oh = (pixel / p.out_w) % p.out_h;
  let n = pixel / (p.out_w * p.out_h);
  let top = i32(oh * p.stride_h) - p.pad_top;
  let left = i32(ow * p.stride_w) - p.pad_left;
  let channel = u / p.multiplier;
  var acc = T(0.0);
  var tap = 0u;
  for (var kh = 0u; kh < p.k_h; kh++) {
    let ih = top + i32(kh);
    let row_inside = ih >= 0 && ih < i32(p.in_h);
    let row = (n * p.in_h + u32(ih)) * p.in_w;
    for (var kw = 0u; kw < p.k_w; kw++) {
      let iw = left + i32(kw);
      var xv = T(0.0);
      if (row_inside && iw >= 0 && iw < i32(p.in_w)) {
        xv = x[(row + u32(iw)) * p.in_units + channel];
      }
      acc = fma(xv, w[tap * p.out_units + u], acc);
      tap++;
    }
  }
  y[i] = acc;
}
