// Helpers shared by every kernel module (prepended by the generator in place of COMMON).

// Infinities and NaN come from private variables rather than constants: a constant expression
// that evaluates to a non-finite value is a shader-creation error in WGSL.
var<private> F32_INF_BITS: u32 = 0x7f800000u;
var<private> F32_NEG_INF_BITS: u32 = 0xff800000u;
var<private> F32_NAN_BITS: u32 = 0x7fc00000u;

fn f32_inf() -> f32 { return bitcast<f32>(F32_INF_BITS); }
fn f32_neg_inf() -> f32 { return bitcast<f32>(F32_NEG_INF_BITS); }
fn f32_nan() -> f32 { return bitcast<f32>(F32_NAN_BITS); }

// Bit tests instead of x != x, which fast-math compilers may fold to false (WGSL lets an
// implementation assume NaN and the infinities never occur).
fn f32_is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn f32_is_finite(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) < 0x7f800000u; }

// numpy's maximum: a NaN on either side wins (WGSL's max leaves that case undefined).
fn f32_max_nan(a: f32, b: f32) -> f32 {
  return select(select(b, a, a > b), a, f32_is_nan(a));
}

// Dispatches larger than the per-dimension limit are spread over x, y and z; this undoes that.
fn workgroup_linear(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return wid.x + nwg.x * (wid.y + nwg.y * wid.z);
}
