// The strided kernel's common case, without its loop over dims: a slice or pad of the last dim
// of rows (or of one row). Output element (row, col) reads input element row * stride + col -
// low where 0 <= col - low < columns, else the fill value. On SwiftShader this is about half
// the time of the general kernel (W2's 128 x 10 weight padded to 128 x 12: 0.23 -> 0.13 ms).
uniform ivec4 u_rows;  // output columns, input row stride, -low, input columns
uniform float u_fill;

float value(int i) {
  int row = i / u_rows.x;
  int col = i - row * u_rows.x + u_rows.z;
  bool inside = col >= 0 && col < u_rows.w;
  return inside ? x0(row * u_rows.y + clamp(col, 0, u_rows.w - 1)) : u_fill;
}
