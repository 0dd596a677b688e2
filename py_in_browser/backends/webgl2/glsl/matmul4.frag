// Vector matmul: each fragment computes one output texel, out[b, m, n..n+3], from whole RGBA
// texels of a and b (every inner dimension involved is a multiple of 4, so a texel is 4
// elements of one row). Variants: MM_NN, MM_NT (b transposed), MM_TN (a transposed); with
// MM_ALIGNED (NN, NT) every matrix row of a and b is exactly one texture row.
uniform int u_m;
uniform int u_n;
uniform int u_k;

vec4 value4(int texel) {
  int n4 = u_n / 4;
  int col = texel % n4;
  int row = texel / n4;  // batch * M + m
  int batch = row / u_m;
  int m = row - batch * u_m;
  int wa = u_l0.x;
  int wb = u_l1.x;
  int k4 = u_k / 4;
  vec4 acc = vec4(0.0);
#if defined(MM_NN) && defined(MM_ALIGNED)
  // Every matrix row is one texture row (width = inner dim / 4): no cursors to carry.
  int kb = batch * u_k;
  for (int k = 0; k < k4; ++k) {
    vec4 a = texelFetch(u_x0, ivec2(k, row), 0);
    int r = kb + 4 * k;
    acc += a.x * texelFetch(u_x1, ivec2(col, r), 0) + a.y * texelFetch(u_x1, ivec2(col, r + 1), 0) +
           a.z * texelFetch(u_x1, ivec2(col, r + 2), 0) + a.w * texelFetch(u_x1, ivec2(col, r + 3), 0);
  }
#elif defined(MM_NT) && defined(MM_ALIGNED)
  int nb = batch * u_n + col * 4;
  for (int k = 0; k < k4; ++k) {
    vec4 a = texelFetch(u_x0, ivec2(k, row), 0);
    acc += vec4(dot(a, texelFetch(u_x1, ivec2(k, nb), 0)), dot(a, texelFetch(u_x1, ivec2(k, nb + 1), 0)),
                dot(a, texelFetch(u_x1, ivec2(k, nb + 2), 0)), dot(a, texelFetch(u_x1, ivec2(k, nb + 3), 0)));
  }
#elif defined(MM_NN)
  // a (B, M, K): row `row`, texels k4 in order. b (B, K, N): texel column `col`, one row per k.
  ivec2 pa = texel_at(row * k4, wa);
  ivec2 pb = texel_at(batch * u_k * n4 + col, wb);
  ivec2 sb = texel_step(n4, wb);
  for (int k = 0; k < k4; ++k) {
    vec4 a = texelFetch(u_x0, pa, 0);
    pa = advance(pa, ivec2(1, 0), wa);
    vec4 b0 = texelFetch(u_x1, pb, 0);
    pb = advance(pb, sb, wb);
    vec4 b1 = texelFetch(u_x1, pb, 0);
    pb = advance(pb, sb, wb);
    vec4 b2 = texelFetch(u_x1, pb, 0);
    pb = advance(pb, sb, wb);
    vec4 b3 = texelFetch(u_x1, pb, 0);
    pb = advance(pb, sb, wb);
    acc += a.x * b0 + a.y * b1 + a.z * b2 + a.w * b3;
  }
#elif defined(MM_NT)
  // a (B, M, K) as above; b (B, N, K): output columns 4col..4col+3 are 4 rows of b.
  ivec2 pa = texel_at(row * k4, wa);
  int rb = (batch * u_n + col * 4) * k4;
  ivec2 p0 = texel_at(rb, wb);
  ivec2 p1 = texel_at(rb + k4, wb);
  ivec2 p2 = texel_at(rb + 2 * k4, wb);
  ivec2 p3 = texel_at(rb + 3 * k4, wb);
  ivec2 one = ivec2(1, 0);
  for (int k = 0; k < k4; ++k) {
    vec4 a = texelFetch(u_x0, pa, 0);
    pa = advance(pa, one, wa);
    acc += vec4(dot(a, texelFetch(u_x1, p0, 0)), dot(a, texelFetch(u_x1, p1, 0)),
                dot(a, texelFetch(u_x1, p2, 0)), dot(a, texelFetch(u_x1, p3, 0)));
    p0 = advance(p0, one, wb);
    p1 = advance(p1, one, wb);
    p2 = advance(p2, one, wb);
    p3 = advance(p3, one, wb);
  }
#else  // MM_TN
  // a (B, K, M): element m of row k is component m % 4 of texel m / 4; b (B, K, N) as in NN.
  int m4 = u_m / 4;
  ivec2 pa = texel_at(batch * u_k * m4 + m / 4, wa);
  ivec2 sa = texel_step(m4, wa);
  int c = m % 4;
  ivec2 pb = texel_at(batch * u_k * n4 + col, wb);
  ivec2 sb = texel_step(n4, wb);
  for (int k = 0; k < u_k; ++k) {
    acc += component(texelFetch(u_x0, pa, 0), c) * texelFetch(u_x1, pb, 0);
    pa = advance(pa, sa, wa);
    pb = advance(pb, sb, wb);
  }
#endif
  return acc;
}
