// Shared by the kernel sources: WebAssembly SIMD intrinsics and how a kernel is exported.
#pragma once

#include <wasm_simd128.h>

// Exported by name (the Python binding calls these) and kept out of dead-code elimination.
#define EXPORT __attribute__((visibility("default"), used))

// Where the windows of a 2-D convolution or pooling lie over an NHWC input: input n x h x w x c,
// window kh x kw moved by sh, sw, top/left padding pt, pl (taps there read as the pad value),
// giving oh x ow outputs. The Python binding passes it as 12 int32s.
typedef struct {
  int n, h, w, c, kh, kw, sh, sw, pt, pl, oh, ow;
} window_t;

// The input pixel (row-major index, without the channel) that tap (i, j) of output (b, oy, ox)
// reads, or -1 when the tap falls on padding.
static inline int tap_pixel(const window_t *g, int b, int oy, int ox, int i, int j) {
  int iy = oy * g->sh - g->pt + i, ix = ox * g->sw - g->pl + j;
  if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) return -1;
  return (b * g->h + iy) * g->w + ix;
}
