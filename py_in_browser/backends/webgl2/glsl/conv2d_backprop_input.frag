// Gradient of conv2d for its input: each input pixel gathers the output pixels whose window
// covered it (a gather, so no atomics or scatter are needed).
uniform ivec4 u_x;       // input (= this kernel's output) N, H, W, CI
uniform ivec4 u_w;       // filter KH, KW, CI, CO
uniform ivec2 u_o;       // conv output OH, OW (= the gradient's spatial dims)
uniform ivec2 u_stride;
uniform ivec2 u_pad;     // top, left

float value(int i) {
  int ci = i % u_x.w;
  int t = i / u_x.w;
  int iw = t % u_x.z;
  t /= u_x.z;
  int ih = t % u_x.y;
  int n = t / u_x.y;
  float acc = 0.0;
  for (int kh = 0; kh < u_w.x; ++kh) {
    int y = ih + u_pad.x - kh;
    if (y < 0 || y % u_stride.x != 0 || y / u_stride.x >= u_o.x) continue;
    for (int kw = 0; kw < u_w.y; ++kw) {
      int x = iw + u_pad.y - kw;
      if (x < 0 || x % u_stride.y != 0 || x / u_stride.y >= u_o.y) continue;
      int gb = ((n * u_o.x + y / u_stride.x) * u_o.y + x / u_stride.y) * u_w.w;
      int wb = ((kh * u_w.y + kw) * u_w.z + ci) * u_w.w;
      for (int co = 0; co < u_w.w; ++co) acc += x0(gb + co) * x1(wb + co);
    }
  }
  return acc;
}
