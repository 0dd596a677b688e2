// The small kernels a training step needs besides GEMM, convolution and the fused programs, so a
// recorded step runs in the module from start to end (replay.c): strided copies (broadcast and
// transposed views made dense), row reductions, comparisons with a bool result and bool/int
// selects. Row sums are pairwise, as numpy's, so long rows keep float32 accuracy.

#include "simd.h"

// Bytes from src to dst: 16 at a time, then one at a time (no libc in a side module).
static void copy_bytes(unsigned char *dst, const unsigned char *src, int count) {
  int q = 0;
  for (; q + 16 <= count; q += 16) wasm_v128_store(dst + q, wasm_v128_load(src + q));
  for (; q < count; q++) dst[q] = src[q];
}

EXPORT void copy(const void *src, void *dst, int bytes) { copy_bytes(dst, src, bytes); }

// dst (dense, row-major) = the view of `ndim` dims at src: geometry holds the shape, then each
// dim's stride in bytes (0 for a broadcast dim, negative for a flipped one).
EXPORT void copy_strided(const int *geometry, int ndim, int itemsize, const void *src, void *dst) {
  const int *shape = geometry, *strides = geometry + ndim;
  int index[16] = {0}, total = 1;
  for (int d = 0; d < ndim; d++) total *= shape[d];
  if (total == 0) return;
  int inner = ndim ? shape[ndim - 1] : 1, step = ndim ? strides[ndim - 1] : 0;
  const unsigned char *from = src;
  unsigned char *to = dst;
  for (int done = 0; done < total; done += inner) {
    const unsigned char *row = from;
    for (int d = 0; d < ndim - 1; d++) row += (long)index[d] * strides[d];
    if (step == itemsize) {
      copy_bytes(to, row, inner * itemsize);
    } else if (itemsize == 4) {
      for (int q = 0; q < inner; q++) ((float *)to)[q] = *(const float *)(row + (long)q * step);
    } else {
      for (int q = 0; q < inner; q++) copy_bytes(to + q * itemsize, row + (long)q * step, itemsize);
    }
    to += inner * itemsize;
    for (int d = ndim - 2; d >= 0; d--) {  // the next row's index, last dims fastest
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// Sum of n floats: 8 lanes at a time up to 128, pairwise halves beyond (numpy's scheme).
static float pairwise_sum(const float *x, int n) {
  if (n > 128) {
    int half = (n / 2) & ~7;
    return pairwise_sum(x, half) + pairwise_sum(x + half, n - half);
  }
  v128_t lo = wasm_f32x4_splat(0.0f), hi = wasm_f32x4_splat(0.0f);
  int q = 0;
  for (; q + 8 <= n; q += 8) {
    lo = wasm_f32x4_add(lo, wasm_v128_load(x + q));
    hi = wasm_f32x4_add(hi, wasm_v128_load(x + q + 4));
  }
  v128_t s = wasm_f32x4_add(lo, hi);
  float sum = (wasm_f32x4_extract_lane(s, 0) + wasm_f32x4_extract_lane(s, 1)) +
              (wasm_f32x4_extract_lane(s, 2) + wasm_f32x4_extract_lane(s, 3));
  for (; q < n; q++) sum += x[q];
  return sum;
}

// out[r] = the sum of row r of x (rows x length, dense).
EXPORT void sum_rows(int rows, int length, const float *x, float *out) {
  for (int r = 0; r < rows; r++) out[r] = pairwise_sum(x + (long)r * length, length);
}

// out[r] = the maximum of row r of x; a NaN anywhere in the row wins, as in numpy.
EXPORT void max_rows(int rows, int length, const float *x, float *out) {
  for (int r = 0; r < rows; r++, x += length) {
    float best = -__builtin_inff();
    for (int q = 0; q < length; q++) {
      float v = x[q];
      if (v > best || v != v) best = v;
      if (v != v) break;
    }
    out[r] = best;
  }
}

enum { CMP_LESS, CMP_LESS_EQUAL, CMP_EQUAL, CMP_NOT_EQUAL };  // fusion.COMPARE's order
enum { DTYPE_FLOAT32, DTYPE_INT32 };

// out[i] (bool bytes) = a[i] op b[i] over n elements; a and b are float32 or int32, each either
// dense or one value (`a_step`, `b_step`: 1 or 0 elements per output).
EXPORT void compare(int op, int dtype, int n, const void *a, int a_step, const void *b, int b_step,
                    unsigned char *out) {
  for (int i = 0; i < n; i++) {
    int ia = i * a_step, ib = i * b_step, r;
    if (dtype == DTYPE_FLOAT32) {
      float x = ((const float *)a)[ia], y = ((const float *)b)[ib];
      r = op == CMP_LESS ? x < y : op == CMP_LESS_EQUAL ? x <= y : op == CMP_EQUAL ? x == y : x != y;
    } else {
      int x = ((const int *)a)[ia], y = ((const int *)b)[ib];
      r = op == CMP_LESS ? x < y : op == CMP_LESS_EQUAL ? x <= y : op == CMP_EQUAL ? x == y : x != y;
    }
    out[i] = (unsigned char)r;
  }
}

// out[i] = cond[i] ? a[i] : b[i] for elements of `itemsize` bytes (1 or 4); each of cond, a, b
// dense or one value (its step 1 or 0).
EXPORT void select(int itemsize, int n, const unsigned char *cond, int c_step, const void *a,
                   int a_step, const void *b, int b_step, void *out) {
  for (int i = 0; i < n; i++) {
    const unsigned char *pick = cond[i * c_step] ? (const unsigned char *)a + i * a_step * itemsize
                                                 : (const unsigned char *)b + i * b_step * itemsize;
    copy_bytes((unsigned char *)out + i * itemsize, pick, itemsize);
  }
}
