// conv2d_backprop_filter on a software adapter (filter_grad.py): each invocation sums, over one
// slice of the output pixels, the products of CHANNELS input channels at one filter tap with
// VECS vec4s of the output gradient's channels; the slices' partial filters are summed after
// (a reduction dispatch) when there are several. Taps in the padding multiply a zero in, as
// the im2col product does (0 * Inf is NaN there too). No workgroup memory, no barrier: see
// gemm_direct.wgsl for why on software adapters.
{{COMMON}}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> gy: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> dw: array<vec4<f32>>;

struct Params {
  invocations: u32, vec_groups: u32, channel_groups: u32, taps: u32,
  pixels: u32, per_split: u32, in_h: u32, in_w: u32,
  in_c: u32, out_h: u32, out_w: u32, out_c4: u32,
  k_w: u32, stride_h: u32, stride_w: u32, pad_top: i32,
  pad_left: i32,
}
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = workgroup_linear(wid, nwg) * 64u + lid;
  if (i >= p.invocations) { return; }
  let v0 = (i % p.vec_groups) * {{VECS}}u;
  let rest = i / p.vec_groups;
  let c0 = (rest % p.channel_groups) * {{CHANNELS}}u;
  let tap = (rest / p.channel_groups) % p.taps;
  let split = rest / (p.channel_groups * p.taps);
  let kh = tap / p.k_w;
  let kw = tap % p.k_w;
  let begin = split * p.per_split;
  let end = min(p.pixels, begin + p.per_split);
  // Channels past the last load clamped (in bounds); their sums are not stored.
  let last_x = arrayLength(&x) - 1u;
  let last_g = arrayLength(&gy) - 1u;
{{DECLARE}}
  for (var q = begin; q < end; q++) {
    let ow = q % p.out_w;
    let oh = (q / p.out_w) % p.out_h;
    let n = q / (p.out_w * p.out_h);
    let ih = i32(oh * p.stride_h + kh) - p.pad_top;
    let iw = i32(ow * p.stride_w + kw) - p.pad_left;
    let inside = ih >= 0 && ih < i32(p.in_h) && iw >= 0 && iw < i32(p.in_w);
    let x_at = select(0u, ((n * p.in_h + u32(ih)) * p.in_w + u32(iw)) * p.in_c, inside) + c0;
    let g_at = q * p.out_c4 + v0;
{{PIXEL}}
  }
  let first = (split * p.taps * p.in_c + tap * p.in_c + c0) * p.out_c4 + v0;
{{STORE}}
}
