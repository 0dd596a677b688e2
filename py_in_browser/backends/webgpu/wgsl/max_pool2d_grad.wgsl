// max_pool2d_grad: one invocation per input element gathers the gradient of every output window
// whose first maximum (row-major over the window, padding as -inf, NaN first: numpy's argmax)
// is this element, as TensorFlow and PyTorch route it.
{{POOL_COMMON}}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> g: array<f32>;
@group(0) @binding(2) var<storage, read_write> dx: array<f32>;

fn padded_value(n: u32, h: i32, w: i32, ch: u32) -> f32 {
  if (!in_image(h, w)) { return f32_neg_inf(); }
  return x[input_index(n, u32(h), u32(w), ch)];
}

// Window tap index (kh * k_w + kw) of the first maximum of output window (oh, ow).
fn first_max_tap(n: u32, oh: u32, ow: u32, ch: u32) -> u32 {
  let origin = window_origin(oh, ow);
  var best = padded_value(n, origin.x, origin.y, ch);
  var best_tap = 0u;
  for (var tap = 1u; tap < p.k_h * p.k_w; tap++) {
    let value = padded_value(n, origin.x + i32(tap / p.k_w), origin.y + i32(tap % p.k_w), ch);
    if (!f32_is_nan(best) && (value > best || f32_is_nan(value))) {
      best = value;
      best_tap = tap;
    }
  }
  return best_tap;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = invocation_index(wid, nwg, lid);
  if (i >= p.count) { return; }
  let at = nhwc_position(i, p.in_h, p.in_w);
  let n = at.x;
  let h = at.y;
  let w = at.z;
  let ch = at.w;
  var total = 0.0;
  for (var kh = 0u; kh < p.k_h; kh++) {
    let oh = window_at(h, p.pad_top, kh, p.stride_h, p.out_h);
    for (var kw = 0u; kw < p.k_w; kw++) {
      let ow = window_at(w, p.pad_left, kw, p.stride_w, p.out_w);
      if (oh >= 0 && ow >= 0 && first_max_tap(n, u32(oh), u32(ow), ch) == kh * p.k_w + kw) {
        total += g[output_index(n, u32(oh), u32(ow), ch)];
      }
    }
  }
  dx[i] = total;
}
