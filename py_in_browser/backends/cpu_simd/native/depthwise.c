// depthwise_conv2d over NHWC input with HWCM filters: out (n, oh, ow, c * m), output channel
// ci * m + k the window of input channel ci times filter (ci, k). Vectorised over channels:
// with m == 1 channel q of a pixel meets filter element q of each tap, so 4 (or 16) channels
// are one load of each. Taps over the padding multiply a zero in (0 * Inf is NaN, as numpy's
// padded reference), and every output is 0 + tap (0, 0) + tap (0, 1) + ..., the products and
// sums rounded one by one (wasm has no fused multiply-add): the bits of the numpy kernel's tap
// loop (cpu.py).

#include "simd.h"

// Windows of at most this many taps have their input offsets worked out once per output pixel
// (the filter gradient's whole-image windows take tap_pixel per tap and channel block).
#define MAX_TAPS 64

// The input offset (pixel * c) each tap of output (b, oy, ox) reads, or -1 on padding.
static void tap_offsets(const window_t *g, int b, int oy, int ox, int *offsets) {
  for (int i = 0, t = 0; i < g->kh; i++)
    for (int j = 0; j < g->kw; j++, t++) {
      int pixel = tap_pixel(g, b, oy, ox, i, j);
      offsets[t] = pixel < 0 ? -1 : pixel * g->c;
    }
}

// The input offset of tap t: from the table, or computed where the window is too large for one.
static inline int offset_of(const window_t *g, const int *offsets, int b, int oy, int ox, int t) {
  if (offsets) return offsets[t];
  int pixel = tap_pixel(g, b, oy, ox, t / g->kw, t % g->kw);
  return pixel < 0 ? -1 : pixel * g->c;
}

// Every channel of one output pixel, multiplier 1: 16 channels per pass, then 4, then 1.
static void pixel_m1(const window_t *g, const int *offsets, const float *x, const float *w, int b,
                     int oy, int ox, float *out) {
  int c = g->c, taps = g->kh * g->kw;
  v128_t zero = wasm_f32x4_splat(0.0f);
  int q = 0;
  for (; q + 16 <= c; q += 16) {
    v128_t a0 = zero, a1 = zero, a2 = zero, a3 = zero;
    const float *wt = w + q;
    for (int t = 0; t < taps; t++, wt += c) {
      int at = offset_of(g, offsets, b, oy, ox, t);
      v128_t x0 = zero, x1 = zero, x2 = zero, x3 = zero;
      if (at >= 0) {
        const float *xt = x + at + q;
        x0 = wasm_v128_load(xt);
        x1 = wasm_v128_load(xt + 4);
        x2 = wasm_v128_load(xt + 8);
        x3 = wasm_v128_load(xt + 12);
      }
      a0 = wasm_f32x4_add(a0, wasm_f32x4_mul(x0, wasm_v128_load(wt)));
      a1 = wasm_f32x4_add(a1, wasm_f32x4_mul(x1, wasm_v128_load(wt + 4)));
      a2 = wasm_f32x4_add(a2, wasm_f32x4_mul(x2, wasm_v128_load(wt + 8)));
      a3 = wasm_f32x4_add(a3, wasm_f32x4_mul(x3, wasm_v128_load(wt + 12)));
    }
    wasm_v128_store(out + q, a0);
    wasm_v128_store(out + q + 4, a1);
    wasm_v128_store(out + q + 8, a2);
    wasm_v128_store(out + q + 12, a3);
  }
  for (; q + 4 <= c; q += 4) {
    v128_t acc = zero;
    const float *wt = w + q;
    for (int t = 0; t < taps; t++, wt += c) {
      int at = offset_of(g, offsets, b, oy, ox, t);
      v128_t xv = at >= 0 ? wasm_v128_load(x + at + q) : zero;
      acc = wasm_f32x4_add(acc, wasm_f32x4_mul(xv, wasm_v128_load(wt)));
    }
    wasm_v128_store(out + q, acc);
  }
  for (; q < c; q++) {
    float acc = 0.0f;
    const float *wt = w + q;
    for (int t = 0; t < taps; t++, wt += c) {
      int at = offset_of(g, offsets, b, oy, ox, t);
      acc += (at >= 0 ? x[at + q] : 0.0f) * *wt;
    }
    out[q] = acc;
  }
}

// Any multiplier m: output channel co reads input channel co / m, one channel at a time.
static void pixel_any(const window_t *g, int m, const float *x, const float *w, int b, int oy,
                      int ox, float *out) {
  int c = g->c, cm = g->c * m;
  for (int co = 0; co < cm; co++) {
    float acc = 0.0f;
    const float *wt = w + co;
    for (int i = 0; i < g->kh; i++)
      for (int j = 0; j < g->kw; j++, wt += cm) {
        int pixel = tap_pixel(g, b, oy, ox, i, j);
        acc += (pixel >= 0 ? x[pixel * c + co / m] : 0.0f) * *wt;
      }
    out[co] = acc;
  }
}

static void depthwise(const window_t *g, int m, const float *x, const float *w, float *out,
                      const epilogue_t *e) {
  int offsets[MAX_TAPS];
  int *table = g->kh * g->kw <= MAX_TAPS ? offsets : 0;
  for (int b = 0; b < g->n; b++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++, out += g->c * m) {
        if (m != 1) {
          pixel_any(g, m, x, w, b, oy, ox, out);
        } else {
          if (table) tap_offsets(g, b, oy, ox, table);
          pixel_m1(g, table, x, w, b, oy, ox, out);
        }
        if (e) apply_epilogue(e, out, 0, e->bias, g->c * m);  // the pixel is still in cache
      }
}

EXPORT void depthwise_conv2d(const window_t *g, int m, const float *x, const float *w,
                             float *out) {
  depthwise(g, m, x, w, out, 0);
}

// depthwise_conv2d, then out + bias (one float per output channel) and the activation `act`
// (simd.h's ACT_*): the calls a recording merges (epilogues.py), only ever made by a replay.
EXPORT void depthwise_epilogue(const window_t *g, int m, const float *x, const float *w,
                               const float *bias, int act, float *out) {
  epilogue_t e = {0, bias, 0, act};
  depthwise(g, m, x, w, out, &e);
}
