// A recorded training step run in one call: the kernel calls the step made when it ran eagerly,
// encoded as words (call id, argument count, arguments: int32 values and addresses), preceded by
// the byte copies that bring in the new batch and the current state. Python builds the words
// (cpu_simd/recording.py); CALL_* follow its REPLAYED order.

#include "simd.h"

void gemm(int, int, int, int, const float *, int, int, const float *, int, int, float *, float *);
void gemm_epilogue(int, int, int, int, const float *, int, int, const float *, int, int,
                   const float *, int, float *, float *);
void im2col(const window_t *, const float *, float *);
void col2im(const window_t *, const float *, float *);
void max_pool2d(const window_t *, const float *, float *);
void max_pool2d_grad(const window_t *, const float *, const float *, float *);
void avg_pool2d(const window_t *, const float *, float *);
void avg_pool2d_grad(const window_t *, const float *, float *);
void fused(int, const int *, int, const float *, int, const void *const *, const int *,
           const int *, float *);
void copy(const void *, void *, int);
void copy_strided(const int *, int, int, const void *, void *);
void sum_rows(int, int, const float *, float *);
void max_rows(int, int, const float *, float *);
void compare(int, int, int, const void *, int, const void *, int, unsigned char *);
void select(int, int, const unsigned char *, int, const void *, int, const void *, int, void *);
void depthwise_conv2d(const window_t *, int, const float *, const float *, float *);
void gemm_residual(int, int, int, int, const float *, int, int, const float *, int, int,
                   const float *, const float *, float *, float *);
void depthwise_epilogue(const window_t *, int, const float *, const float *, const float *, int,
                        float *);

enum {
  CALL_GEMM, CALL_IM2COL, CALL_COL2IM, CALL_MAX_POOL2D, CALL_MAX_POOL2D_GRAD, CALL_AVG_POOL2D,
  CALL_AVG_POOL2D_GRAD, CALL_FUSED, CALL_COPY, CALL_COPY_STRIDED, CALL_SUM_ROWS, CALL_MAX_ROWS,
  CALL_COMPARE, CALL_SELECT, CALL_GEMM_EPILOGUE, CALL_DEPTHWISE_CONV2D, CALL_GEMM_RESIDUAL,
  CALL_DEPTHWISE_EPILOGUE,
};

#define P(k) ((void *)a[k])

// copies: (source, destination, bytes) triples; words: the step's calls.
EXPORT void replay(const int *copies, int count, const int *words, int length) {
  for (int c = 0; c < count; c++)
    copy((const void *)copies[3 * c], (void *)copies[3 * c + 1], copies[3 * c + 2]);
  for (int at = 0; at < length; at += 2 + words[at + 1]) {
    const int *a = words + at + 2;
    switch (words[at]) {
      case CALL_GEMM: gemm(a[0], a[1], a[2], a[3], P(4), a[5], a[6], P(7), a[8], a[9], P(10), P(11)); break;
      case CALL_IM2COL: im2col(P(0), P(1), P(2)); break;
      case CALL_COL2IM: col2im(P(0), P(1), P(2)); break;
      case CALL_MAX_POOL2D: max_pool2d(P(0), P(1), P(2)); break;
      case CALL_MAX_POOL2D_GRAD: max_pool2d_grad(P(0), P(1), P(2), P(3)); break;
      case CALL_AVG_POOL2D: avg_pool2d(P(0), P(1), P(2)); break;
      case CALL_AVG_POOL2D_GRAD: avg_pool2d_grad(P(0), P(1), P(2)); break;
      case CALL_FUSED: fused(a[0], P(1), a[2], P(3), a[4], P(5), P(6), P(7), P(8)); break;
      case CALL_COPY: copy(P(0), P(1), a[2]); break;
      case CALL_COPY_STRIDED: copy_strided(P(0), a[1], a[2], P(3), P(4)); break;
      case CALL_SUM_ROWS: sum_rows(a[0], a[1], P(2), P(3)); break;
      case CALL_MAX_ROWS: max_rows(a[0], a[1], P(2), P(3)); break;
      case CALL_COMPARE: compare(a[0], a[1], a[2], P(3), a[4], P(5), a[6], P(7)); break;
      case CALL_SELECT: select(a[0], a[1], P(2), a[3], P(4), a[5], P(6), a[7], P(8)); break;
      case CALL_DEPTHWISE_CONV2D: depthwise_conv2d(P(0), a[1], P(2), P(3), P(4)); break;
      case CALL_DEPTHWISE_EPILOGUE:
        depthwise_epilogue(P(0), a[1], P(2), P(3), P(4), a[5], P(6));
        break;
      case CALL_GEMM_RESIDUAL:
        gemm_residual(a[0], a[1], a[2], a[3], P(4), a[5], a[6], P(7), a[8], a[9], P(10), P(11),
                      P(12), P(13));
        break;
      default:  // CALL_GEMM_EPILOGUE
        gemm_epilogue(a[0], a[1], a[2], a[3], P(4), a[5], a[6], P(7), a[8], a[9], P(10), a[11],
                      P(12), P(13));
        break;
    }
  }
}
