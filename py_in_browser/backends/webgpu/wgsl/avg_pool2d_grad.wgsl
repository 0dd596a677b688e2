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
  let ch = i % p.c;
  let w = (i / p.c) % p.in_w;
  let h = (i / (p.c * p.in_w)) % p.in_h;
  let n = i / (p.c * p.in_w * p.in_h);
  var total = 0.0;
  for (var kh = 0u; kh < p.k_h; kh++) {
    let oh = window_at(h, p.pad_top, kh, p.stride_h, p.out_h);
    for (var kw = 0u; kw < p.k_w; kw++) {
      let ow = window_at(w, p.pad_left, kw, p.stride_w, p.out_w);
      if (oh >= 0 && ow >= 0) {
        let o = ((n * p.out_h + u32(oh)) * p.out_w + u32(ow)) * p.c + ch;
        total += g[o] / window_size(u32(oh), u32(ow));
      }
    }
  }
  dx[i] = total;
}
