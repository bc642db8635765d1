/*
** The k best: a bounded heap of (score, id) (Requirement 5: a higher score is better, then a
** lower id), the int8 records of vector_index's first pass and quantize(), a map of int64 keys,
** and the first pass of a k-nearest query, which bounds each row's cosine from its record
** (Requirement 10).  Nothing here knows SQLite; kernels/knn.h is what crosses.
*/
#include "kernels/knn.h"

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
static int32_t quantize(const float *v, int64_t d, int8_t *out, float *mul) {
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

/* ------------------------------------------------------------------------
** The first pass and the rescoring of a k-nearest query (Requirement 10).
**
** Each row's cosine is bounded from its int8 record: with q = sq (q8 + a) and
** v = sv (v8 + b), |a|, |b| <= 1/2 per value, q.v = sq sv (q8.v8 + e) with
** |e| <= (|q8|_1 + |v8|_1) / 2 + d / 4.  The k-th best lower bound over all
** rows is a score that k rows reach, so a row whose upper bound is below it
** cannot be in the top k.  The others are candidates, rescored exactly from
** their float32 vectors, best upper bound first, until the next upper bound
** is below the k-th best exact score: the answer is exact whatever the data.
** Typically a few dozen rows are rescored; near duplicates make it more.
*/
void knn_free(Knn *s) {
  free(s->q8);
  free(s->lower);
  free(s->cand);
  memset(s, 0, sizeof(*s));
}

/* Prepares the query's int8 codes and bound; 0 when out of memory. */
int knn_init(Knn *s, const float *q, int64_t d, int64_t k) {
  memset(s, 0, sizeof(*s));
  s->q = q, s->d = d, s->k = k;
  s->qq = squared_norm(q, d, dot2());
  s->q8 = malloc((size_t)rec_stride(d));
  s->lower = malloc(sizeof(Hit) * (size_t)k);
  if (!s->q8 || !s->lower) return 0;
  memset(s->q8, 0, (size_t)rec_stride(d));
  s->qerr = quantize(q, d, s->q8, &s->qmul) / 2.0 + (double)d / 4.0;
  return 1;
}

/*
** Bounds the rows of one block: `count` records at buf, or only the `nslots`
** slots listed in `slots` (ascending), or only those whose id is in `only`.
** Rows that could be in the top k become candidates.  0 when out of memory.
*/
int knn_scan(Knn *s, const uint8_t *buf, int64_t count, int64_t block,
             const int64_t *slots, int64_t nslots, const I64Map *only) {
  const int64_t d = s->d, stride = rec_stride(d), ahead = 8, n = slots ? nslots : count;
  const double slack = 1e-6;
  double bar = heap_bar(s->lower, s->nlower, s->k);
  for (int64_t i = 0; i < ahead && i < n; i++) prefetch(buf + (slots ? slots[i] : i) * stride, stride);
  for (int64_t i = 0; i < n; i++) {
    int64_t r = slots ? slots[i] : i;
    if (i + ahead < n) prefetch(buf + (slots ? slots[i + ahead] : i + ahead) * stride, stride);
    const uint8_t *rec = buf + r * stride;
    float vmul;
    int32_t l1;
    memcpy(&vmul, rec + 8, 4);
    memcpy(&l1, rec + 12, 4);
    double mul = (double)s->qmul * vmul;
    double approx = mul * doti8_fn(s->q8, (const int8_t *)(rec + HS_REC_HEAD), d);
    double err = mul * (s->qerr + l1 / 2.0) + slack;
    if (approx + err < bar) continue;
    int64_t id = rec_id(rec);
    if (only && !map_find(only, id, 0)) continue;
    Hit lo = {approx - err, 0};
    heap_push(s->lower, &s->nlower, s->k, lo);
    bar = heap_bar(s->lower, s->nlower, s->k);
    if (s->ncand == s->capcand) {
      int64_t cap = s->capcand ? 2 * s->capcand : 256;
      Cand *grown = realloc(s->cand, sizeof(Cand) * (size_t)cap);
      if (!grown) return 0;
      s->cand = grown, s->capcand = cap;
    }
    Cand c = {approx + err, id, block, r, 0};
    s->cand[s->ncand++] = c;
  }
  return 1;
}

static int cmp_cand(const void *a, const void *b) {
  const Cand *x = a, *y = b;
  if (x->upper != y->upper) return x->upper > y->upper ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* Candidates in the order their vectors are stored: by block, then slot. */
int cmp_place(const void *a, const void *b) {
  const Cand *x = a, *y = b;
  if (x->block != y->block) return x->block < y->block ? -1 : 1;
  return (x->slot > y->slot) - (x->slot < y->slot);
}

/* Drops the candidates below the final bar and sorts the rest, best upper bound first. */
void knn_candidates(Knn *s) {
  double bar = heap_bar(s->lower, s->nlower, s->k);
  int64_t m = 0;
  for (int64_t i = 0; i < s->ncand; i++) {
    if (s->cand[i].upper >= bar) s->cand[m++] = s->cand[i];
  }
  s->ncand = m;
  if (m > 1) qsort(s->cand, (size_t)m, sizeof(Cand), cmp_cand);
}
