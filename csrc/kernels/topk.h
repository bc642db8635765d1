/*
** The kernels of kernels/topk.c: the heap of the k best, the int8 records that vector_index's
** first pass reads, a map of int64 keys.  Nothing here knows SQLite.  The SQL functions
** (cosine_topk, bm25_candidate) and vector_index use them.
*/
#ifndef HYBRIDSQL_KERNELS_TOPK_H
#define HYBRIDSQL_KERNELS_TOPK_H
#include <math.h>
#include <string.h>

#include "common.h"

/* ------------------------------------------------------------------------
** A bounded min-heap of (score, id): the root is the worst kept row.
** "Better" is a higher score, then a lower id (Requirement 5).
*/
typedef struct Hit {
  double score;
  int64_t id;
} Hit;

void heap_push(Hit *h, int64_t *n, int64_t k, Hit x);
/* qsort's order of hits: best first (Requirement 5). */
int cmp_hits(const void *a, const void *b);

/* The score a new hit must beat to enter a heap of the k best: its worst once full. */
static inline double heap_bar(const Hit *h, int64_t n, int64_t k) {
  return n == k ? h[0].score : -INFINITY;
}

/*
** How far a float32 cosine can be from the exact one, for d dimensions: the
** dot product and both norms are sums of d products, each sum off by at most
** about d * 2^-24 of the sum of its terms' magnitudes (Higham), which for a
** cosine is at most 1.  Four times that is a safe margin.  It holds while no
** product underflows or overflows, for vectors whose squared norm is within
** [HS_SAFE_LO, HS_SAFE_HI]; other vectors are scored exactly.
*/
#define HS_SAFE_LO 1e-20
#define HS_SAFE_HI 1e20
static inline double float32_error(int64_t d) { return (double)(d + 16) * 0x1p-22 + 1e-9; }

static inline int safe_norm(double nn) { return nn >= HS_SAFE_LO && nn <= HS_SAFE_HI; }

/* ------------------------------------------------------------------------
** Records: what vector_index's first pass reads (Requirement 10).  One row is
** an int64 id, the float mul and int32 l1 of quantize(), then its d int8
** codes, padded to a multiple of 8 bytes.  A block stores its rows' records
** one after another.
*/
#define HS_REC_HEAD 16

static inline int64_t rec_stride(int64_t d) { return HS_REC_HEAD + ((d + 7) & ~(int64_t)7); }

/* Writes row id's record for vector v of d dimensions into rec (rec_stride(d) bytes). */
void rec_build(uint8_t *rec, int64_t id, const float *v, int64_t d);
/* v's int8 codes into out (d bytes), with one scale for the vector into *mul; their L1 norm. */
int32_t quantize(const float *v, int64_t d, int8_t *out, float *mul);

static inline int64_t rec_id(const uint8_t *rec) {
  int64_t id;
  memcpy(&id, rec, 8);
  return id;
}

/* ------------------------------------------------------------------------
** A set of int64 keys with an int64 value each: open addressing, linear
** probing, no deletion (a caller that drops keys builds a new map).
*/
typedef struct I64Map {
  int64_t *keys, *vals;
  uint8_t *used;
  int64_t cap, n;
} I64Map;

void map_free(I64Map *m);
/* Whether key is in m, and its value into *val (when val is not NULL). */
int map_find(const I64Map *m, int64_t key, int64_t *val);
/* Adds or replaces key; 0 when out of memory. */
int map_put(I64Map *m, int64_t key, int64_t val);

static inline uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

#endif
