// A workgroup computes tiles group, group + G, ... (G: workgroups launched; fewer than tiles on a
// software adapter, see linalg.py). The tile index is uniform per workgroup, so the barriers in
// tile() stay in uniform control flow.
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let tiles = p.tiles_m * p.tiles_n * p.batches * p.splits;
  for (var group = workgroup_linear(wid, nwg); group < tiles; group += nwg.x * nwg.y * nwg.z) {
    tile(group, lid);
  }
}
