// Batched float32 GEMM with WebAssembly SIMD: C = op(A) . op(B), all matrices row-major.
//
// Blocked like a BLAS (Goto): a KC x NC block of op(B) is packed into 8-column panels and an
// MC x KC block of op(A) into 4-row panels, so the 4x8 register micro-kernel streams both from
// contiguous memory whatever the transposes; packing is where transposes are absorbed. XNNPACK's
// 6x8 (12 accumulators + 2 B vectors + 1 broadcast: x86's 16 vector registers) spills under V8,
// which keeps one for itself: 4x8 ran a 1024^2 product 1.3-1.6x faster under node's V8 (fused
// multiply-adds 31-32 vs 19-23 GFLOP/s, separate ones 19-26 vs 16-18).
// An untransposed A of short rows is not packed: the micro-kernel reads its MR rows in place,
// each one sequentially, which costs the same per step and saves a copy of A (a convolution's
// im2col).
// The caller lends the packing buffers (`work`, gemm_work_floats() floats) so the module needs no
// allocator of its own and touches no memory but what it is handed.

#include "simd.h"

#define MR 4
#define NR 8
#define KC 256
#define MC 128
#define NC 512

// op(A)[i][p]: A is m x k (lda = k), or k x m when transposed.
static inline float a_at(const float *a, int trans, int m, int k, int i, int p) {
  return trans ? a[p * m + i] : a[i * k + p];
}

// Packs rows [i0, i0+mc) x columns [p0, p0+kc) of op(A) as MR-row panels, k-major, zero padded.
static void pack_a(const float *a, int trans, int m, int k, int i0, int mc, int p0, int kc,
                   float *out) {
  for (int ip = 0; ip < mc; ip += MR) {
    int rows = mc - ip < MR ? mc - ip : MR;
    for (int p = 0; p < kc; p++) {
      for (int r = 0; r < MR; r++)
        out[r] = r < rows ? a_at(a, trans, m, k, i0 + ip + r, p0 + p) : 0.0f;
      out += MR;
    }
  }
}

// Packs rows [p0, p0+kc) x columns [j0, j0+nc) of op(B) as NR-column panels, k-major, zero padded.
// op(B)[p][j]: B is k x n (ldb = n), or n x k when transposed.
static void pack_b(const float *b, int trans, int k, int n, int p0, int kc, int j0, int nc,
                   float *out) {
  for (int jp = 0; jp < nc; jp += NR) {
    int cols = nc - jp < NR ? nc - jp : NR;
    if (!trans && cols == NR) {
      const float *src = b + p0 * n + j0 + jp;
      for (int p = 0; p < kc; p++) {
        wasm_v128_store(out, wasm_v128_load(src));
        wasm_v128_store(out + 4, wasm_v128_load(src + 4));
        src += n;
        out += NR;
      }
      continue;
    }
    for (int p = 0; p < kc; p++) {
      for (int c = 0; c < NR; c++) {
        int j = j0 + jp + c;
        out[c] = c < cols ? (trans ? b[j * k + p0 + p] : b[(p0 + p) * n + j]) : 0.0f;
      }
      out += NR;
    }
  }
}

// acc (MR x NR) = an A panel . packed B panel over kc; then C tile = acc (+ C when `add`).
// The A panel is MR rows of A read in place (row r at a + r * lda, one float per step) or a
// packed panel (lda = 1, MR floats per step: `a_step`); both give the same sums in the same order.
// The accumulators stay in registers (MR * 2 of them, plus 2 for B and 1 for A's broadcast).
static void micro_kernel(int kc, const float *ap, int lda, int a_step, const float *bp, float *c,
                         int ldc, int rows, int cols, int add) {
  v128_t acc[MR][2];
  const float *ar[MR];
  // Rows past the edge re-read the last real row: their sums are never stored.
  for (int r = 0; r < MR; r++) ar[r] = ap + (r < rows ? r : rows - 1) * lda;
  for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = wasm_f32x4_splat(0);
  for (int p = 0; p < kc; p++) {
    v128_t b0 = wasm_v128_load(bp), b1 = wasm_v128_load(bp + 4);
    for (int r = 0; r < MR; r++) {
      v128_t a = wasm_v128_load32_splat(ar[r]);
      acc[r][0] = madd(a, b0, acc[r][0]);
      acc[r][1] = madd(a, b1, acc[r][1]);
      ar[r] += a_step;
    }
    bp += NR;
  }
  if (rows == MR && cols == NR) {
    for (int r = 0; r < MR; r++) {
      float *row = c + r * ldc;
      v128_t lo = acc[r][0], hi = acc[r][1];
      if (add) {
        lo = wasm_f32x4_add(lo, wasm_v128_load(row));
        hi = wasm_f32x4_add(hi, wasm_v128_load(row + 4));
      }
      wasm_v128_store(row, lo);
      wasm_v128_store(row + 4, hi);
    }
    return;
  }
  float tile[MR * NR];
  for (int r = 0; r < MR; r++) {
    wasm_v128_store(tile + r * NR, acc[r][0]);
    wasm_v128_store(tile + r * NR + 4, acc[r][1]);
  }
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) c[r * ldc + j] = tile[r * NR + j] + (add ? c[r * ldc + j] : 0.0f);
}

// A few rows of C (m < MR: a dense layer at inference, batch 1): packing op(B) would cost more
// than the product itself, so B is streamed once per NR-column block, straight from memory.
#define ROW_BLOCK 32
static void gemm_rows(int m, int n, int k, const float *a, int trans_a, const float *b, int trans_b,
                      float *c) {
  for (int i = 0; i < m; i++, c += n) {
    if (trans_b) {  // C[i][j] = dot(op(A) row i, B row j): vectorised over k
      for (int j = 0; j < n; j++) {
        const float *bj = b + (long)j * k;
        v128_t acc = wasm_f32x4_splat(0.0f);
        int p = 0;
        if (!trans_a)
          for (; p + 4 <= k; p += 4)
            acc = madd(wasm_v128_load(a + i * k + p), wasm_v128_load(bj + p), acc);
        float sum = (wasm_f32x4_extract_lane(acc, 0) + wasm_f32x4_extract_lane(acc, 1)) +
                    (wasm_f32x4_extract_lane(acc, 2) + wasm_f32x4_extract_lane(acc, 3));
        for (; p < k; p++) sum += a_at(a, trans_a, m, k, i, p) * bj[p];
        c[j] = sum;
      }
      continue;
    }
    for (int j0 = 0; j0 < n; j0 += ROW_BLOCK) {  // C[i][j0..] = sum over p of A[i][p] B[p][j0..]
      int cols = n - j0 < ROW_BLOCK ? n - j0 : ROW_BLOCK, vecs = cols / 4;
      v128_t acc[ROW_BLOCK / 4];
      float tail[3] = {0.0f, 0.0f, 0.0f};
      for (int v = 0; v < ROW_BLOCK / 4; v++) acc[v] = wasm_f32x4_splat(0.0f);
      for (int p = 0; p < k; p++) {
        const float *row = b + (long)p * n + j0;
        float av = a_at(a, trans_a, m, k, i, p);
        v128_t splat = wasm_f32x4_splat(av);
        for (int v = 0; v < vecs; v++)
          acc[v] = madd(splat, wasm_v128_load(row + 4 * v), acc[v]);
        for (int q = 4 * vecs; q < cols; q++) tail[q - 4 * vecs] += av * row[q];
      }
      for (int v = 0; v < vecs; v++) wasm_v128_store(c + j0 + 4 * v, acc[v]);
      for (int q = 4 * vecs; q < cols; q++) c[j0 + q] = tail[q - 4 * vecs];
    }
  }
}

static void gemm_one(int m, int n, int k, const float *a, int trans_a, const float *b, int trans_b,
                     float *c, float *work, const epilogue_t *e) {
  float *packed_b = work, *packed_a = work + KC * NC;
  if (k == 0 || m < MR) {
    if (k == 0)
      for (int i = 0; i < m * n; i++) c[i] = 0.0f;
    else
      gemm_rows(m, n, k, a, trans_a, b, trans_b, c);
    if (e)
      for (int i = 0; i < m; i++)
        apply_epilogue(e, c + (long)i * n, residual_at(e, (long)i * n), e->bias, n);
    return;
  }
  // An untransposed A of short rows (at most one k block: a convolution's im2col, a small
  // dense layer) is read in place, saving a copy of it. Longer rows are packed: MR row streams
  // a large power of two apart share cache sets (a 1024-wide A ran 4x slower in place).
  int packs_a = trans_a || k > KC;
  for (int j0 = 0; j0 < n; j0 += NC) {
    int nc = n - j0 < NC ? n - j0 : NC;
    for (int p0 = 0; p0 < k; p0 += KC) {
      int kc = k - p0 < KC ? k - p0 : KC, last = p0 + kc == k;
      pack_b(b, trans_b, k, n, p0, kc, j0, nc, packed_b);
      for (int i0 = 0; i0 < m; i0 += MC) {
        int mc = m - i0 < MC ? m - i0 : MC;
        if (packs_a) pack_a(a, trans_a, m, k, i0, mc, p0, kc, packed_a);
        for (int jr = 0; jr < nc; jr += NR) {
          int cols = nc - jr < NR ? nc - jr : NR;
          for (int ir = 0; ir < mc; ir += MR) {
            int rows = mc - ir < MR ? mc - ir : MR;
            float *tile = c + (i0 + ir) * n + j0 + jr;
            if (packs_a)
              micro_kernel(kc, packed_a + ir * kc, 1, MR, packed_b + jr * kc, tile, n, rows, cols,
                           p0 > 0);
            else
              micro_kernel(kc, a + (long)(i0 + ir) * k + p0, k, 1, packed_b + jr * kc, tile, n,
                           rows, cols, p0 > 0);
            if (e && last)  // the tile is summed: its epilogue runs while it is in cache
              for (int r = 0; r < rows; r++) {
                long at = (long)(i0 + ir + r) * n + j0 + jr;
                apply_epilogue(e, c + at, residual_at(e, at), e->bias + j0 + jr, cols);
              }
          }
        }
      }
    }
  }
}

// Floats of scratch memory gemm needs in `work`.
EXPORT int gemm_work_floats(void) { return KC * NC + MC * KC; }

// For each of `batch` matrices: C = op(A) . op(B) with op(A) m x k, op(B) k x n, C m x n.
// a_step / b_step are the floats between consecutive batch matrices (0 reuses one matrix).
EXPORT void gemm(int batch, int m, int n, int k, const float *a, int a_step, int trans_a,
                 const float *b, int b_step, int trans_b, float *c, float *work) {
  for (int i = 0; i < batch; i++)
    gemm_one(m, n, k, a + i * a_step, trans_a, b + i * b_step, trans_b, c + i * m * n, work, 0);
}

// gemm, then C + bias (n floats) and the activation `act` (simd.h's ACT_*): the calls a
// recording merges (epilogues.py), only ever made by a replay.
EXPORT void gemm_epilogue(int batch, int m, int n, int k, const float *a, int a_step, int trans_a,
                          const float *b, int b_step, int trans_b, const float *bias, int act,
                          float *c, float *work) {
  epilogue_t e = {0, bias, 0, act};
  for (int i = 0; i < batch; i++)
    gemm_one(m, n, k, a + i * a_step, trans_a, b + i * b_step, trans_b, c + i * m * n, work, &e);
}

// gemm, then bias + (C + residual): a convolution whose bias is added after its block's skip
// connection (how TensorFlow's optimizer leaves MobileNet-style blocks), merged by a recording.
EXPORT void gemm_residual(int batch, int m, int n, int k, const float *a, int a_step, int trans_a,
                          const float *b, int b_step, int trans_b, const float *residual,
                          const float *bias, float *c, float *work) {
  for (int i = 0; i < batch; i++) {
    epilogue_t e = {residual + i * m * n, bias, 1, ACT_NONE};
    gemm_one(m, n, k, a + i * a_step, trans_a, b + i * b_step, trans_b, c + i * m * n, work, &e);
  }
}
