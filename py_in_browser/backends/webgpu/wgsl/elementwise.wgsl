// out[i] from the inputs' i-th elements: one op (BODY from elementwise.py) or a fused program of
// them (fused.py, which adds FUNCTIONS, one per op, and HOISTED loads of scalar inputs), or
// several fused programs over one element count, one output each (out_0, out_1, ...).
{{COMMON}}

{{INPUT_BINDINGS}}
{{OUTPUT_BINDINGS}}

// Word 0: the element count; with broadcast inputs, per-input blocks follow (elementwise.py).
struct Params { words: array<vec4<u32>, {{PARAM_ROWS}}> }
@group(0) @binding({{PARAMS_BINDING}}) var<uniform> params: Params;

fn word(i: u32) -> u32 { return params.words[i >> 2u][i & 3u]; }

// Where a broadcast input's element for output index i is: a walk over its merged axes.
fn strided_offset(i: u32, base: u32) -> u32 {
  var rest = i;
  var offset = 0u;
  for (var axis = word(base); axis > 0u; axis--) {
    let d = axis - 1u;
    let dim = word(base + 4u + d);
    offset += (rest % dim) * word(base + 12u + d);
    rest = rest / dim;
  }
  return offset;
}

// Finite inputs take the built-in (one bit test); NaN, the infinities and the inputs the
// built-ins leave undefined get numpy's answer from their bit pattern.

// exp overflows to +inf past this input, which some drivers turn into garbage; say inf ourselves.
const EXP_F32_MAX_INPUT: f32 = 88.72283;

fn exp_f32(x: f32) -> f32 {
  if (f32_is_finite(x)) { return select(exp(x), f32_inf(), x > EXP_F32_MAX_INPUT); }
  return select(x, 0.0, bitcast<u32>(x) == 0xff800000u);  // exp(-inf) = 0; +inf and NaN stay
}

fn log_f32(x: f32) -> f32 {
  let bits = bitcast<u32>(x);
  if (bits - 1u < 0x7f7fffffu) { return log(x); }  // positive and finite
  if ((bits & 0x7fffffffu) == 0u) { return f32_neg_inf(); }  // +-0
  return select(f32_nan(), x, bits == 0x7f800000u);  // +inf; negative, -inf or NaN
}

fn sqrt_f32(x: f32) -> f32 {
  let bits = bitcast<u32>(x);
  if (bits < 0x7f800000u) { return sqrt(x); }  // +0 and positive finite
  return select(f32_nan(), x, bits == 0x7f800000u || bits == 0x80000000u);  // +inf, -0
}

// tanh is exactly +-1 in f32 beyond |x| = 9; clamping avoids inf/inf inside exp-based tanh.
fn tanh_f32(x: f32) -> f32 {
  return select(tanh(clamp(x, -10.0, 10.0)), x, f32_is_nan(x));
}

// exp of a non-positive argument only, so it never overflows (as the cpu backend does).
fn sigmoid_f32(x: f32) -> f32 {
  let e = exp(-abs(x));
  return select(select(e / (1.0 + e), 1.0 / (1.0 + e), x >= 0.0), x, f32_is_nan(x));
}

// Abramowitz & Stegun 7.1.26, the closed form the cpu backend uses, so both agree.
fn erf_f32(x: f32) -> f32 {
  let a = abs(x);
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
      + t * (-1.453152027 + t * 1.061405429))));
  return select(sign(x) * (1.0 - poly * exp(-a * a)), x, f32_is_nan(x));
}

// numpy's power (C's pow): x^0 = 1^y = 1, NaN otherwise propagates; infinite exponents and
// bases, zero bases and negative bases with integral exponents (odd keeps the sign) by hand,
// since WGSL's pow is undefined for them.
fn pow_f32(x: f32, y: f32) -> f32 {
  if (y == 0.0 || x == 1.0) { return 1.0; }
  if (f32_is_nan(x) || f32_is_nan(y)) { return f32_nan(); }
  let m = abs(x);
  if (!f32_is_finite(y)) {
    if (m == 1.0) { return 1.0; }
    return select(0.0, f32_inf(), (m > 1.0) == (y > 0.0));
  }
  let integral = floor(y) == y;
  let odd = integral && abs(y - 2.0 * floor(y * 0.5)) == 1.0;
  var r: f32;
  if (m == 0.0) {
    r = select(0.0, f32_inf(), y < 0.0);
  } else if (!f32_is_finite(m)) {
    r = select(0.0, f32_inf(), y > 0.0);
  } else if (x < 0.0 && !integral) {
    return f32_nan();
  } else {
    r = pow(m, y);
  }
  return select(r, -r, odd && bitcast<i32>(x) < 0);
}

{{FUNCTIONS}}

// Each invocation does PER elements, i, i + T, i + 2T, ... (T: invocations in the grid), so
// neighbouring invocations still touch neighbouring elements; fewer invocations amortise the
// index arithmetic (a software GPU pays per invocation).
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let total = nwg.x * nwg.y * nwg.z * 64u;
  let first = workgroup_linear(wid, nwg) * 64u + lid;
  {{HOISTED}}
  for (var k = 0u; k < {{PER}}u; k++) {
    let i = first + k * total;
    if (i >= word(0u)) { return; }
    {{BODY}}
  }
}
