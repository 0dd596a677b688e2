// Max pooling's gradient routing (pool2d_grad.wgsl): the window tap that holds the maximum.
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
