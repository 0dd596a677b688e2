// Pooling forward over whole vec4s of channels (pooling.py, where the channels are a multiple
// of 4): one invocation per output pixel and vec4, folding its window as pool2d.wgsl does per
// lane (same ACCUMULATE, so the same bits). Four channels per invocation divide its index
// arithmetic and window loop by four: on SwiftShader, where integer division is per lane, I3's
// 64x64x16 max pooling took 0.48 ms against 0.86 ms on pool2d.wgsl (alternated in one page).
{{POOL_COMMON}}

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> y: array<vec4<f32>>;

// pool2d.wgsl's max per lane: a NaN on either side wins.
fn max_nan4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(f32_max_nan(a.x, b.x), f32_max_nan(a.y, b.y), f32_max_nan(a.z, b.z),
                   f32_max_nan(a.w, b.w));
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = invocation_index(wid, nwg, lid);
  if (i >= p.count) { return; }
  let c4 = p.c / 4u;
  let ch4 = i % c4;
  let pixel = i / c4;
  let ow = pixel % p.out_w;
  let rest = pixel / p.out_w;
  let oh = rest % p.out_h;
  let n = rest / p.out_h;
  let origin = window_origin(oh, ow);
  var acc = {{INIT}};
  for (var kh = 0u; kh < p.k_h; kh++) {
    let h = origin.x + i32(kh);
    for (var kw = 0u; kw < p.k_w; kw++) {
      let w = origin.y + i32(kw);
      if (in_image(h, w)) {
        let v = x[((n * p.in_h + u32(h)) * p.in_w + u32(w)) * c4 + ch4];
        acc = {{ACCUMULATE}};
      }
    }
  }
  y[i] = {{RESULT}};
}
