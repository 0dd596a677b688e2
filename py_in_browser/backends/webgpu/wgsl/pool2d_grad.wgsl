// Pooling gradient (pooling.py fills it per op): one invocation per input element gathers, from
// every output window covering it that ROUTES its gradient here, that window's SHARE of g (a
// gather: no atomics, a deterministic sum order). max routes to the window's first maximum
// (row-major, padding as -inf, NaN first: numpy's argmax), as TensorFlow and PyTorch do; avg
// shares g / window size with every real input.
{{POOL_COMMON}}

{{BINDINGS}}

{{FUNCTIONS}}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = invocation_index(wid, nwg, lid);
  if (i >= p.count) { return; }
  let at = nhwc_position(i, p.in_h, p.in_w);
  let n = at.x;
  let h = at.y;
  let w = at.z;
  let ch = at.w;
  var total = 0.0;
  for (var kh = 0u; kh < p.k_h; kh++) {
    let oh = window_at(h, p.pad_top, kh, p.stride_h, p.out_h);
    for (var kw = 0u; kw < p.k_w; kw++) {
      let ow = window_at(w, p.pad_left, kw, p.stride_w, p.out_w);
      if (oh >= 0 && ow >= 0 && {{ROUTES}}) {
        total += {{SHARE}};
      }
    }
  }
  dx[i] = total;
}
