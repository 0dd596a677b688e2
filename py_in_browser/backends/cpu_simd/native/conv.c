// The data movement around a convolution's GEMMs (gemm.c): im2col gathers every window into a
// row, col2im adds rows back onto the input grid (the input gradient). Padding is implicit: a
// tap on padding reads 0 in im2col and is dropped in col2im, so no padded copy is ever made.

#include "simd.h"

static void copy_floats(float *dst, const float *src, int count) {
  int q = 0;
  for (; q + 4 <= count; q += 4) wasm_v128_store(dst + q, wasm_v128_load(src + q));
  for (; q < count; q++) dst[q] = src[q];
}

static void add_floats(float *dst, const float *src, int count) {
  int q = 0;
  for (; q + 4 <= count; q += 4)
    wasm_v128_store(dst + q, wasm_f32x4_add(wasm_v128_load(dst + q), wasm_v128_load(src + q)));
  for (; q < count; q++) dst[q] += src[q];
}

// cols (n*oh*ow, kh*kw*c): row (b, oy, ox) holds the window's taps in (i, j, channel) order.
EXPORT void im2col(const window_t *g, const float *x, float *cols) {
  int c = g->c;
  for (int b = 0; b < g->n; b++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++)
        for (int i = 0; i < g->kh; i++) {
          int iy = oy * g->sh - g->pt + i, ix = ox * g->sw - g->pl;
          if (iy >= 0 && iy < g->h && ix >= 0 && ix + g->kw <= g->w) {
            // The window's row lies on the input: its taps are kw * c consecutive floats.
            copy_floats(cols, x + ((b * g->h + iy) * g->w + ix) * c, g->kw * c);
            cols += g->kw * c;
            continue;
          }
          for (int j = 0; j < g->kw; j++) {
            int pixel = tap_pixel(g, b, oy, ox, i, j);
            if (pixel < 0)
              for (int q = 0; q < c; q++) cols[q] = 0.0f;
            else
              copy_floats(cols, x + pixel * c, c);
            cols += c;
          }
        }
}

// dx (n, h, w, c) = the sum, over every row and tap of cols laid out as im2col's, of the tap's
// values at the pixel it was read from.
EXPORT void col2im(const window_t *g, const float *cols, float *dx) {
  int c = g->c;
  for (int q = 0; q < g->n * g->h * g->w * c; q++) dx[q] = 0.0f;
  for (int b = 0; b < g->n; b++)
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++)
        for (int i = 0; i < g->kh; i++)
          for (int j = 0; j < g->kw; j++) {
            int pixel = tap_pixel(g, b, oy, ox, i, j);
            if (pixel >= 0) add_floats(dx + pixel * c, cols, c);
            cols += c;
          }
}
