// avg_pool2d_grad: one invocation per input element gathers g / window size from every output
// window covering it (a gather, so no atomics and a deterministic sum order).
{{POOL_COMMON}}

@group(0) @binding(0) var<storage, read> g: array<f32>;
@group(0) @binding(1) var<storage, read_write> dx: array<f32>;

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
      if (oh >= 0 && ow >= 0) {
        let o = output_index(n, u32(oh), u32(ow), ch);
        total += g[o] / window_size(u32(oh), u32(ow));
      }
    }
  }
  dx[i] = total;
}
