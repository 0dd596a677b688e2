// reduce_sum, reduce_max and argmax: each output element walks the reduced coordinates.
// Kept and reduced axes are split into two index spaces of up to 6 dims each.
uniform int u_kept_shape[6];
uniform int u_kept_stride[6];
uniform int u_red_shape[6];
uniform int u_red_stride[6];
uniform int u_red_count;
uniform int u_kept_rank;  // dims in use (the last ones; Python merges contiguous dims)
uniform int u_red_rank;

float value(int i) {
  int base = 0;
  for (int d = 5; d >= 6 - u_kept_rank; --d) {
    base += (i % u_kept_shape[d]) * u_kept_stride[d];
    i /= u_kept_shape[d];
  }
#if defined(REDUCE_SUM)
  float acc = 0.0;
#else
  float acc = -INF;
  int best = 0;
#endif
  for (int r = 0; r < u_red_count; ++r) {
    int offset = 0;
    int q = r;
    for (int d = 5; d >= 6 - u_red_rank; --d) {
      offset += (q % u_red_shape[d]) * u_red_stride[d];
      q /= u_red_shape[d];
    }
    float v = x0(base + offset);
#if defined(REDUCE_SUM)
    acc += v;
#else
    // The first maximum wins, as in numpy.
    if (v > acc || (r == 0)) {
      acc = v;
      best = r;
    }
#endif
  }
#if defined(REDUCE_ARGMAX)
  return float(best);
#else
  return acc;
#endif
}
