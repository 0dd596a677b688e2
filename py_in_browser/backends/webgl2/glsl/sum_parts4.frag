// The sum over P parts of a split product (rewrites.matmul_split_k, filter_gradient_as_product),
// whole texels: output texel t is the sum, part after part, of texel t of each part (u_texels
// texels apart).
// BIAS then adds input 1 (one value per output column, epilogues.fuse_sum), RELU applies relu
// (NaN passes, as the relu kernel).
uniform int u_parts;
uniform int u_texels;  // texels of one part

vec4 value4(int texel) {
  vec4 acc = vec4(0.0);
  ivec2 p = texel_at(texel, u_l0.x);
  ivec2 s = texel_step(u_texels, u_l0.x);
  for (int part = 0; part < u_parts; ++part) {
    acc += texelFetch(u_x0, p, 0);
    p = advance(p, s, u_l0.x);
  }
#ifdef BIAS
  acc += texelFetch(u_x1, texel_at(texel % u_texels, u_l1.x), 0);
#endif
#ifdef RELU
  acc = mix(max(acc, vec4(0.0)), acc, is_nan4(acc));
#endif
  return acc;
}
