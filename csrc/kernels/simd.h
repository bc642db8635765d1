/*
** The kernels of kernels/simd.c: the dot products and checksum sums on the path chosen at run
** time, for the SQL functions (functions/scalar.c), vector_index's k-nearest first pass,
** vector_index and the model (model/model.c follows hs_simd_path()).  Nothing here knows SQLite.
*/
#ifndef HYBRIDSQL_KERNELS_SIMD_H
#define HYBRIDSQL_KERNELS_SIMD_H
#include <math.h>
#include <string.h>

#include "common.h"

/* ab = a.b and bb = b.b in double precision, a and b at any alignment. */
typedef void (*Dot2Fn)(const float *a, const float *b, int64_t d, double *ab, double *bb);
/* cosine_topk's first pass: ab = a.b and bb = b.b in float32, a and b at any alignment. */
typedef void (*Dot2FFn)(const float *a, const float *b, int64_t d, float *ab, float *bb);
/* The packed scan's first pass: int8 with int32 sums. */
typedef int32_t (*DotI8Fn)(const int8_t *a, const int8_t *b, int64_t d);

/* The paths chosen for the process: set by dot2(), which the extension's entry point calls at
** load, before any other kernel runs; dot2f_fn and doti8_fn hold the generic paths until then. */
extern Dot2Fn dot2_fn;
extern Dot2FFn dot2f_fn;
extern DotI8Fn doti8_fn;

/* The double-precision dot product, chosen on the first call. */
Dot2Fn dot2(void);

/* The path the kernels run: avx2+fma, sse2, neon or generic. */
HS_EXPORT const char *hs_simd_path(void);

/* Requirement 4: the cosine of a and b; the index of b's first value that is NaN or infinite,
** -1 when there is none. */
HS_EXPORT double hs_cosine(const float *a, const float *b, int64_t d);
HS_EXPORT int64_t hs_first_nonfinite(const float *v, int64_t d);

/* v.v by fn. */
double squared_norm(const float *v, int64_t d, Dot2Fn fn);

/*
** A float read at any alignment: the dot products take vectors straight from
** SQLite's pages, which do not align them.  Compilers make this one load.
*/
static inline double loadf(const float *p) {
  float x;
  memcpy(&x, p, sizeof(x));
  return x;
}

/* Requirement 4 from the dot product and both squared norms. */
static inline double cosine_from(double ab, double qq, double bb) {
  if (qq == 0.0 || bb == 0.0) return 0.0;
  double c = ab / sqrt(qq * bb);
  return c > 1.0 ? 1.0 : (c < -1.0 ? -1.0 : c);
}

/* Format 3's checksum (vector_index/storage.c): the sum of n bytes of a T_codes row that start
** at its byte `first`, in chunks of HS_SUM_CHUNK bytes; and that of a row of n zero bytes. */
#define HS_SUM_CHUNK 256
uint64_t codes_sum(const uint8_t *p, int64_t n, int64_t first);
uint64_t zeros_sum(int64_t n);

#endif
