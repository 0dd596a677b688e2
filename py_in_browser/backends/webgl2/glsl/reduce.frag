// reduce_sum, reduce_max and argmax: each output element walks the reduced coordinates.
// Kept and reduced axes are split into two index spaces of up to 6 dims each.
uniform int u_kept_shape[6];
uniform int u_kept_stride[6];
uniform int u_red_shape[6];
uniform int u_red_stride[6];
uniform int u_red_count;
uniform int u_kept_rank;  // dims in use (the last ones; Python merges contiguous dims)
uniform int u_red_rank;
uniform int u_parts;  // > 1: output element i is part i % u_parts of kept element i / u_parts,
uniform int u_chunk;  // the sum/max of reduced indices [part * u_chunk, (part + 1) * u_chunk)
const int SUM_BLOCK = 64;

float value(int i) {
  int start = 0;
  int stop = u_red_count;
  if (u_parts > 1) {
    int part = i % u_parts;
    i /= u_parts;
    start = part * u_chunk;
    stop = min(stop, start + u_chunk);
  }
#ifdef ONE_AXIS
  // One reduced axis and at most one kept (i is below its extent): no division per index,
  // which SwiftShader does lane by lane (a 64 x 10 softmax sum: 0.105 -> 0.08 ms).
  int base = i * u_kept_stride[5];
#else
  int base = 0;
  for (int d = 5; d >= 6 - u_kept_rank; --d) {
    base += (i % u_kept_shape[d]) * u_kept_stride[d];
    i /= u_kept_shape[d];
  }
#endif
#if defined(REDUCE_SUM)
  // Sums of SUM_BLOCK values are added to acc: the rounding error grows with the number of
  // blocks plus the block length instead of with the length of the whole sum.
  float acc = 0.0;
  float block = 0.0;
  int in_block = 0;
#else
  float acc = -INF;
  int best = 0;
#endif
  for (int r = start; r < stop; ++r) {
#ifdef ONE_AXIS
    int offset = r * u_red_stride[5];
#else
    int offset = 0;
    int q = r;
    for (int d = 5; d >= 6 - u_red_rank; --d) {
      offset += (q % u_red_shape[d]) * u_red_stride[d];
      q /= u_red_shape[d];
    }
#endif
    float v = x0(base + offset);
#if defined(REDUCE_SUM)
    block += v;
    if (++in_block == SUM_BLOCK) {
      acc += block;
      block = 0.0;
      in_block = 0;
    }
#else
    // The first NaN, else the first maximum wins, as in numpy.
    if (r == start || (!is_nan(acc) && (v > acc || is_nan(v)))) {
      acc = v;
      best = r;
    }
#endif
  }
#if defined(REDUCE_SUM)
  return acc + block;
#elif defined(REDUCE_ARGMAX)
  return float(best);
#else
  return acc;
#endif
}
