// The last two dims swapped, whole texels: out (B, R, C) = in (B, C, R) transposed, R and C
// multiples of 4. Output texel (b, r, 4 c4 .. 4 c4 + 3) gathers component r % 4 of 4 input
// texels, rows 4 c4 .. 4 c4 + 3 of the input (used to turn a transposed matmul operand whose
// elements would each cost a texel fetch into a plain one).
uniform int u_rows;  // R
uniform int u_cols;  // C

vec4 value4(int texel) {
  int c4n = u_cols / 4;
  int r4n = u_rows / 4;
  int c4 = texel % c4n;
  int row = texel / c4n;  // b * R + r
  int b = row / u_rows;
  int r = row - b * u_rows;
  int w = u_l0.x;
  ivec2 p = texel_at((b * u_cols + c4 * 4) * r4n + r / 4, w);
  ivec2 s = texel_step(r4n, w);
  int c = r % 4;
  float v0 = component(texelFetch(u_x0, p, 0), c);
  p = advance(p, s, w);
  float v1 = component(texelFetch(u_x0, p, 0), c);
  p = advance(p, s, w);
  float v2 = component(texelFetch(u_x0, p, 0), c);
  p = advance(p, s, w);
  float v3 = component(texelFetch(u_x0, p, 0), c);
  return vec4(v0, v1, v2, v3);
}
