// NHWC conv2d with HWIO filters: out[n, oh, ow, co] = sum over the window and input channels.
uniform ivec4 u_x;       // input N, H, W, C
uniform ivec4 u_w;       // filter KH, KW, CI, CO
uniform ivec2 u_o;       // output OH, OW
uniform ivec2 u_stride;
uniform ivec2 u_pad;     // top, left

float value(int i) {
  int co = i % u_w.w;
  int t = i / u_w.w;
  int ow = t % u_o.y;
  t /= u_o.y;
  int oh = t % u_o.x;
  int n = t / u_o.x;
  float acc = 0.0;
  for (int kh = 0; kh < u_w.x; ++kh) {
    int ih = oh * u_stride.x - u_pad.x + kh;
    if (ih < 0 || ih >= u_x.y) continue;
    for (int kw = 0; kw < u_w.y; ++kw) {
      int iw = ow * u_stride.y - u_pad.y + kw;
      if (iw < 0 || iw >= u_x.z) continue;
      int xb = ((n * u_x.y + ih) * u_x.z + iw) * u_x.w;
      int wb = (kh * u_w.y + kw) * u_w.z * u_w.w + co;
      for (int ci = 0; ci < u_w.z; ++ci) acc += x0(xb + ci) * x1(wb + ci * u_w.w);
    }
  }
  return acc;
}
