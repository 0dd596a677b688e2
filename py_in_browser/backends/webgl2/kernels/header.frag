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

// Element i of a tensor whose layout is (texture width, channels per texel, elements).
float element(sampler2D tex, ivec3 layout_, int i) {
  int t = i / layout_.y;
  vec4 texel = texelFetch(tex, ivec2(t % layout_.x, t / layout_.x), 0);
  return layout_.y == 1 ? texel.r : texel[i % 4];
}
