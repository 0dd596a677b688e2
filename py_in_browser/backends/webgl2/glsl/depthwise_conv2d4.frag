// Vector depthwise conv2d (NHWC input with channels a multiple of 4, HWCM filters with M == 1):
// each fragment computes out[n, oh, ow, c..c+3], one RGBA texel, from one input texel and the 4
// filter elements of each tap: one texel where the filter is RGBA-packed (4 channels of one
// tap, since C is a multiple of 4), else 4 R texels (R_FILTER: compiled in, as SwiftShader
// runs both sides of a branch on a uniform). Cursors step through both textures, so a
// tap costs its fetches and no integer division (one texel_at per window row). Padded taps
// multiply a zero in (0 * Inf is NaN, as numpy); the filter gradient (ops.py: a whole gradient
// image as the filter, a tiny output) runs on the same loop.
uniform ivec4 u_x;       // input N, H, W, C
uniform ivec4 u_w;       // filter KH, KW, C, 1
uniform ivec2 u_o;       // output OH, OW
uniform ivec2 u_stride;
uniform ivec2 u_pad;     // top, left

vec4 value4(int texel) {
  int c4n = u_x.w / 4;
  int c4 = texel % c4n;
  int t = texel / c4n;
  int ow = t % u_o.y;
  t /= u_o.y;
  int oh = t % u_o.x;
  int n = t / u_o.x;
  int wx = u_l0.x;
  int ww = u_l1.x;
  // Filter elements of these channels at tap (kh, kw): texel tap * C / 4 + c4 (RGBA), or the
  // R texels from 4 * (tap * C / 4 + c4) on; either way a step of C elements per tap.
#ifdef R_FILTER
  ivec2 pw = texel_at(4 * c4, ww);
  ivec2 tap_step = texel_step(u_x.w, ww);
  ivec2 one = ivec2(1, 0);
#else
  ivec2 pw = texel_at(c4, ww);
  ivec2 tap_step = texel_step(c4n, ww);
#endif
  ivec2 pixel_step = texel_step(c4n, wx);
  int left = ow * u_stride.y - u_pad.y;
  vec4 acc = vec4(0.0);
  for (int kh = 0; kh < u_w.x; ++kh) {
    int ih = oh * u_stride.x - u_pad.x + kh;
    bool row_inside = ih >= 0 && ih < u_x.y;
    // The input texel of (n, ih, max(left, 0)), then one pixel further per tap on the input.
    int first = ((n * u_x.y + max(ih, 0)) * u_x.z + max(left, 0)) * c4n + c4;
    ivec2 px = texel_at(first, wx);
    for (int kw = 0; kw < u_w.y; ++kw) {
      int iw = left + kw;
      vec4 xv = vec4(0.0);
      if (row_inside && iw >= 0 && iw < u_x.z) {
        xv = texelFetch(u_x0, px, 0);
        px = advance(px, pixel_step, wx);
      }
#ifdef R_FILTER
      vec4 wv;
      ivec2 q = pw;
      wv.x = texelFetch(u_x1, q, 0).r;
      q = advance(q, one, ww);
      wv.y = texelFetch(u_x1, q, 0).r;
      q = advance(q, one, ww);
      wv.z = texelFetch(u_x1, q, 0).r;
      q = advance(q, one, ww);
      wv.w = texelFetch(u_x1, q, 0).r;
#else
      vec4 wv = texelFetch(u_x1, pw, 0);
#endif
      pw = advance(pw, tap_step, ww);
      acc += xv * wv;
    }
  }
  return acc;
}
