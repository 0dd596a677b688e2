// A reduction over few elements: one invocation per output folds them in order (a workgroup per
// output would leave most of its invocations idle).
{{REDUCE_COMMON}}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let o = workgroup_linear(wid, nwg) * 64u + lid;
  if (o >= word(0u)) { return; }
  let base = offset_of(o, word(4u), KEPT_DIMS, KEPT_STRIDES);
  var acc = identity();
  for (var r = 0u; r < word(1u); r++) {
    acc = combine(acc, Acc(src[base + offset_of(r, word(5u), REDUCED_DIMS, REDUCED_STRIDES)], r));
  }
  dst[o] = finish(acc);
}
