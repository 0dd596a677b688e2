// Vector gradient of conv2d for its filters: each fragment computes dw[kh, kw, ci, co..co+3]
// (one RGBA texel), summing input * gradient over batch and space; the gradient is read a texel
// (4 output channels) at a time. The valid output columns of the tap are found once, so the
// inner loop steps two cursors with no bounds checks. The sum may be split over the N * OH
// gradient rows: with u_rows < N * OH, the output holds one filter-shaped partial sum per
// u_rows rows, one after another (rewrites.split_filter_gradient sums them). X_VEC: input
// channels are a multiple of 4 and the input element is one component of a texel cursor;
// otherwise one element per step.
uniform ivec4 u_x;       // input N, H, W, CI
uniform ivec4 u_w;       // filter KH, KW, CI, CO (= this kernel's output)
uniform ivec2 u_o;       // conv output OH, OW
uniform ivec2 u_stride;
uniform ivec2 u_pad;     // top, left
uniform int u_rows;      // gradient rows (n, oh) per partial sum

vec4 value4(int texel) {
  int co4n = u_w.w / 4;
  int per_part = u_w.x * u_w.y * u_w.z * co4n;  // texels of one filter
  int row0 = (texel / per_part) * u_rows;
  int row1 = min(row0 + u_rows, u_x.x * u_o.x);
  texel %= per_part;
  int co4 = texel % co4n;
  int r = texel / co4n;
  int ci = r % u_w.z;
  int tap = r / u_w.z;
  int kw = tap % u_w.y;
  int kh = tap / u_w.y;
  int wx = u_l0.x;
  int wg = u_l1.x;
  ivec2 sg = texel_step(co4n, wg);
  // Output columns whose input column ow * stride - pad + kw lies in [0, W).
  int low = u_pad.y - kw;
  int ow0 = low <= 0 ? 0 : (low + u_stride.y - 1) / u_stride.y;
  int high = u_x.z - 1 + u_pad.y - kw;
  int ow1 = high < 0 ? 0 : min(u_o.y, high / u_stride.y + 1);
#ifdef X_VEC
  int c = ci % 4;
  ivec2 sx = texel_step(u_stride.y * u_x.w / 4, wx);
#endif
  vec4 acc = vec4(0.0);
  if (ow1 <= ow0) return acc;
  for (int row = row0; row < row1; ++row) {
    int n = row / u_o.x;
    int oh = row % u_o.x;
    int ih = oh * u_stride.x - u_pad.x + kh;
    if (ih < 0 || ih >= u_x.y) continue;
    int xi = ((n * u_x.y + ih) * u_x.z + ow0 * u_stride.y - u_pad.y + kw) * u_x.w + ci;
    ivec2 pg = texel_at(((n * u_o.x + oh) * u_o.y + ow0) * co4n + co4, wg);
#ifdef X_VEC
    ivec2 px = texel_at(xi / 4, wx);
    for (int ow = ow0; ow < ow1; ++ow) {
      acc += component(texelFetch(u_x0, px, 0), c) * texelFetch(u_x1, pg, 0);
      px = advance(px, sx, wx);
      pg = advance(pg, sg, wg);
    }
#else
    int xs = u_stride.y * u_x.w;
    for (int ow = ow0; ow < ow1; ++ow) {
      acc += x0(xi) * texelFetch(u_x1, pg, 0);
      xi += xs;
      pg = advance(pg, sg, wg);
    }
#endif
  }
  return acc;
}
