// Pooling forward (max / avg) and its gradients, NHWC. Padding never counts: max ignores it and
// avg divides by the number of real inputs in the window (TensorFlow's rule).
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

#if defined(POOL_MAX_GRAD)
// Flat input index of the first maximum of window (n, oh, ow, c), as numpy's argmax picks it.
int window_argmax(int n, int oh, int ow, int c) {
  float best = -INF;
  int where_ = -1;
  for (int kh = 0; kh < u_k.x; ++kh) {
    int ih = oh * u_stride.x - u_pad.x + kh;
    if (ih < 0 || ih >= u_x.y) continue;
    for (int kw = 0; kw < u_k.y; ++kw) {
      int iw = ow * u_stride.y - u_pad.y + kw;
      if (iw < 0 || iw >= u_x.z) continue;
      int index = ((n * u_x.y + ih) * u_x.z + iw) * u_x.w + c;
      float v = x0(index);
      if (where_ < 0 || v > best) {
        best = v;
        where_ = index;
      }
    }
  }
  return where_;
}
#endif

#if defined(POOL_MAX) || defined(POOL_AVG)
float value(int i) {
  int c = i % u_x.w;
  int t = i / u_x.w;
  int ow = t % u_o.y;
  t /= u_o.y;
  int oh = t % u_o.x;
  int n = t / u_o.x;
#if defined(POOL_MAX)
  float acc = -INF;
#else
  float acc = 0.0;
#endif
  for (int kh = 0; kh < u_k.x; ++kh) {
    int ih = oh * u_stride.x - u_pad.x + kh;
    if (ih < 0 || ih >= u_x.y) continue;
    for (int kw = 0; kw < u_k.y; ++kw) {
      int iw = ow * u_stride.y - u_pad.y + kw;
      if (iw < 0 || iw >= u_x.z) continue;
      float v = x0(((n * u_x.y + ih) * u_x.z + iw) * u_x.w + c);
#if defined(POOL_MAX)
      acc = max_nan(acc, v);  // a NaN in the window wins, as in numpy
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
// Gradients: each input pixel gathers from the windows that contain it.
float value(int i) {
  int c = i % u_x.w;
  int t = i / u_x.w;
  int iw = t % u_x.z;
  t /= u_x.z;
  int ih = t % u_x.y;
  int n = t / u_x.y;
  float acc = 0.0;
  for (int kh = 0; kh < u_k.x; ++kh) {
    int y = ih + u_pad.x - kh;
    if (y < 0 || y % u_stride.x != 0 || y / u_stride.x >= u_o.x) continue;
    int oh = y / u_stride.x;
    for (int kw = 0; kw < u_k.y; ++kw) {
      int x = iw + u_pad.y - kw;
      if (x < 0 || x % u_stride.y != 0 || x / u_stride.y >= u_o.y) continue;
      int ow = x / u_stride.y;
#if defined(POOL_MAX_GRAD)
      if (window_argmax(n, oh, ow, c) == i) acc += GRAD(((n * u_o.x + oh) * u_o.y + ow) * u_x.w + c);
#else
      acc += GRAD(((n * u_o.x + oh) * u_o.y + ow) * u_x.w + c) / float(window_count(oh, ow));
#endif
    }
  }
  return acc;
}
#endif
