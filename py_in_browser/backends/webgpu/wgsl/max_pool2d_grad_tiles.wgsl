// Max pooling's gradient where the windows tile the input exactly (strides = pool size, no
// padding, no input left over: a CNN's 2x2 pooling of even sizes): one invocation per output
// window finds its first maximum once (first_max_tap.wgsl) and writes its whole window of dx,
// g there and zero elsewhere, instead of pool2d_grad.wgsl's invocation per input element that
// searches every window covering it. Each dx element is 0.0 + its share, as there.
{{POOL_COMMON}}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> g: array<f32>;
@group(0) @binding(2) var<storage, read_write> dx: array<f32>;

{{FUNCTIONS}}
// Window `i` of the pooled output: its first maximum takes g[i], the rest of it zero.
fn route_window(i: u32) {
  let at = nhwc_position(i, p.out_h, p.out_w);
  let best = first_max_tap(at.x, at.y, at.z, at.w);
  let share = g[i];
  for (var tap = 0u; tap < p.k_h * p.k_w; tap++) {
    var total = 0.0;
    if (tap == best) { total += share; }
    let h = at.y * p.k_h + tap / p.k_w;
    let w = at.z * p.k_w + tap % p.k_w;
    dx[input_index(at.x, h, w, at.w)] = total;
  }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let window = invocation_index(wid, nwg, lid);
  if (window < p.count) { route_window(window); }
}
