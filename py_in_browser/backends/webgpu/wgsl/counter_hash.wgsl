// Primitive random_uniform's hash (backends/counter_hash.py has the same in numpy, and the why):
// lowbias32 on wrapping u32 arithmetic, keyed by params word 1 (the seed and stream key).
fn lowbias32(v: u32) -> u32 {
  var x = v;
  x ^= x >> 16u;
  x *= 0x7feb352du;
  x ^= x >> 15u;
  x *= 0x846ca68bu;
  x ^= x >> 16u;
  return x;
}

// Value i of the draw keyed by k: the top bits of the hash (params word 2: 32 - bits) times
// 2^-bits (word 3: its f32 bit pattern), an exact f32 in [0, 1).
fn counter_uniform(i: u32, k: u32) -> f32 {
  let h = lowbias32(lowbias32(i ^ k) + k);
  return f32(h >> word(2u)) * bitcast<f32>(word(3u));
}
