// expand, transpose, slice, pad and reshape: each output coordinate maps to an input coordinate
// (coord - low) along a stride; coordinates outside the input read the fill value (pad).
uniform int u_shape[6];   // output dims, left-padded with 1
uniform int u_stride[6];  // input flat stride per output dim (0 where broadcast)
uniform int u_low[6];
uniform int u_dim[6];     // input extent per output dim
uniform float u_fill;
uniform int u_rank;       // dims in use (the last u_rank; Python merges dims that it can)

float value(int i) {
  int src = 0;
  for (int d = 5; d >= 6 - u_rank; --d) {
    int coord = i % u_shape[d] - u_low[d];
    i /= u_shape[d];
    if (coord < 0 || coord >= u_dim[d]) return u_fill;
    src += coord * u_stride[d];
  }
  return x0(src);
}
