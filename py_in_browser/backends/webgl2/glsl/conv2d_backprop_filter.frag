// Gradient of conv2d for its filters: each filter tap sums input * gradient over batch and space.
uniform ivec4 u_x;       // input N, H, W, CI
uniform ivec4 u_w;       // filter KH, KW, CI, CO (= this kernel's output)
uniform ivec2 u_o;       // conv output OH, OW
uniform ivec2 u_stride;
uniform ivec2 u_pad;     // top, left

float value(int i) {
  int co = i % u_w.w;
  int t = i / u_w.w;
  int ci = t % u_w.z;
  t /= u_w.z;
  int kw = t % u_w.y;
  int kh = t / u_w.y;
  float acc = 0.0;
  for (int n = 0; n < u_x.x; ++n) {
    for (int oh = 0; oh < u_o.x; ++oh) {
      int ih = oh * u_stride.x - u_pad.x + kh;
      if (ih < 0 || ih >= u_x.y) continue;
      for (int ow = 0; ow < u_o.y; ++ow) {
        int iw = ow * u_stride.y - u_pad.y + kw;
        if (iw < 0 || iw >= u_x.z) continue;
        acc += x0(((n * u_x.y + ih) * u_x.z + iw) * u_x.w + ci) *
               x1(((n * u_o.x + oh) * u_o.y + ow) * u_w.w + co);
      }
    }
  }
  return acc;
}
