// Vector pooling (NHWC, channels a multiple of 4): each fragment handles 4 channels of one pixel,
// a whole RGBA texel, so a window tap is one texel fetch. Same rules as pool.frag: padding never
// counts, max keeps the first maximum (numpy's argmax), avg divides by the real inputs.
uniform ivec4 u_x;       // pooled input N, H, W, C
uniform ivec2 u_o;       // pooled output OH, OW
uniform ivec2 u_k;       // window
uniform ivec2 u_stride;
uniform ivec2 u_pad;     // top, left

int window_count(int oh, int ow) {
  int top = oh * u_stride.x - u_pad.x;
  int left = ow * u_stride.y - u_pad.y;
  int rows = min(top + u_k.x, u_x.y) - max(top, 0);
  int cols = min(left + u_k.y, u_x.z) - max(left, 0);
  return rows * cols;
}

// The input texel of pixel (n, ih, iw), channels 4 * c4 .. 4 * c4 + 3.
vec4 input_texel(int n, int ih, int iw, int c4) {
  int c4n = u_x.w / 4;
  return texelFetch(u_x0, texel_at(((n * u_x.y + ih) * u_x.z + iw) * c4n + c4, u_l0.x), 0);
}

#if defined(POOL_MAX) || defined(POOL_AVG)
vec4 value4(int texel) {
  int c4n = u_x.w / 4;
  int c4 = texel % c4n;
  int t = texel / c4n;
  int ow = t % u_o.y;
  t /= u_o.y;
  int oh = t % u_o.x;
  int n = t / u_o.x;
#if defined(POOL_MAX)
  vec4 acc = vec4(-INF);
#else
  vec4 acc = vec4(0.0);
#endif
  for (int kh = 0; kh < u_k.x; ++kh) {
    int ih = oh * u_stride.x - u_pad.x + kh;
    if (ih < 0 || ih >= u_x.y) continue;
    for (int kw = 0; kw < u_k.y; ++kw) {
      int iw = ow * u_stride.y - u_pad.y + kw;
      if (iw < 0 || iw >= u_x.z) continue;
      vec4 v = input_texel(n, ih, iw, c4);
#if defined(POOL_MAX)
      acc = max_nan4(acc, v);  // a NaN in the window wins, as in numpy
#else
      acc += v;
#endif
    }
  }
#if defined(POOL_MAX)
  return acc;
#else
  return acc / float(window_count(oh, ow));
#endif
}
#else
#if defined(POOL_MAX_GRAD)
// Per channel, the position ih * W + iw of the window's first maximum (-1 before any input).
vec4 window_argmax(int n, int oh, int ow, int c4) {
  vec4 best = vec4(-INF);
  vec4 where_ = vec4(-1.0);
  for (int kh = 0; kh < u_k.x; ++kh) {
    int ih = oh * u_stride.x - u_pad.x + kh;
    if (ih < 0 || ih >= u_x.y) continue;
    for (int kw = 0; kw < u_k.y; ++kw) {
      int iw = ow * u_stride.y - u_pad.y + kw;
      if (iw < 0 || iw >= u_x.z) continue;
      vec4 v = input_texel(n, ih, iw, c4);
      bvec4 take = greaterThan(vec4(greaterThan(v, best)) + vec4(lessThan(where_, vec4(0.0))),
                               vec4(0.0));
      best = mix(best, v, take);
      where_ = mix(where_, vec4(float(ih * u_x.z + iw)), take);
    }
  }
  return where_;
}
#endif

// Gradients: each input texel gathers from the windows that contain its pixel.
vec4 value4(int texel) {
  int c4n = u_x.w / 4;
  int c4 = texel % c4n;
  int t = texel / c4n;
  int iw = t % u_x.z;
  t /= u_x.z;
  int ih = t % u_x.y;
  int n = t / u_x.y;
  int wg = GRAD_WIDTH;
#if defined(POOL_DISJOINT)
  // Windows that tile the input (stride = window): the pixel's one window is found directly,
  // not by looping over every window position (whose steps a SIMD quad runs for all its lanes).
  int oh = (ih + u_pad.x) / u_stride.x;
  int ow = (iw + u_pad.y) / u_stride.y;
  if (oh >= u_o.x || ow >= u_o.y) return vec4(0.0);
  vec4 g = texelFetch(GRAD, texel_at(((n * u_o.x + oh) * u_o.y + ow) * c4n + c4, wg), 0);
  bvec4 mine = equal(window_argmax(n, oh, ow, c4), vec4(float(ih * u_x.z + iw)));
  return mix(vec4(0.0), g, mine);
#else
  vec4 acc = vec4(0.0);
  for (int kh = 0; kh < u_k.x; ++kh) {
    int y = ih + u_pad.x - kh;
    if (y < 0 || y % u_stride.x != 0 || y / u_stride.x >= u_o.x) continue;
    int oh = y / u_stride.x;
    for (int kw = 0; kw < u_k.y; ++kw) {
      int x = iw + u_pad.y - kw;
      if (x < 0 || x % u_stride.y != 0 || x / u_stride.y >= u_o.y) continue;
      int ow = x / u_stride.y;
      vec4 g = texelFetch(GRAD, texel_at(((n * u_o.x + oh) * u_o.y + ow) * c4n + c4, wg), 0);
#if defined(POOL_MAX_GRAD)
      bvec4 mine = equal(window_argmax(n, oh, ow, c4), vec4(float(ih * u_x.z + iw)));
      acc += mix(vec4(0.0), g, mine);
#else
      acc += g / float(window_count(oh, ow));
#endif
    }
  }
  return acc;
#endif
}
#endif
