#version 300 es
// Shared by every kernel: full precision, the output's layout, and element access by flat index.
precision highp float;
precision highp int;
precision highp sampler2D;

uniform ivec2 u_out;     // output texture width, channels per texel
uniform int u_out_size;  // logical elements of the output
layout(location = 0) out vec4 o_value;

const float INF = uintBitsToFloat(0x7f800000u);
const float NAN = uintBitsToFloat(0x7fc00000u);

// NaN tests on the bits: GLSL leaves comparisons with NaN to the implementation, and compilers
// may fold x != x or isnan away.
bool is_nan(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }
bool is_finite(float x) { return (floatBitsToUint(x) & 0x7fffffffu) < 0x7f800000u; }
bvec4 is_nan4(vec4 x) { return greaterThan(floatBitsToUint(x) & 0x7fffffffu, uvec4(0x7f800000u)); }

// numpy's maximum: a NaN on either side wins (GLSL's max returns the other operand).
float max_nan(float a, float b) { return is_nan(a) || a > b ? a : b; }
vec4 max_nan4(vec4 a, vec4 b) { return mix(mix(b, a, greaterThan(a, b)), a, is_nan4(a)); }

// Element i of a tensor whose layout is (texture width, channels per texel, elements, repeat).
// A view broadcast by expand is not materialized, it reads its source periodically: an index
// past the elements wraps (new or size-1 leading dims: a bias over a batch, one element), and
// with repeat r each source element stands for r consecutive ones (size-1 trailing dims).
float element(sampler2D tex, ivec4 layout_, int i) {
  if (layout_.w > 1) i /= layout_.w;
  if (i >= layout_.z) i %= layout_.z;
  int t = i / layout_.y;
  vec4 texel = texelFetch(tex, ivec2(t % layout_.x, t / layout_.x), 0);
  return layout_.y == 1 ? texel.r : texel[i % 4];
}

// Texel cursors for the vector kernels, which read RGBA textures a whole texel (4 elements of
// one row) at a time: texel t of a texture of width w sits at (t % w, t / w). Stepping a cursor
// by s texels adds (s % w, s / w) and carries, so inner loops do no integer division.
ivec2 texel_at(int t, int w) { return ivec2(t % w, t / w); }
ivec2 texel_step(int s, int w) { return ivec2(s % w, s / w); }
ivec2 advance(ivec2 p, ivec2 s, int w) {
  p += s;
  if (p.x >= w) {
    p.x -= w;
    p.y += 1;
  }
  return p;
}
// Component c of a texel by selects (a dot with a one-hot mask would turn inf into NaN).
float component(vec4 t, int c) { return c < 2 ? (c == 0 ? t.x : t.y) : (c == 2 ? t.z : t.w); }
