// Pooling forward (pooling.py fills it per op): one invocation per output element folds the real
// inputs of its window with ACCUMULATE from INIT, then stores RESULT (max: padding never wins,
// NaN propagates as in numpy; avg: the mean over the window's real inputs).
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
  var acc = {{INIT}};
  for (var kh = 0u; kh < p.k_h; kh++) {
    for (var kw = 0u; kw < p.k_w; kw++) {
      let h = origin.x + i32(kh);
      let w = origin.y + i32(kw);
      if (in_image(h, w)) {
        let v = x[input_index(n, u32(h), u32(w), ch)];
        acc = {{ACCUMULATE}};
      }
    }
  }
  y[i] = {{RESULT}};
}
