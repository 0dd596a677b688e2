// A camera frame into a tensor: the frame's rgba8unorm texture (copyExternalImageToTexture, so
// texels are bytes / 255) becomes its (1, H, W, 3) float32 RGB, one invocation per pixel.
@group(0) @binding(0) var frame: texture_2d<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let size = textureDimensions(frame);
  let i = (wid.x + nwg.x * wid.y) * 64u + lid;
  if (i >= size.x * size.y) { return; }
  let texel = textureLoad(frame, vec2<u32>(i % size.x, i / size.x), 0);
  y[3u * i] = texel.r;
  y[3u * i + 1u] = texel.g;
  y[3u * i + 2u] = texel.b;
}
