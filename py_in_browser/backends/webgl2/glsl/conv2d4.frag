// Vector conv2d (NHWC input, HWIO filters): each fragment computes out[n, oh, ow, co..co+3], one
// RGBA texel, reading filter rows a texel (4 output channels) at a time. X_VEC: input channels
// are a multiple of 4 and read a texel at a time too; otherwise one input element per channel.
uniform ivec4 u_x;       // input N, H, W, C
uniform ivec4 u_w;       // filter KH, KW, CI, CO
uniform ivec2 u_o;       // output OH, OW
uniform ivec2 u_stride;
uniform ivec2 u_pad;     // top, left

vec4 value4(int texel) {
  int co4n = u_w.w / 4;
  int co4 = texel % co4n;
  int pix = texel / co4n;
  int ow = pix % u_o.y;
  int t = pix / u_o.y;
  int oh = t % u_o.x;
  int n = t / u_o.x;
  int wx = u_l0.x;
  int ww = u_l1.x;
  ivec2 sw = texel_step(co4n, ww);
  vec4 acc = vec4(0.0);
  for (int kh = 0; kh < u_w.x; ++kh) {
    int ih = oh * u_stride.x - u_pad.x + kh;
    if (ih < 0 || ih >= u_x.y) continue;
    for (int kw = 0; kw < u_w.y; ++kw) {
      int iw = ow * u_stride.y - u_pad.y + kw;
      if (iw < 0 || iw >= u_x.z) continue;
      int xb = ((n * u_x.y + ih) * u_x.z + iw) * u_x.w;
      ivec2 pw = texel_at((kh * u_w.y + kw) * u_w.z * co4n + co4, ww);
#ifdef X_VEC
      ivec2 px = texel_at(xb / 4, wx);
      for (int ci = 0; ci < u_w.z; ci += 4) {
        vec4 xv = texelFetch(u_x0, px, 0);
        px = advance(px, ivec2(1, 0), wx);
        vec4 w0 = texelFetch(u_x1, pw, 0);
        pw = advance(pw, sw, ww);
        vec4 w1 = texelFetch(u_x1, pw, 0);
        pw = advance(pw, sw, ww);
        vec4 w2 = texelFetch(u_x1, pw, 0);
        pw = advance(pw, sw, ww);
        vec4 w3 = texelFetch(u_x1, pw, 0);
        pw = advance(pw, sw, ww);
        acc += xv.x * w0 + xv.y * w1 + xv.z * w2 + xv.w * w3;
      }
#else
      for (int ci = 0; ci < u_w.z; ++ci) {
        acc += x0(xb + ci) * texelFetch(u_x1, pw, 0);
        pw = advance(pw, sw, ww);
      }
#endif
    }
  }
  return acc;
}
