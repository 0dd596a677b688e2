// A convolution's filter turned for its input gradient (see rewrites.input_gradient_as_conv):
// out[kh, kw, co, ci] = w[KH - 1 - kh, KW - 1 - kw, ci, co].
uniform ivec4 u_w;  // the filter's KH, KW, CI, CO

float value(int i) {
  int ci = i % u_w.z;
  int t = i / u_w.z;
  int co = t % u_w.w;
  t /= u_w.w;
  int kw = t % u_w.y;
  int kh = t / u_w.y;
  return x0((((u_w.x - 1 - kh) * u_w.y + u_w.y - 1 - kw) * u_w.z + ci) * u_w.w + co);
}
