// Vector gradient of conv2d for its input: each fragment computes dx[n, ih, iw, ci..ci+3] (one
// RGBA texel) by gathering the output pixels whose window covered it, 4 output channels of the
// gradient and of 4 filter rows per step (input and output channels are multiples of 4).
uniform ivec4 u_x;       // input (= this kernel's output) N, H, W, CI
uniform ivec4 u_w;       // filter KH, KW, CI, CO
uniform ivec2 u_o;       // conv output OH, OW (= the gradient's spatial dims)
uniform ivec2 u_stride;
uniform ivec2 u_pad;     // top, left

vec4 value4(int texel) {
  int ci4n = u_x.w / 4;
  int co4n = u_w.w / 4;
  int ci4 = texel % ci4n;
  int pix = texel / ci4n;
  int iw = pix % u_x.z;
  int t = pix / u_x.z;
  int ih = t % u_x.y;
  int n = t / u_x.y;
  int wg = u_l0.x;
  int ww = u_l1.x;
  ivec2 one = ivec2(1, 0);
  vec4 acc = vec4(0.0);
  for (int kh = 0; kh < u_w.x; ++kh) {
    int y = ih + u_pad.x - kh;
    if (y < 0 || y % u_stride.x != 0 || y / u_stride.x >= u_o.x) continue;
    for (int kw = 0; kw < u_w.y; ++kw) {
      int x = iw + u_pad.y - kw;
      if (x < 0 || x % u_stride.y != 0 || x / u_stride.y >= u_o.y) continue;
      ivec2 pg = texel_at(((n * u_o.x + y / u_stride.x) * u_o.y + x / u_stride.y) * co4n, wg);
      int wrow = ((kh * u_w.y + kw) * u_w.z + ci4 * 4) * co4n;
      ivec2 p0 = texel_at(wrow, ww);
      ivec2 p1 = texel_at(wrow + co4n, ww);
      ivec2 p2 = texel_at(wrow + 2 * co4n, ww);
      ivec2 p3 = texel_at(wrow + 3 * co4n, ww);
      for (int co = 0; co < co4n; ++co) {
        vec4 g = texelFetch(u_x0, pg, 0);
        pg = advance(pg, one, wg);
        acc += vec4(dot(g, texelFetch(u_x1, p0, 0)), dot(g, texelFetch(u_x1, p1, 0)),
                    dot(g, texelFetch(u_x1, p2, 0)), dot(g, texelFetch(u_x1, p3, 0)));
        p0 = advance(p0, one, ww);
        p1 = advance(p1, one, ww);
        p2 = advance(p2, one, ww);
        p3 = advance(p3, one, ww);
      }
    }
  }
  return acc;
}
