// Vector depthwise conv2d (NHWC input with channels a multiple of 4, HWCM filters with M == 1):
// each fragment computes out[n, oh, ow, c..c+3], one RGBA texel, from one input texel and 4
// filter elements per tap: the filter's texel where it is RGBA-packed (4 channels of one tap,
// since C is a multiple of 4), else its 4 elements. Padded taps multiply a zero in (0 * Inf is
// NaN, as numpy); the filter gradient (ops.py: a whole gradient image as the filter, a tiny
// output) runs on the same loop.
uniform ivec4 u_x;       // input N, H, W, C
uniform ivec4 u_w;       // filter KH, KW, C, 1
uniform ivec2 u_o;       // output OH, OW
uniform ivec2 u_stride;
uniform ivec2 u_pad;     // top, left

vec4 filter4(int t) {
  if (u_l1.y == 4) return texelFetch(u_x1, texel_at(t, u_l1.x), 0);
  int i = t * 4;
  return vec4(x1(i), x1(i + 1), x1(i + 2), x1(i + 3));
}

vec4 value4(int texel) {
  int c4n = u_x.w / 4;
  int c4 = texel % c4n;
  int t = texel / c4n;
  int ow = t % u_o.y;
  t /= u_o.y;
  int oh = t % u_o.x;
  int n = t / u_o.x;
  vec4 acc = vec4(0.0);
  int tap = c4;  // filter texel of these channels at tap (kh, kw): tap * C / 4 + c4
  for (int kh = 0; kh < u_w.x; ++kh) {
    int ih = oh * u_stride.x - u_pad.x + kh;
    bool row_inside = ih >= 0 && ih < u_x.y;
    int row = (n * u_x.y + ih) * u_x.z;
    for (int kw = 0; kw < u_w.y; ++kw) {
      int iw = ow * u_stride.y - u_pad.y + kw;
      vec4 xv = vec4(0.0);
      if (row_inside && iw >= 0 && iw < u_x.z) {
        xv = texelFetch(u_x0, texel_at((row + iw) * c4n + c4, u_l0.x), 0);
      }
      acc += xv * filter4(tap);
      tap += c4n;
    }
  }
  return acc;
}
