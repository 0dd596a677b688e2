// NHWC depthwise conv2d with HWCM filters: out[n, oh, ow, c * M + m] = sum over the window of
// x[n, ih, iw, c] * w[kh, kw, c, m]. Taps over the padding multiply a zero in, so an infinite
// filter there gives NaN, as numpy's padded reference does.
uniform ivec4 u_x;       // input N, H, W, C
uniform ivec4 u_w;       // filter KH, KW, C, M
uniform ivec2 u_o;       // output OH, OW
uniform ivec2 u_stride;
uniform ivec2 u_pad;     // top, left

float value(int i) {
  int cm = u_w.z * u_w.w;
  int co = i % cm;
  int t = i / cm;
  int ow = t % u_o.y;
  t /= u_o.y;
  int oh = t % u_o.x;
  int n = t / u_o.x;
  int c = co / u_w.w;
  float acc = 0.0;
  int tap = co;  // filter element of output channel co at tap (kh, kw): tap * C * M + co
  for (int kh = 0; kh < u_w.x; ++kh) {
    int ih = oh * u_stride.x - u_pad.x + kh;
    bool row_inside = ih >= 0 && ih < u_x.y;
    int row = (n * u_x.y + ih) * u_x.z;
    for (int kw = 0; kw < u_w.y; ++kw) {
      int iw = ow * u_stride.y - u_pad.y + kw;
      float xv = row_inside && iw >= 0 && iw < u_x.z ? x0((row + iw) * u_x.w + c) : 0.0;
      acc += xv * x1(tap);
      tap += cm;
    }
  }
  return acc;
}
