// A reduction with one workgroup per output (or per chunk of one): each invocation folds a
// strided share of the reduced elements, then a shared-memory tree combines the 64 results.
{{REDUCE_COMMON}}

var<workgroup> partial: array<Acc, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let group = workgroup_linear(wid, nwg);
  let parts = word(2u);
  // Uniform per workgroup, so the barriers below stay in uniform control flow.
  if (group >= word(0u) * parts) { return; }
  let base = offset_of(group / parts, word(4u), KEPT_DIMS, KEPT_STRIDES);
  let begin = (group % parts) * word(3u);
  let end = min(word(1u), begin + word(3u));
  var acc = identity();
  for (var r = begin + lid; r < end; r += 64u) {
    let value = src[base + offset_of(r, word(5u), REDUCED_DIMS, REDUCED_STRIDES)];
    acc = combine(acc, Acc(value, r));
  }
  partial[lid] = acc;
  workgroupBarrier();
  for (var half = 32u; half > 0u; half >>= 1u) {
    if (lid < half) { partial[lid] = combine(partial[lid], partial[lid + half]); }
    workgroupBarrier();
  }
  if (lid == 0u) { dst[group] = finish(partial[0]); }
}
