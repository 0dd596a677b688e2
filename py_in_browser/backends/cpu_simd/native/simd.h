// Shared by the kernel sources: WebAssembly SIMD intrinsics and how a kernel is exported.
#pragma once

#include <wasm_simd128.h>

// Exported by name (the Python binding calls these) and kept out of dead-code elimination.
#define EXPORT __attribute__((visibility("default"), used))

// acc + a * b for the products' inner loops. The relaxed build (kernels-relaxed.wasm, loaded where
// the browser validates relaxed SIMD: Chromium, Firefox) makes it one fused multiply-add, which
// x86 and ARM run in the slot a multiply alone takes (a 1024^2 matmul 1.27x faster under V8); the
// plain build multiplies, rounds, then adds. Results differ by that rounding only.
static inline v128_t madd(v128_t a, v128_t b, v128_t acc) {
#ifdef __wasm_relaxed_simd__
  return wasm_f32x4_relaxed_madd(a, b, acc);
#else
  return wasm_f32x4_add(acc, wasm_f32x4_mul(a, b));
#endif
}

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

// What a recording merged into a kernel from the elementwise calls run right after it on its
// result (cpu_simd/epilogues.py): a residual added (out + residual), a bias added (one value per
// column: out + bias, or bias + out where the step added it in that order), then an activation.
// Each is the instruction fused.c runs for that call, with the same operands in the same order
// (relu6 is the importer's program -max(-max(v, 0), -6)), so the merged call gives the bits of
// the separate ones while making one pass over the output instead of several.
enum { ACT_NONE, ACT_RELU, ACT_RELU6 };
typedef struct {
  const float *residual;  // laid out as the output, or 0
  const float *bias;      // one float per column, or 0
  int bias_first, act;
} epilogue_t;

static inline v128_t epilogue_lanes(const epilogue_t *e, v128_t v, v128_t residual, v128_t bias) {
  v128_t zero = wasm_f32x4_splat(0.0f);
  if (e->residual) v = wasm_f32x4_add(v, residual);
  if (e->bias) v = e->bias_first ? wasm_f32x4_add(bias, v) : wasm_f32x4_add(v, bias);
  if (e->act == ACT_RELU) return wasm_f32x4_max(v, zero);
  if (e->act == ACT_RELU6) {
    v128_t clipped = wasm_f32x4_neg(wasm_f32x4_max(v, zero));
    return wasm_f32x4_neg(wasm_f32x4_max(clipped, wasm_f32x4_splat(-6.0f)));
  }
  return v;
}

// The residual of output `at`, where the epilogue has one.
static inline const float *residual_at(const epilogue_t *e, long at) {
  return e->residual ? e->residual + at : 0;
}

// `count` consecutive outputs: `residual` at the same offset as `out` (when e has one), `bias`
// at the columns of out[0..count).
static inline void apply_epilogue(const epilogue_t *e, float *out, const float *residual,
                                  const float *bias, int count) {
  v128_t none = wasm_f32x4_splat(0.0f);
  int q = 0;
  for (; q + 4 <= count; q += 4) {
    v128_t r = e->residual ? wasm_v128_load(residual + q) : none;
    v128_t b = e->bias ? wasm_v128_load(bias + q) : none;
    wasm_v128_store(out + q, epilogue_lanes(e, wasm_v128_load(out + q), r, b));
  }
  for (; q < count; q++) {
    v128_t r = wasm_f32x4_splat(e->residual ? residual[q] : 0.0f);
    v128_t b = wasm_f32x4_splat(e->bias ? bias[q] : 0.0f);
    out[q] = wasm_f32x4_extract_lane(epilogue_lanes(e, wasm_f32x4_splat(out[q]), r, b), 0);
  }
}
