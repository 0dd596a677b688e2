// gemm.wgsl's product without workgroup memory, for adapters that run on the CPU (SwiftShader):
// there a kernel's compile time grows with its workgroup memory (Dawn zero-initialises it; 8 KB
// cost ~1 s per pipeline on SwiftShader, a CNN step needs eight GEMM pipelines) and every
// barrier switches fibers, while the CPU's caches give the reuse that staging gives a GPU.
// Each invocation computes the same 4x4 values of C as in gemm.wgsl, reading its operands with
// the same loaders directly: per k, one column lookup, 4 values of A, 4 of B, 16 multiply-adds.
// Split-K as in gemm.wgsl. The tile shape comes in params, so that one pipeline (one compile)
// serves every product of a loader pair.
{{COMMON}}

{{GEMM_IO}}

{{TILE_LOOP}}

fn tile(group: u32, lid: u32) {
  // The tile (4 * threads_m rows x 4 * threads_n columns, as gemm.wgsl's for this C) comes in
  // params: one pipeline serves every tile shape.
  let threads_n = p.threads_n;
  let threads_m = 64u / threads_n;
  let tile_n = group % p.tiles_n;
  let tile_m = (group / p.tiles_n) % p.tiles_m;
  let batch = (group / (p.tiles_n * p.tiles_m)) % p.batches;
  let split = group / (p.tiles_n * p.tiles_m * p.batches);
  let k_begin = split * p.k_per_split;
  let k_end = min(p.k, k_begin + p.k_per_split);
  // Invocation (tx, ty) owns rows ty + threads_m * i and columns tx + threads_n * j: neighbours
  // read neighbouring columns of B and share their rows of A.
  let row = tile_m * 4u * threads_m + lid / threads_n;
  let col = tile_n * 4u * threads_n + lid % threads_n;
  // Rows and columns past C's edge load clamped (in-bounds) operands; their values are not stored.
  let last_row = p.m - 1u;
  let last_col = p.n - 1u;
  let r0 = {{LOAD_A}}_row(min(row, last_row));
  let r1 = {{LOAD_A}}_row(min(row + threads_m, last_row));
  let r2 = {{LOAD_A}}_row(min(row + 2u * threads_m, last_row));
  let r3 = {{LOAD_A}}_row(min(row + 3u * threads_m, last_row));
  let c0 = min(col, last_col);
  let c1 = min(col + threads_n, last_col);
  let c2 = min(col + 2u * threads_n, last_col);
  let c3 = min(col + 3u * threads_n, last_col);
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  for (var k = k_begin; k < k_end; k++) {
    let kc = {{LOAD_A}}_col(k);
    let bv = vec4<f32>({{LOAD_B}}(batch, k, c0), {{LOAD_B}}(batch, k, c1),
                       {{LOAD_B}}(batch, k, c2), {{LOAD_B}}(batch, k, c3));
    acc0 = fma(vec4<f32>({{LOAD_A}}(batch, r0, kc)), bv, acc0);
    acc1 = fma(vec4<f32>({{LOAD_A}}(batch, r1, kc)), bv, acc1);
    acc2 = fma(vec4<f32>({{LOAD_A}}(batch, r2, kc)), bv, acc2);
    acc3 = fma(vec4<f32>({{LOAD_A}}(batch, r3, kc)), bv, acc3);
  }
  let c_base = (split * p.batches + batch) * p.m * p.n;
  store_row(c_base, row, col, threads_n, acc0);
  store_row(c_base, row + threads_m, col, threads_n, acc1);
  store_row(c_base, row + 2u * threads_m, col, threads_n, acc2);
  store_row(c_base, row + 3u * threads_m, col, threads_n, acc3);
}
