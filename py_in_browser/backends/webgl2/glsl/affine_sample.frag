// Primitive affine_sample (ops.py states the rule): output element i samples its image (input 0,
// NHWC) bilinearly at the affine image of its pixel's centre, edges clamped, then applies the
// image's gain and offset. Input 1 holds one row [a, b, c, d, e, f, gain, offset] per image.
uniform ivec4 u_x;  // images N, H, W, C
uniform ivec2 u_o;  // output OH, OW

float pixel(int n, int row, int col, int c) { return x0(((n * u_x.y + row) * u_x.z + col) * u_x.w + c); }

float value(int i) {
  int c = i % u_x.w;
  int t = i / u_x.w;
  int col = t % u_o.y;
  t /= u_o.y;
  int row = t % u_o.x;
  int n = t / u_o.x;
  float u = (2.0 * float(col) + 1.0) / float(u_o.y) - 1.0;
  float v = (2.0 * float(row) + 1.0) / float(u_o.x) - 1.0;
  int k = n * 8;
  float sx = x1(k) * u + x1(k + 1) * v + x1(k + 2);
  float sy = x1(k + 3) * u + x1(k + 4) * v + x1(k + 5);
  float w = float(u_x.z);
  float h = float(u_x.y);
  float px = clamp(((sx + 1.0) * w - 1.0) * 0.5, 0.0, w - 1.0);
  float py = clamp(((sy + 1.0) * h - 1.0) * 0.5, 0.0, h - 1.0);
  int c0 = int(floor(px));
  int r0 = int(floor(py));
  int c1 = min(c0 + 1, u_x.z - 1);
  int r1 = min(r0 + 1, u_x.y - 1);
  float wx = px - float(c0);
  float wy = py - float(r0);
  float top = pixel(n, r0, c0, c) * (1.0 - wx) + pixel(n, r0, c1, c) * wx;
  float bottom = pixel(n, r1, c0, c) * (1.0 - wx) + pixel(n, r1, c1, c) * wx;
  return (top * (1.0 - wy) + bottom * wy) * x1(k + 6) + x1(k + 7);
}
