// A convolution's input as the transposed patch matrix of its filter gradient (see
// rewrites.filter_gradient_as_product): out (P, R, Q / P), R = KH * KW * CI filter rows (then
// zero rows up to a multiple of 4), Q = N * OH * OW output positions cut into P parts. Element
// (p, r, q) is the input the filter row r = (kh * KW + kw) * CI + ci meets at position
// p * Q / P + q, 0 in the padding. A texel holds 4 consecutive positions, which share n and oh
// (OW is a multiple of 4); the input is RGBA.
uniform ivec4 u_x;       // input N, H, W, CI
uniform ivec4 u_w;       // filter KH, KW, CI, CO
uniform ivec2 u_o;       // conv output OH, OW
uniform ivec2 u_stride;
uniform ivec2 u_pad;     // top, left
uniform int u_rows;      // R with the zero rows
uniform int u_cols;      // positions per part

// Input element e (flat NHWC index), or 0 where the column iw lies in the padding.
float tap_input(int e, int iw) {
  bool inside = iw >= 0 && iw < u_x.z;
  e = inside ? e : 0;
  return inside ? component(texelFetch(u_x0, texel_at(e / 4, u_l0.x), 0), e % 4) : 0.0;
}

vec4 value4(int texel) {
  int q4n = u_cols / 4;
  int row = texel / q4n;  // p * R + r
  int part = row / u_rows;
  int r = row - part * u_rows;
  if (r >= u_w.x * u_w.y * u_w.z) return vec4(0.0);
  int ci = r % u_w.z;
  int tap = r / u_w.z;
  int kw = tap % u_w.y;
  int kh = tap / u_w.y;
  int q = part * u_cols + (texel - row * q4n) * 4;
  int ow = q % u_o.y;
  int t = q / u_o.y;
  int oh = t % u_o.x;
  int n = t / u_o.x;
  int ih = oh * u_stride.x - u_pad.x + kh;
  if (ih < 0 || ih >= u_x.y) return vec4(0.0);
  int iw = ow * u_stride.y - u_pad.y + kw;
  int e = ((n * u_x.y + ih) * u_x.z + iw) * u_x.w + ci;
  int step = u_stride.y * u_x.w;
  return vec4(tap_input(e, iw), tap_input(e + step, iw + u_stride.y),
              tap_input(e + 2 * step, iw + 2 * u_stride.y),
              tap_input(e + 3 * step, iw + 3 * u_stride.y));
}
