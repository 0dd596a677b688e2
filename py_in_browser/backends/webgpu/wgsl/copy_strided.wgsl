// The one layout kernel: walks an iteration shape and copies src[src_offset] to dst[dst_offset],
// both offsets linear in the coordinates. expand, reshape, transpose, slice and pad gather into a
// contiguous output; concat scatters each contiguous input into its part of the output. A source
// coordinate outside [0, src_dim) (pad's border) reads the fill value instead.
{{COMMON}}

@group(0) @binding(0) var<storage, read> src: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> dst: array<{{T}}>;

// Word layout (layout.py): count, rank, src_base, dst_base, fill bits, 3 unused, then per-axis
// tables of MAX_RANK words: dims, src_strides, dst_strides, src_lo (i32), src_dims.
struct Params { words: array<vec4<u32>, 12> }
@group(0) @binding(2) var<uniform> params: Params;

const DIMS: u32 = 8u;
const SRC_STRIDES: u32 = 16u;
const DST_STRIDES: u32 = 24u;
const SRC_LO: u32 = 32u;
const SRC_DIMS: u32 = 40u;

fn word(i: u32) -> u32 { return params.words[i >> 2u][i & 3u]; }

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = workgroup_linear(wid, nwg) * 64u + lid;
  if (i >= word(0u)) { return; }
  var rest = i;
  var src_offset = word(2u);
  var dst_offset = word(3u);
  var inside = true;
  for (var axis = word(1u); axis > 0u; axis--) {
    let d = axis - 1u;
    let dim = word(DIMS + d);
    let coord = rest % dim;
    rest = rest / dim;
    let src_coord = i32(coord) - bitcast<i32>(word(SRC_LO + d));
    inside = inside && src_coord >= 0 && u32(src_coord) < word(SRC_DIMS + d);
    src_offset += u32(src_coord) * word(SRC_STRIDES + d);
    dst_offset += coord * word(DST_STRIDES + d);
  }
  var value = bitcast<{{T}}>(word(4u));
  if (inside) { value = src[src_offset]; }
  dst[dst_offset] = value;
}
