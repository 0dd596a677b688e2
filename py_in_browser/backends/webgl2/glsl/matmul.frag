// Batched matmul with optional transposes expressed as strides: out[b, m, n] = sum_k a * b.
// With EPILOGUE_ADD it adds input 2 (of the output's shape: a layer's bias, a broadcast view read
// periodically) and with EPILOGUE_ACT applies activation() after: a small layer in one draw.
// With EPILOGUE_THEN it is a fused program's f(product, input 2) (an activation's gradient).
uniform int u_m;
uniform int u_n;
uniform int u_k;
uniform ivec3 u_a_stride;  // batch, row (m), inner (k)
uniform ivec3 u_b_stride;  // batch, inner (k), column (n)

float value(int i) {
  int col = i % u_n;
  int row = (i / u_n) % u_m;
  int batch = i / (u_n * u_m);
  int a = batch * u_a_stride.x + row * u_a_stride.y;
  int b = batch * u_b_stride.x + col * u_b_stride.z;
  float acc = 0.0;
  for (int k = 0; k < u_k; ++k) {
    acc += x0(a + k * u_a_stride.z) * x1(b + k * u_b_stride.y);
  }
#ifdef EPILOGUE_ADD
  acc += x2(i);
#endif
#ifdef EPILOGUE_ACT
  acc = activation(acc);
#endif
#ifdef EPILOGUE_THEN
  acc = f(acc, x2(i));
#endif
  return acc;
}
