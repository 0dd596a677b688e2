// Elementwise helpers that match the numpy backend where GLSL's built-ins differ, overflow or
// leave NaN and the infinities undefined: finite inputs take the built-in (one bit test), the
// rest get numpy's answer from their bit pattern.

// exp overflows to +inf past this input, which some drivers turn into garbage; say inf ourselves.
const float EXP_MAX_INPUT = 88.72283;

float exp_f32(float x) {
  if (is_finite(x)) return x > EXP_MAX_INPUT ? INF : exp(x);
  return floatBitsToUint(x) == 0xff800000u ? 0.0 : x;  // exp(-inf) = 0; +inf and NaN stay
}

float log_f32(float x) {
  uint bits = floatBitsToUint(x);
  if (bits - 1u < 0x7f7fffffu) return log(x);  // positive and finite
  if ((bits & 0x7fffffffu) == 0u) return -INF;  // +-0
  return bits == 0x7f800000u ? INF : NAN;  // +inf; negative, -inf or NaN
}

float sqrt_f32(float x) {
  uint bits = floatBitsToUint(x);
  if (bits < 0x7f800000u) return sqrt(x);  // +0 and positive finite
  return bits == 0x7f800000u || bits == 0x80000000u ? x : NAN;  // +inf, -0; negative or NaN
}

float stable_sigmoid(float x) {
  if (is_nan(x)) return x;
  float e = exp(-abs(x));
  return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

float stable_tanh(float x) {
  if (is_nan(x)) return x;
  float e = exp(-2.0 * abs(x));
  return sign(x) * (1.0 - e) / (1.0 + e);
}

// Abramowitz & Stegun 7.1.26, the same closed form as the numpy backend's erf.
float erf_as(float x) {
  if (is_nan(x)) return x;
  float a = abs(x);
  float t = 1.0 / (1.0 + 0.3275911 * a);
  float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  return sign(x) * (1.0 - poly * exp(-a * a));
}

// numpy's power (C's pow): x^0 = 1^y = 1, NaN otherwise propagates; infinite exponents and
// bases, zero bases and negative bases with integral exponents (odd keeps the sign) by hand,
// since GLSL's pow is undefined for them.
float numpy_pow(float x, float y) {
  if (y == 0.0 || x == 1.0) return 1.0;
  if (is_nan(x) || is_nan(y)) return NAN;
  float m = abs(x);
  if (!is_finite(y)) return m == 1.0 ? 1.0 : ((m > 1.0) == (y > 0.0) ? INF : 0.0);
  bool integral = floor(y) == y;
  bool odd = integral && abs(y - 2.0 * floor(y * 0.5)) == 1.0;
  float r;
  if (m == 0.0) r = y < 0.0 ? INF : 0.0;
  else if (!is_finite(m)) r = y > 0.0 ? INF : 0.0;
  else if (x < 0.0 && !integral) return NAN;
  else r = pow(m, y);
  return odd && floatBitsToInt(x) < 0 ? -r : r;
}
