// Elementwise helpers that match the numpy backend where GLSL's built-ins differ or overflow.

float stable_sigmoid(float x) {
  float e = exp(-abs(x));
  return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

float stable_tanh(float x) {
  float e = exp(-2.0 * abs(x));
  return sign(x) * (1.0 - e) / (1.0 + e);
}

// Abramowitz & Stegun 7.1.26, the same closed form as the numpy backend's erf.
float erf_as(float x) {
  float a = abs(x);
  float t = 1.0 / (1.0 + 0.3275911 * a);
  float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  return sign(x) * (1.0 - poly * exp(-a * a));
}

// numpy's power: negative bases with integral exponents, 0^0 = 1, NaN otherwise.
float numpy_pow(float a, float b) {
  if (b == 0.0) return 1.0;
  if (a == 0.0) return b > 0.0 ? 0.0 : INF;
  if (a > 0.0) return pow(a, b);
  if (floor(b) != b) return NAN;
  float magnitude = pow(-a, b);
  return mod(b, 2.0) == 1.0 ? -magnitude : magnitude;
}
