// Fused elementwise programs (py_in_browser/fusion.py) interpreted over blocks of BLOCK elements:
// each step runs over a whole block of 4-wide vectors before the next step, so the interpreter's
// dispatch is paid once per step and block, and every input is read once.
//
// The step results match the cpu backend's numpy kernels: IEEE arithmetic, NaN-propagating
// maximum, and exp / log / tanh / pow evaluated with Cephes' single-precision polynomials
// (within 2 ulp), sigmoid and erf by the same formulas as cpu.py.

#include "simd.h"

#define BLOCK 64
#define VECS (BLOCK / 4)
#define MAX_STEPS 64  // fusion.MAX_STEPS

// Opcodes, in the order of FUSED_OPS in kernels.py.
enum {
  OP_NEG, OP_EXP, OP_LOG, OP_SQRT, OP_TANH, OP_SIGMOID, OP_RELU, OP_ERF,
  OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW, OP_MAXIMUM,
  OP_LESS, OP_LESS_EQUAL, OP_EQUAL, OP_NOT_EQUAL,
  OP_WHERE,
};
// Where an argument comes from, and how an input is laid out (INPUT_* in kernels.py).
enum { ARG_NONE = -1, ARG_INPUT, ARG_STEP, ARG_CONST };
enum { INPUT_FULL, INPUT_SCALAR, INPUT_ROWS, INPUT_MASK, INPUT_GATE, INPUT_COLS };

typedef v128_t block_t[VECS];

static inline v128_t f(float v) { return wasm_f32x4_splat(v); }

static v128_t exp4(v128_t x) {
  v128_t big = wasm_f32x4_gt(x, f(88.72283935546875f)), tiny = wasm_f32x4_lt(x, f(-103.97f));
  x = wasm_f32x4_max(wasm_f32x4_min(x, f(88.7f)), f(-103.9f));
  v128_t n = wasm_f32x4_nearest(wasm_f32x4_mul(x, f(1.44269504088896341f)));
  x = wasm_f32x4_sub(x, wasm_f32x4_mul(n, f(0.693359375f)));
  x = wasm_f32x4_sub(x, wasm_f32x4_mul(n, f(-2.12194440e-4f)));
  v128_t y = f(1.9875691500e-4f);
  y = wasm_f32x4_add(wasm_f32x4_mul(y, x), f(1.3981999507e-3f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, x), f(8.3334519073e-3f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, x), f(4.1665795894e-2f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, x), f(1.6666665459e-1f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, x), f(5.0000001201e-1f));
  y = wasm_f32x4_add(wasm_f32x4_add(wasm_f32x4_mul(y, wasm_f32x4_mul(x, x)), x), f(1.0f));
  // 2^n in two factors, so results below 2^-126 come out as subnormals rather than as 0.
  v128_t ni = wasm_i32x4_trunc_sat_f32x4(n);
  v128_t half = wasm_i32x4_shr(ni, 1), rest = wasm_i32x4_sub(ni, half);
  v128_t s1 = wasm_i32x4_shl(wasm_i32x4_add(half, wasm_i32x4_splat(127)), 23);
  v128_t s2 = wasm_i32x4_shl(wasm_i32x4_add(rest, wasm_i32x4_splat(127)), 23);
  y = wasm_f32x4_mul(wasm_f32x4_mul(y, s1), s2);
  y = wasm_v128_bitselect(f(__builtin_inff()), y, big);
  return wasm_v128_bitselect(f(0.0f), y, tiny);
}

static v128_t log4(v128_t x) {
  v128_t invalid = wasm_f32x4_lt(x, f(0.0f)), zero = wasm_f32x4_eq(x, f(0.0f));
  v128_t inf = wasm_f32x4_eq(x, f(__builtin_inff())), nan = wasm_f32x4_ne(x, x);
  // Subnormals are scaled up by 2^25 first so the exponent field is meaningful.
  v128_t sub = wasm_f32x4_lt(x, f(1.17549435e-38f));
  x = wasm_v128_bitselect(wasm_f32x4_mul(x, f(33554432.0f)), x, sub);
  v128_t e = wasm_i32x4_sub(wasm_u32x4_shr(x, 23), wasm_i32x4_splat(126));
  e = wasm_i32x4_sub(e, wasm_v128_and(sub, wasm_i32x4_splat(25)));
  v128_t m = wasm_v128_or(wasm_v128_and(x, wasm_i32x4_splat(0x007fffff)), wasm_i32x4_splat(0x3f000000));
  v128_t ef = wasm_f32x4_convert_i32x4(e);
  v128_t small = wasm_f32x4_lt(m, f(0.707106781186547524f));
  ef = wasm_f32x4_sub(ef, wasm_v128_and(small, f(1.0f)));
  m = wasm_f32x4_sub(wasm_f32x4_add(m, wasm_v128_and(small, m)), f(1.0f));
  v128_t z = wasm_f32x4_mul(m, m);
  v128_t y = f(7.0376836292e-2f);
  y = wasm_f32x4_add(wasm_f32x4_mul(y, m), f(-1.1514610310e-1f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, m), f(1.1676998740e-1f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, m), f(-1.2420140846e-1f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, m), f(1.4249322787e-1f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, m), f(-1.6668057665e-1f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, m), f(2.0000714765e-1f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, m), f(-2.4999993993e-1f));
  y = wasm_f32x4_add(wasm_f32x4_mul(y, m), f(3.3333331174e-1f));
  y = wasm_f32x4_mul(wasm_f32x4_mul(y, m), z);
  y = wasm_f32x4_add(y, wasm_f32x4_mul(ef, f(-2.12194440e-4f)));
  y = wasm_f32x4_sub(y, wasm_f32x4_mul(z, f(0.5f)));
  y = wasm_f32x4_add(wasm_f32x4_add(m, y), wasm_f32x4_mul(ef, f(0.693359375f)));
  y = wasm_v128_bitselect(f(__builtin_inff()), y, inf);
  y = wasm_v128_bitselect(f(-__builtin_inff()), y, zero);
  return wasm_v128_bitselect(f(__builtin_nanf("")), y, wasm_v128_or(invalid, nan));
}

static v128_t tanh4(v128_t x) {
  v128_t a = wasm_f32x4_abs(x), z = wasm_f32x4_mul(x, x);
  // |x| < 0.625: Cephes' odd polynomial; beyond: 1 - 2 / (exp(2|x|) + 1) with x's sign.
  v128_t p = f(-5.70498872745e-3f);
  p = wasm_f32x4_add(wasm_f32x4_mul(p, z), f(2.06390887954e-2f));
  p = wasm_f32x4_add(wasm_f32x4_mul(p, z), f(-5.37397155531e-2f));
  p = wasm_f32x4_add(wasm_f32x4_mul(p, z), f(1.33314422036e-1f));
  p = wasm_f32x4_add(wasm_f32x4_mul(p, z), f(-3.33332819422e-1f));
  v128_t near = wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_mul(p, z), x), x);
  v128_t far = wasm_f32x4_sub(f(1.0f), wasm_f32x4_div(f(2.0f), wasm_f32x4_add(exp4(wasm_f32x4_add(a, a)), f(1.0f))));
  far = wasm_v128_or(far, wasm_v128_and(x, f(-0.0f)));
  return wasm_v128_bitselect(near, far, wasm_f32x4_lt(a, f(0.625f)));
}

static v128_t sigmoid4(v128_t x) {
  v128_t e = exp4(wasm_f32x4_neg(wasm_f32x4_abs(x)));
  v128_t one_e = wasm_f32x4_add(f(1.0f), e);
  return wasm_v128_bitselect(wasm_f32x4_div(f(1.0f), one_e), wasm_f32x4_div(e, one_e),
                             wasm_f32x4_ge(x, f(0.0f)));
}

static v128_t erf4(v128_t x) {
  // Abramowitz & Stegun 7.1.26, as cpu.py's _erf: sign(x) * (1 - poly(t) * exp(-x^2)).
  v128_t a = wasm_f32x4_abs(x);
  v128_t t = wasm_f32x4_div(f(1.0f), wasm_f32x4_add(f(1.0f), wasm_f32x4_mul(f(0.3275911f), a)));
  v128_t p = f(1.061405429f);
  p = wasm_f32x4_add(wasm_f32x4_mul(t, p), f(-1.453152027f));
  p = wasm_f32x4_add(wasm_f32x4_mul(t, p), f(1.421413741f));
  p = wasm_f32x4_add(wasm_f32x4_mul(t, p), f(-0.284496736f));
  p = wasm_f32x4_add(wasm_f32x4_mul(t, p), f(0.254829592f));
  p = wasm_f32x4_mul(t, p);
  v128_t r = wasm_f32x4_sub(f(1.0f), wasm_f32x4_mul(p, exp4(wasm_f32x4_neg(wasm_f32x4_mul(a, a)))));
  v128_t sign = wasm_v128_bitselect(f(1.0f), f(-1.0f), wasm_f32x4_gt(x, f(0.0f)));
  sign = wasm_v128_andnot(sign, wasm_f32x4_eq(x, f(0.0f)));
  sign = wasm_v128_bitselect(x, sign, wasm_f32x4_ne(x, x));  // NaN stays NaN
  return wasm_f32x4_mul(sign, r);
}

static v128_t pow4(v128_t x, v128_t y) {
  // C's (and numpy's float32) pow: exp(y log|x|), negated for a negative base (-0 included) and
  // an odd integral exponent, NaN for a finite negative base and a non-integral exponent;
  // x^0 = 1, 1^y = 1 even for NaN, and (-1)^(+-inf) = 1.
  v128_t r = exp4(wasm_f32x4_mul(y, log4(wasm_f32x4_abs(x))));
  v128_t integral = wasm_f32x4_eq(wasm_f32x4_trunc(y), y);
  v128_t half = wasm_f32x4_mul(y, f(0.5f));
  v128_t odd = wasm_v128_andnot(integral, wasm_f32x4_eq(wasm_f32x4_trunc(half), half));
  v128_t sign = wasm_v128_and(x, f(-0.0f));
  r = wasm_v128_bitselect(wasm_v128_xor(r, sign), r, odd);
  v128_t finite_negative = wasm_v128_and(wasm_f32x4_lt(x, f(0.0f)), wasm_f32x4_gt(x, f(-__builtin_inff())));
  r = wasm_v128_bitselect(f(__builtin_nanf("")), r, wasm_v128_andnot(finite_negative, integral));
  v128_t minus_one_inf = wasm_v128_and(wasm_f32x4_eq(x, f(-1.0f)),
                                       wasm_f32x4_eq(wasm_f32x4_abs(y), f(__builtin_inff())));
  v128_t unit = wasm_v128_or(wasm_v128_or(wasm_f32x4_eq(y, f(0.0f)), wasm_f32x4_eq(x, f(1.0f))),
                             minus_one_inf);
  return wasm_v128_bitselect(f(1.0f), r, unit);
}

// Bools are 1.0 and 0.0, as numpy's are when arithmetic meets them.
static inline v128_t truth(v128_t lanes) { return wasm_v128_and(lanes, f(1.0f)); }

// dst = op over whole blocks: the switch is taken once per step and block, not per vector.
#define EACH(expr)                                                    \
  for (int v = 0; v < VECS; v++) {                                    \
    v128_t a = x[v], b = y ? y[v] : x[v], c = z ? z[v] : x[v];        \
    (void)b, (void)c;                                                 \
    dst[v] = (expr);                                                  \
  }                                                                   \
  return

static void apply(int op, const v128_t *x, const v128_t *y, const v128_t *z, v128_t *dst) {
  switch (op) {
    case OP_NEG: EACH(wasm_f32x4_neg(a));
    case OP_EXP: EACH(exp4(a));
    case OP_LOG: EACH(log4(a));
    case OP_SQRT: EACH(wasm_f32x4_sqrt(a));
    case OP_TANH: EACH(tanh4(a));
    case OP_SIGMOID: EACH(sigmoid4(a));
    case OP_RELU: EACH(wasm_f32x4_max(a, f(0.0f)));
    case OP_ERF: EACH(erf4(a));
    case OP_ADD: EACH(wasm_f32x4_add(a, b));
    case OP_SUB: EACH(wasm_f32x4_sub(a, b));
    case OP_MUL: EACH(wasm_f32x4_mul(a, b));
    case OP_DIV: EACH(wasm_f32x4_div(a, b));
    case OP_POW: EACH(pow4(a, b));
    case OP_MAXIMUM: EACH(wasm_f32x4_max(a, b));
    case OP_LESS: EACH(truth(wasm_f32x4_lt(a, b)));
    case OP_LESS_EQUAL: EACH(truth(wasm_f32x4_le(a, b)));
    case OP_EQUAL: EACH(truth(wasm_f32x4_eq(a, b)));
    case OP_NOT_EQUAL: EACH(truth(wasm_f32x4_ne(a, b)));
    default: EACH(wasm_v128_bitselect(b, c, wasm_f32x4_ne(a, f(0.0f))));  // OP_WHERE
  }
}

// Block of input k at elements [start, start + BLOCK), bools as 1.0 and 0.0.
// A full-length input is read from `local` on (start itself, or 0 in the tail's copies).
static void load_input(int kind, const void *data, int cols, int start, int local, v128_t *out) {
  const float *x = data;
  const unsigned char *mask = data;
  switch (kind) {
    case INPUT_FULL:
      for (int v = 0; v < VECS; v++) out[v] = wasm_v128_load(x + local + 4 * v);
      return;
    case INPUT_SCALAR:
      for (int v = 0; v < VECS; v++) out[v] = wasm_v128_load32_splat(x);
      return;
    case INPUT_ROWS: {
      float lanes[BLOCK];
      for (int l = 0; l < BLOCK; l++) lanes[l] = x[(start + l) / cols];
      for (int v = 0; v < VECS; v++) out[v] = wasm_v128_load(lanes + 4 * v);
      return;
    }
    case INPUT_COLS: {  // one value per column (a bias), repeated along every row
      if (cols % 4 == 0) {  // start is a multiple of 4, so every vector lies within one row
        for (int v = 0, col = start % cols; v < VECS; v++, col = col + 4 == cols ? 0 : col + 4)
          out[v] = wasm_v128_load(x + col);
        return;
      }
      float lanes[BLOCK];
      for (int l = 0, col = start % cols; l < BLOCK; l++, col = col + 1 == cols ? 0 : col + 1)
        lanes[l] = x[col];
      for (int v = 0; v < VECS; v++) out[v] = wasm_v128_load(lanes + 4 * v);
      return;
    }
    case INPUT_MASK:
      for (int v = 0; v < VECS; v++) {
        v128_t bytes = wasm_v128_load32_zero(mask + local + 4 * v);
        v128_t words = wasm_u32x4_extend_low_u16x8(wasm_u16x8_extend_low_u8x16(bytes));
        out[v] = truth(wasm_i32x4_ne(words, wasm_i32x4_splat(0)));
      }
      return;
    default:  // INPUT_GATE
      for (int v = 0; v < VECS; v++) out[v] = f(mask[0] ? 1.0f : 0.0f);
      return;
  }
}

typedef struct {
  const int *code;  // 7 int32 per step: opcode, then (where, index) per argument, ARG_NONE after
  int steps;
  const float *consts;
  const void *const *inputs;  // each input's address
  const int *kinds;           // each input's INPUT_* layout
  const int *cols;            // the row length of each INPUT_ROWS input
} program_t;

static void run_block(const program_t *p, const void *const *inputs, int start, int local,
                      block_t *values, float *out) {
  block_t loaded[3];
  for (int s = 0; s < p->steps; s++) {
    const int *step = p->code + 7 * s;
    const v128_t *args[3] = {0, 0, 0};
    for (int a = 0; a < 3; a++) {
      int where = step[1 + 2 * a], index = step[2 + 2 * a];
      if (where == ARG_STEP) {
        args[a] = values[index];
      } else if (where == ARG_INPUT) {
        load_input(p->kinds[index], inputs[index], p->cols[index], start, local, loaded[a]);
        args[a] = loaded[a];
      } else if (where == ARG_CONST) {
        for (int v = 0; v < VECS; v++) loaded[a][v] = f(p->consts[index]);
        args[a] = loaded[a];
      }
    }
    apply(step[0], args[0], args[1], args[2], values[s]);
  }
  for (int v = 0; v < VECS; v++) wasm_v128_store(out + 4 * v, values[p->steps - 1][v]);
}

#define MAX_INPUTS 8  // fusion.MAX_INPUTS

// out[0..n) = the program at every element. When n is not a multiple of BLOCK, the last block
// runs on zero-padded copies of the full-length inputs (scalars and rows are read in place).
EXPORT void fused(int n, const int *code, int steps, const float *consts, int count,
                  const void *const *inputs, const int *kinds, const int *cols, float *out) {
  program_t p = {code, steps, consts, inputs, kinds, cols};
  block_t values[MAX_STEPS];
  int full = n - n % BLOCK, tail = n - full;
  for (int start = 0; start < full; start += BLOCK)
    run_block(&p, inputs, start, start, values, out + start);
  if (tail == 0) return;
  float copies[MAX_INPUTS][BLOCK], tail_out[BLOCK];
  unsigned char masks[MAX_INPUTS][BLOCK];
  const void *moved[MAX_INPUTS];
  for (int k = 0; k < count; k++) {
    moved[k] = inputs[k];
    if (kinds[k] == INPUT_FULL) {
      const float *x = inputs[k];
      for (int l = 0; l < BLOCK; l++) copies[k][l] = l < tail ? x[full + l] : 0.0f;
      moved[k] = copies[k];
    } else if (kinds[k] == INPUT_MASK) {
      const unsigned char *x = inputs[k];
      for (int l = 0; l < BLOCK; l++) masks[k][l] = l < tail ? x[full + l] : 0;
      moved[k] = masks[k];
    }
  }
  run_block(&p, moved, full, 0, values, tail_out);
  for (int l = 0; l < tail; l++) out[full + l] = tail_out[l];
}
