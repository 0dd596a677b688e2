// 2-D max and average pooling over NHWC and their gradients, vectorised over channels.
// Padding follows TensorFlow: max pooling pads with -inf; average pooling divides by the taps
// that lie on the input (padding is not averaged in).

#include "simd.h"

#define NEG_INF (-__builtin_inff())

static int taps_inside(const window_t *g, int b, int oy, int ox) {
  int count = 0;
  for (int i = 0; i < g->kh; i++)
    for (int j = 0; j < g->kw; j++) count += tap_pixel(g, b, oy, ox, i, j) >= 0;
  return count;
}

// out (n, oh, ow, c): the maximum of each window per channel (NaN wins, as in numpy).
EXPORT void max_pool2d(const window_t *g, const float *x, float *out) {
  int c = g->c;
  for (int b = 0; b < g->n; b++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++, out += c) {
        int q = 0;
        for (; q + 4 <= c; q += 4) {
          v128_t best = wasm_f32x4_splat(NEG_INF);
          for (int i = 0; i < g->kh; i++)
            for (int j = 0; j < g->kw; j++) {
              int pixel = tap_pixel(g, b, oy, ox, i, j);
              if (pixel >= 0) best = wasm_f32x4_max(best, wasm_v128_load(x + pixel * c + q));
            }
          wasm_v128_store(out + q, best);
        }
        for (; q < c; q++) {
          float best = NEG_INF;
          for (int i = 0; i < g->kh; i++)
            for (int j = 0; j < g->kw; j++) {
              int pixel = tap_pixel(g, b, oy, ox, i, j);
              if (pixel >= 0) {
                float v = x[pixel * c + q];
                if (v > best || v != v) best = v;  // a NaN, once met, stays
              }
            }
          out[q] = best;
        }
      }
}

// dx (n, h, w, c): each window's gradient goes whole to its first maximum in (i, j) order, as in
// TensorFlow and PyTorch (a padding tap counts as -inf, so it can be that first maximum, and
// then the gradient is dropped with the padding).
EXPORT void max_pool2d_grad(const window_t *g, const float *x, const float *grad, float *dx) {
  int c = g->c;
  for (int q = 0; q < g->n * g->h * g->w * c; q++) dx[q] = 0.0f;
  for (int b = 0; b < g->n; b++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++, grad += c)
        for (int q = 0; q < c; q++) {
          int first = -1;
          float best = NEG_INF;
          for (int i = 0; i < g->kh; i++)
            for (int j = 0; j < g->kw; j++) {
              int pixel = tap_pixel(g, b, oy, ox, i, j);
              float v = pixel >= 0 ? x[pixel * c + q] : NEG_INF;
              // numpy's argmax: the first NaN, else the first strictly greater value.
              if ((i == 0 && j == 0) || (best == best && (v > best || v != v))) {
                best = v;
                first = pixel;
              }
            }
          if (first >= 0) dx[first * c + q] += grad[q];
        }
}

// out (n, oh, ow, c): each window's mean over the taps on the input.
EXPORT void avg_pool2d(const window_t *g, const float *x, float *out) {
  int c = g->c;
  for (int b = 0; b < g->n; b++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++, out += c) {
        v128_t scale = wasm_f32x4_splat(1.0f / (float)taps_inside(g, b, oy, ox));
        int q = 0;
        for (; q + 4 <= c; q += 4) {
          v128_t sum = wasm_f32x4_splat(0.0f);
          for (int i = 0; i < g->kh; i++)
            for (int j = 0; j < g->kw; j++) {
              int pixel = tap_pixel(g, b, oy, ox, i, j);
              if (pixel >= 0) sum = wasm_f32x4_add(sum, wasm_v128_load(x + pixel * c + q));
            }
          wasm_v128_store(out + q, wasm_f32x4_mul(sum, scale));
        }
        for (; q < c; q++) {
          float sum = 0.0f;
          for (int i = 0; i < g->kh; i++)
            for (int j = 0; j < g->kw; j++) {
              int pixel = tap_pixel(g, b, oy, ox, i, j);
              if (pixel >= 0) sum += x[pixel * c + q];
            }
          out[q] = sum * wasm_f32x4_extract_lane(scale, 0);
        }
      }
}

// dx (n, h, w, c): each window's gradient shared equally among its taps on the input.
EXPORT void avg_pool2d_grad(const window_t *g, const float *grad, float *dx) {
  int c = g->c;
  for (int q = 0; q < g->n * g->h * g->w * c; q++) dx[q] = 0.0f;
  for (int b = 0; b < g->n; b++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++, grad += c) {
        v128_t scale = wasm_f32x4_splat(1.0f / (float)taps_inside(g, b, oy, ox));
        for (int i = 0; i < g->kh; i++)
          for (int j = 0; j < g->kw; j++) {
            int pixel = tap_pixel(g, b, oy, ox, i, j);
            if (pixel < 0) continue;
            float *d = dx + pixel * c;
            int q = 0;
            for (; q + 4 <= c; q += 4)
              wasm_v128_store(d + q, wasm_f32x4_add(wasm_v128_load(d + q),
                                                    wasm_f32x4_mul(wasm_v128_load(grad + q), scale)));
            for (; q < c; q++) d[q] += grad[q] * wasm_f32x4_extract_lane(scale, 0);
          }
      }
}
