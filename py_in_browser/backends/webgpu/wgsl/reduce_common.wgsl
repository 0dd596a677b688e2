// Bindings, params and the accumulator shared by reduce_tree.wgsl and reduce_serial.wgsl.
{{COMMON}}

@group(0) @binding(0) var<storage, read> src: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> dst: array<{{OUT_T}}>;

// Word layout (reductions.py): outputs, reduce_size, parts, chunk, kept_rank, reduced_rank,
// 2 unused, then tables of MAX_RANK words: kept dims, kept strides, reduced dims, reduced strides.
// Output o reduces src[offset(o over kept) + offset(r over reduced)] for r in [0, reduce_size);
// with parts > 1 each workgroup reduces one chunk of r and writes a partial result.
struct Params { words: array<vec4<u32>, 10> }
@group(0) @binding(2) var<uniform> params: Params;

const KEPT_DIMS: u32 = 8u;
const KEPT_STRIDES: u32 = 16u;
const REDUCED_DIMS: u32 = 24u;
const REDUCED_STRIDES: u32 = 32u;
const NO_INDEX: u32 = 0xffffffffu;

fn word(i: u32) -> u32 { return params.words[i >> 2u][i & 3u]; }

// Source offset of a row-major index over `rank` axes described at tables dims_at/strides_at.
fn offset_of(index: u32, rank: u32, dims_at: u32, strides_at: u32) -> u32 {
  var rest = index;
  var offset = 0u;
  for (var axis = rank; axis > 0u; axis--) {
    let d = axis - 1u;
    let dim = word(dims_at + d);
    offset += (rest % dim) * word(strides_at + d);
    rest = rest / dim;
  }
  return offset;
}

// The running result; `index` is the position along the reduced axes (argmax only).
struct Acc { value: {{T}}, index: u32 }

fn is_nan_value(x: {{T}}) -> bool { {{IS_NAN}} }

// numpy's argmax: the first NaN wins, otherwise the first of the largest values.
fn argmax_better(candidate: Acc, best: Acc) -> bool {
  if (candidate.index == NO_INDEX) { return false; }
  if (best.index == NO_INDEX) { return true; }
  let candidate_nan = is_nan_value(candidate.value);
  let best_nan = is_nan_value(best.value);
  if (candidate_nan || best_nan) {
    return candidate_nan && (!best_nan || candidate.index < best.index);
  }
  return candidate.value > best.value
      || (candidate.value == best.value && candidate.index < best.index);
}

fn identity() -> Acc { return Acc({{IDENTITY}}, NO_INDEX); }

fn combine(a: Acc, b: Acc) -> Acc { {{COMBINE}} }

fn finish(a: Acc) -> {{OUT_T}} { {{FINISH}} }
