// reduce_sum over the leading axes of a (R, C) tensor, C a multiple of 4, whole texels: output
// texel c4 (elements 4 c4 .. 4 c4 + 3) adds texel c4 of every row, with no index arithmetic per
// element (a layer's bias gradient: the element kernel did a div/mod walk per element). Sums
// run in blocks of SUM_BLOCK rows as reduce.frag's do, in the same order: the same results.
uniform int u_rows;   // R
uniform int u_cols4;  // C / 4
const int SUM_BLOCK = 64;

vec4 value4(int texel) {
  int w = u_l0.x;
  ivec2 p = texel_at(texel, w);
  ivec2 s = texel_step(u_cols4, w);
  vec4 acc = vec4(0.0);
  vec4 block = vec4(0.0);
  int in_block = 0;
  for (int r = 0; r < u_rows; ++r) {
    block += texelFetch(u_x0, p, 0);
    p = advance(p, s, w);
    if (++in_block == SUM_BLOCK) {
      acc += block;
      block = vec4(0.0);
      in_block = 0;
    }
  }
  return acc + block;
}
