// Primitive affine_sample (ops.py states the rule): one invocation per output element samples its
// image bilinearly at the affine image of the output pixel's centre, edges clamped, then applies
// the image's gain and offset. params row n: [a, b, c, d, e, f, gain, offset].
{{COMMON}}

struct Params {
  count: u32, in_h: u32, in_w: u32, c: u32,
  out_h: u32, out_w: u32,
}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> t: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn pixel(n: u32, row: u32, col: u32, ch: u32) -> f32 {
  return x[((n * p.in_h + row) * p.in_w + col) * p.c + ch];
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = workgroup_linear(wid, nwg) * 64u + lid;
  if (i >= p.count) { return; }
  let ch = i % p.c;
  let col = (i / p.c) % p.out_w;
  let row = (i / (p.c * p.out_w)) % p.out_h;
  let n = i / (p.c * p.out_w * p.out_h);
  let u = (2.0 * f32(col) + 1.0) / f32(p.out_w) - 1.0;
  let v = (2.0 * f32(row) + 1.0) / f32(p.out_h) - 1.0;
  let k = n * 8u;
  let sx = t[k] * u + t[k + 1u] * v + t[k + 2u];
  let sy = t[k + 3u] * u + t[k + 4u] * v + t[k + 5u];
  let w = f32(p.in_w);
  let h = f32(p.in_h);
  let px = clamp(((sx + 1.0) * w - 1.0) * 0.5, 0.0, w - 1.0);
  let py = clamp(((sy + 1.0) * h - 1.0) * 0.5, 0.0, h - 1.0);
  let x0 = u32(floor(px));
  let y0 = u32(floor(py));
  let x1 = min(x0 + 1u, p.in_w - 1u);
  let y1 = min(y0 + 1u, p.in_h - 1u);
  let wx = px - f32(x0);
  let wy = py - f32(y0);
  let top = pixel(n, y0, x0, ch) * (1.0 - wx) + pixel(n, y0, x1, ch) * wx;
  let bottom = pixel(n, y1, x0, ch) * (1.0 - wx) + pixel(n, y1, x1, ch) * wx;
  y[i] = (top * (1.0 - wy) + bottom * wy) * t[k + 6u] + t[k + 7u];
}
