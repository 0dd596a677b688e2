// One fragment per output texel: 1 element (R) or 4 consecutive elements (RGBA). Vector kernels
// (TEXEL_KERNEL) compute the texel's elements together in value4(texel); block kernels
// (BLOCK_KERNEL) write one texel into each of several render targets themselves.
#ifdef BLOCK_KERNEL
void main() { write_block(ivec2(gl_FragCoord.xy)); }
#else
void main() {
  int texel = int(gl_FragCoord.y) * u_out.x + int(gl_FragCoord.x);
#ifdef TEXEL_KERNEL
  vec4 result = texel * u_out.y < u_out_size ? value4(texel) : vec4(0.0);
#else
  // As many elements as the texel holds: SwiftShader runs both sides of a branch but leaves a
  // loop once no fragment goes on, so an R target's fragment computes one element, not four.
  int base = texel * u_out.y;
  vec4 result = vec4(0.0);
  for (int c = 0; c < u_out.y; ++c) {
    if (base + c < u_out_size) result[c] = value(base + c);
  }
#endif
#ifdef PAIR_OUTPUT
  // Float16 compensated storage: the value rounded to half, and what the rounding lost.
  vec4 hi = vec4(unpackHalf2x16(packHalf2x16(result.xy)), unpackHalf2x16(packHalf2x16(result.zw)));
  o_value = hi;
  o_lo = result - hi;
#else
  o_value = result;
#endif
}
#endif
