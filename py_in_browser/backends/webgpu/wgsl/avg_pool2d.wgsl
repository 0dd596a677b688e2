// avg_pool2d: one invocation per output element, averaging the real inputs of its window.
{{POOL_COMMON}}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = invocation_index(wid, nwg, lid);
  if (i >= p.count) { return; }
  let at = nhwc_position(i, p.out_h, p.out_w);
  let n = at.x;
  let oh = at.y;
  let ow = at.z;
  let ch = at.w;
  let origin = window_origin(oh, ow);
  var total = 0.0;
  for (var kh = 0u; kh < p.k_h; kh++) {
    for (var kw = 0u; kw < p.k_w; kw++) {
      let h = origin.x + i32(kh);
      let w = origin.y + i32(kw);
      if (in_image(h, w)) { total += x[input_index(n, u32(h), u32(w), ch)]; }
    }
  }
  y[i] = total / window_size(oh, ow);
}
