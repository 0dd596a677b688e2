// reduce_sum over the leading axes of a tensor (rows x columns, columns in whole vec4s: a bias
// gradient) on a software adapter (column_sums.py): each invocation adds one vec4 of columns
// down one slice of the rows, in order, and stores it; the slices' sums are added after (a
// reduction dispatch) when there are several. reduce_tree.wgsl's per-element index walk and
// barriers made W3s's two bias gradients 5-9 ms each on SwiftShader.
{{COMMON}}

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> y: array<vec4<f32>>;

struct Params { invocations: u32, columns4: u32, rows: u32, per_slice: u32 }
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = workgroup_linear(wid, nwg) * 64u + lid;
  if (i >= p.invocations) { return; }
  let column = i % p.columns4;
  let slice = i / p.columns4;
  let begin = slice * p.per_slice;
  let end = min(p.rows, begin + p.per_slice);
  var acc = vec4<f32>(0.0);
  for (var r = begin; r < end; r++) { acc += x[r * p.columns4 + column]; }
  y[i] = acc;
}
