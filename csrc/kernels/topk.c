/*
** The k best: a bounded heap of (score, id) (Requirement 5: a higher score is better, then a
** lower id), for cosine_topk, bm25_candidate and vector_index; the int8 records of
** vector_index's first pass and quantize(), which makes them; the float32 error bound of
** cosine_topk's first pass; a map of int64 keys.  Nothing here knows SQLite; kernels/topk.h is
** what crosses.  The first pass of a k-nearest query, over these records, is
** vector_index/scan.c's (knn_scan), beside the query that runs it.
*/
#include "kernels/topk.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/simd.h"

static int better(const Hit *a, const Hit *b) {
  return a->score > b->score || (a->score == b->score && a->id < b->id);
}

static void sift_down(Hit *h, int64_t n, int64_t i) {
  for (;;) {
    int64_t l = 2 * i + 1, r = l + 1, w = i;
    if (l < n && better(&h[w], &h[l])) w = l;
    if (r < n && better(&h[w], &h[r])) w = r;
    if (w == i) return;
    Hit t = h[i];
    h[i] = h[w];
    h[w] = t;
    i = w;
  }
}

void heap_push(Hit *h, int64_t *n, int64_t k, Hit x) {
  if (*n < k) {
    int64_t i = (*n)++;
    h[i] = x;
    while (i > 0) {
      int64_t p = (i - 1) / 2;
      if (!better(&h[p], &h[i])) break;
      Hit t = h[p];
      h[p] = h[i];
      h[i] = t;
      i = p;
    }
  } else if (better(&x, &h[0])) {
    h[0] = x;
    sift_down(h, *n, 0);
  }
}

int cmp_hits(const void *a, const void *b) {
  const Hit *x = a, *y = b;
  if (better(x, y)) return -1;
  return better(y, x) ? 1 : 0;
}

/*
** int8 with one scale per vector: v[i] ~ out[i] * m / 127, m = max |v[i]|,
** so |out[i]| <= 127 and each value is off by at most half a step.  Returns
** the L1 norm of out; *mul is m / (127 |v|), the factor from an int8 dot
** product to a cosine, computed in double so that no tiny or huge vector
** overflows it.  v may be unaligned.
*/
int32_t quantize(const float *v, int64_t d, int8_t *out, float *mul) {
  double m = 0, nn = 0;
  for (int64_t i = 0; i < d; i++) {
    double x = loadf(v + i);
    m = fabs(x) > m ? fabs(x) : m;
    nn += x * x;
  }
  double inv = m > 0 ? 127.0 / m : 0.0;
  int32_t l1 = 0;
  for (int64_t i = 0; i < d; i++) {
    out[i] = (int8_t)lrint(loadf(v + i) * inv);
    l1 += out[i] < 0 ? -out[i] : out[i];
  }
  *mul = nn > 0 ? (float)(m / (127.0 * sqrt(nn))) : 0.0f;
  return l1;
}

void rec_build(uint8_t *rec, int64_t id, const float *v, int64_t d) {
  float mul;
  memset(rec, 0, (size_t)rec_stride(d));
  int32_t l1 = quantize(v, d, (int8_t *)(rec + HS_REC_HEAD), &mul);
  memcpy(rec, &id, 8);
  memcpy(rec + 8, &mul, 4);
  memcpy(rec + 12, &l1, 4);
}

void map_free(I64Map *m) {
  free(m->keys);
  free(m->vals);
  free(m->used);
  memset(m, 0, sizeof(*m));
}

/* The slot of key, or of the empty place where it would go. */
static int64_t map_slot(const I64Map *m, int64_t key) {
  int64_t i = (int64_t)(mix64((uint64_t)key) & (uint64_t)(m->cap - 1));
  while (m->used[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  return i;
}

int map_find(const I64Map *m, int64_t key, int64_t *val) {
  if (m->cap == 0) return 0;
  int64_t i = map_slot(m, key);
  if (!m->used[i]) return 0;
  if (val) *val = m->vals[i];
  return 1;
}

/* Adds or replaces key; 0 when out of memory. */
int map_put(I64Map *m, int64_t key, int64_t val) {
  if (2 * (m->n + 1) > m->cap) {
    I64Map g = {0};
    g.cap = m->cap ? 2 * m->cap : 64;
    g.keys = malloc(sizeof(int64_t) * (size_t)g.cap);
    g.vals = malloc(sizeof(int64_t) * (size_t)g.cap);
    g.used = calloc((size_t)g.cap, 1);
    if (!g.keys || !g.vals || !g.used) {
      map_free(&g);
      return 0;
    }
    for (int64_t i = 0; i < m->cap; i++) {
      if (!m->used[i]) continue;
      int64_t j = map_slot(&g, m->keys[i]);
      g.used[j] = 1, g.keys[j] = m->keys[i], g.vals[j] = m->vals[i];
    }
    g.n = m->n;
    map_free(m);
    *m = g;
  }
  int64_t i = map_slot(m, key);
  if (!m->used[i]) m->used[i] = 1, m->keys[i] = key, m->n++;
  m->vals[i] = val;
  return 1;
}
