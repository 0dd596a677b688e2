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

// Tile `group` as its tile of C (row and column tile), batch and K slice (split-K).
struct TileAt { m: u32, n: u32, batch: u32, k_begin: u32, k_end: u32, c_slice: u32 }

fn tile_at(group: u32) -> TileAt {
  let per_split = p.tiles_n * p.tiles_m * p.batches;
  let split = group / per_split;
  let k_begin = split * p.k_per_split;
  return TileAt((group / p.tiles_n) % p.tiles_m, group % p.tiles_n,
                (group / (p.tiles_n * p.tiles_m)) % p.batches, k_begin,
                min(p.k, k_begin + p.k_per_split), split * p.batches);
}
