/*
** The forward pass's kernels (csrc/model/ops.c): matmul for each weight type, attention and
** GELU, on the instruction set chosen once a process.  model/model.c runs a window through them.
*/
#ifndef HYBRIDSQL_MODEL_OPS_H
#define HYBRIDSQL_MODEL_OPS_H
#include <stdint.h>

#include "common.h"
#include "weights.h"

#define HS_KEYS 64  /* attention's keys are taken in groups of this many (its scratch's rows) */
#define HS_HEAD 128 /* a head's dimensions, at most */

typedef struct {
  /* out[t][j] = (x[t] . column j of l) + l->bias[j] for t < T, j < N (x is [T][K]); wide is
  ** scratch of K * 32 floats */
  void (*matmul)(float *out, const float *x, const Linear *l, int T, int K, int N, float *wide);
  /* every head's softmax(q k^T / sqrt(head_dim)) v for T tokens, the heads side by side in
  ** out[T][D]; kt is scratch of head_dim * S floats and att of S, S = T rounded up to HS_KEYS */
  void (*attention)(float *out, const float *q, const float *k, const float *v, float *kt,
                    float *att, int T, int D, int H);
  void (*gelu)(float *h, int64_t n); /* in place, erf's GELU */
  const char *name;                  /* avx512, avx2+fma, neon or generic */
} HsOps;

/* The kernels of this process: hs_simd_path()'s path, with AVX-512's matmul where the CPU has
** it and HYBRIDSQL_SIMD names no path. */
HsOps hs_ops(void);

#endif
