// Primitive random_uniform: element i of draw (seed, stream, counter), the hash of
// backends/counter_hash.py (lowbias32) on highp uint, whose arithmetic wraps modulo 2^32 as
// numpy's uint32 and WGSL's u32 do. Input 0 is the counter, an integer-valued scalar.
uniform int u_key[2];   // the (seed, stream) key as 16-bit halves: an int keeps them exact
uniform int u_shift;    // 32 - bits
uniform float u_scale;  // 2^-bits

uint lowbias32(uint v) {
  uint x = v;
  x ^= x >> 16u;
  x *= 0x7feb352du;
  x ^= x >> 15u;
  x *= 0x846ca68bu;
  x ^= x >> 16u;
  return x;
}

float value(int i) {
  uint key = (uint(u_key[0]) << 16u) | uint(u_key[1]);
  uint k = lowbias32(key ^ uint(x0(0)));
  uint h = lowbias32(lowbias32(uint(i) ^ k) + k);
  return float(h >> uint(u_shift)) * u_scale;
}
