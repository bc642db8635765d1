/*
** hybridsql: hybrid keyword + vector search for SQLite.
**
** A loadable extension (entry point sqlite3_hybridsql_init) that adds:
**
**   cosine_similarity(a, b)                  -> REAL in [-1, 1]
**       cosine of two vectors.  select cosine_similarity('[1,0]', '[1,1]') -> 0.707106781186547
**   cosine_topk(query, k, id, vector)        -> TEXT, an aggregate
**       JSON [[id, score], ...] of the k rows most similar to query.
**       select cosine_topk(:q, 5, rowid, vector) from chunks where project = 'x'
**   bm25_score(rank [, saturation])          -> REAL in [0, 1)
**       an FTS5 bm25() rank mapped to a score.  select bm25_score(-4.2) -> 0.295774647887324
**   hybrid_score(vector_score, bm25_rank [, vector_weight, keyword_weight [, saturation]])
**       the weighted fusion of both.  select hybrid_score(0.8, -4.2) -> 0.648732394366197
**   temporal_decay(path, now [, half_life_days]) -> REAL in (0, 1]
**       decay of a dated memory file.
**       select temporal_decay('memory/2026-10-22.md', '2026-11-21') -> 0.5
**   vector_blob(x), vector_json(x)           -> BLOB, TEXT
**       convert between the encodings.  select vector_json(vector_blob('[0.1, 2]')) -> [0.1,2]
**   vector_topk(query, k [, model [, ids [, precision]]])  -> table (id, score)
**       the fast form of cosine_topk over hybridsql's own `vectors` table.
**       select id, score from vector_topk(:q, 10, 'all-MiniLM-L6-v2-int8')
**   bm25_candidate(fts_table, n)             -> REAL or NULL, an FTS5 function
**       the row's bm25() rank, or NULL when it cannot be among the n best:
**       order by it with LIMIT n instead of by bm25(), for a fraction of the work.
**   hybridsql_version()                      -> TEXT, e.g. 0.1.0
**   hybridsql_debug()                        -> TEXT, version, SIMD path and SQLite versions
**
** Requirements (the code cites them by number):
**
** 1. A vector is a BLOB of float32 little-endian values (4*D bytes, what
**    numpy's tobytes() gives) or TEXT holding a JSON array of numbers
**    ('[0.1, 2e-3]').  D is 1 to HS_MAX_DIMS.  Anything else is an error: a
**    BLOB whose length is not a multiple of 4, an empty vector, malformed
**    JSON, a value that is NaN or infinite (also one that overflows float32),
**    an INTEGER or REAL argument.
** 2. NULL in gives NULL out, unless a requirement says otherwise.  A number
**    argument must be finite: an infinity (9e999 in SQL) is an error.
** 3. Errors are SQL errors whose text names the function, the argument by
**    position and the numbers: "cosine_topk(): 1st argument has 768
**    dimensions, row 17 has 384".  Never a crash, never a silent NULL.
** 4. cosine_similarity(a, b) = a.b / (|a| |b|), computed in double precision
**    and clamped to [-1, 1]; 0.0 when either vector is all zeros.  Both must
**    have the same D.
** 5. cosine_topk(query, k, id, vector) is an aggregate over the rows that its
**    FROM and WHERE select, so filters apply before the top-k.  query and k
**    are read from the first row.  k is an INTEGER from 1 to HS_MAX_K.  id is
**    an INTEGER.  Rows whose vector is NULL are skipped; a NULL query gives
**    NULL.  The result is JSON text [[id, score], ...] with at most k rows,
**    score (Requirement 4) descending, ties by id ascending, scores printed
**    with 17 significant digits; no rows give '[]'.  One pass with a bounded
**    heap: O(N log k) time, O(k) memory.  Every row's vector must have the
**    query's D.
** 6. bm25_score(rank [, saturation]): FTS5's bm25() is negative, lower is
**    better.  With r = max(0, -rank) the score is r / (saturation + r).  A
**    NULL rank gives 0.0 (no keyword match).  saturation is a number > 0 and
**    defaults to HS_SATURATION, chosen by measurement on SciFact (porter
**    stemming, 0.7 / 0.3 weights: nDCG@10 0.693 at 1, 0.718 at 10), because
**    typical FTS5 ranks are 10 to 20 and r / (1 + r) flattens them all.
** 7. hybrid_score(v, rank [, vw, kw [, saturation]]) =
**    vw * coalesce(v, 0) + kw * bm25_score(rank, saturation); vw and kw
**    default to 0.7 and 0.3 and must be numbers >= 0.
** 8. temporal_decay(path, now [, half_life_days]) =
**    exp(-ln 2 / half_life * max(0, age_days)) when the file name of path
**    (after the last '/' or '\') is YYYY-MM-DD.md with a real calendar date;
**    age_days is the time from that date's UTC midnight to now, in days.
**    1.0 for every other path.  now is unix seconds (INTEGER or REAL) or
**    ISO-8601 text: YYYY-MM-DD, optionally followed by 'T' or ' ', HH:MM,
**    optional :SS and fraction, and an optional Z or +HH:MM / -HH:MM offset.
**    half_life_days defaults to 30 and must be a number > 0.  No clock is
**    read, so the function is deterministic.
** 9. vector_blob(x) returns the float32 BLOB of vector x; vector_json(x) its
**    JSON text, each value printed with the fewest digits (6 to 9) that read
**    back as the same float32.
** 10. vector_topk(query, k [, model [, ids [, precision]]]) is an eponymous
**    table-valued function with rows (id, score): the same k rows and scores
**    as cosine_topk(query, k, chunk_id, vector) over the rows of table
**    `vectors(chunk_id, model_id, vector)` whose model_id is `model` (every
**    row when NULL), restricted to the ids in `ids` (JSON array of integers;
**    unknown ids are ignored) when given.  It scans a packed copy of those
**    vectors kept per connection and rebuilt when meta.vectors_version, which
**    triggers bump on every write from any connection, has changed; a copy
**    read inside an open transaction is used once and dropped.  The first
**    pass runs on an int8 copy (precision 'int8', the default) or in float32
**    (precision 'float32') with a bound on each row's error, so that every
**    row that could be in the top k is rescored as Requirement 4 and the
**    answer is exact.  A NULL query gives no rows.
** 11. bm25_candidate(fts_table, n), an FTS5 auxiliary function, is NULL for
**    a row whose bm25() rank cannot be among the n best of the rows it has
**    returned a rank for so far in this query, and otherwise that rank, equal
**    to bm25(fts_table) bit for bit (n an INTEGER from 1 to HS_MAX_K; asked
**    again about the same row, it answers the same).  So its n lowest non-NULL
**    values are the rows and ranks of `ORDER BY bm25(t) LIMIT n` (ties at the
**    n-th rank aside).  Other WHERE terms must be tested before it (in a
**    CASE), or it counts rows they reject.  Registered when SQLite has FTS5.
*/
#include "hybridsql.h"

#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "hybridsql stores vectors as little-endian float32 and supports little-endian hosts only"
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HS_X86 1
#include <immintrin.h>
#endif

#define HS_VERSION "0.1.0"
/* Status codes of hs_parse_json_vector(). */
#define HS_OK 0
#define HS_MALFORMED 1
#define HS_EMPTY 2
#define HS_NONFINITE 3
#define HS_TOO_LONG 4
#define HS_MAX_DIMS 65536
#define HS_MAX_K 10000
#define HS_SATURATION 10.0
#define HS_HALF_LIFE 30.0
#define HS_MAX_NUMBER 511

const char *hs_version(void) { return HS_VERSION; }

/* ------------------------------------------------------------------------
** Kernels: dot products in double precision, with the SIMD path chosen at
** run time (HYBRIDSQL_SIMD=generic|sse2|avx2 forces one, for testing).
*/
typedef void (*Dot2Fn)(const float *a, const float *b, int64_t d, double *ab, double *bb);

/*
** A float read at any alignment: the dot products take vectors straight from
** SQLite's pages, which do not align them.  Compilers make this one load.
*/
static inline double loadf(const float *p) {
  float x;
  memcpy(&x, p, sizeof(x));
  return x;
}

/*
** ab = a.b and bb = b.b, four partial sums so the compiler can pipeline.  a
** and b may be unaligned.  bb is finite exactly when every value of b is (a
** float32 squared cannot overflow a double), which spares a separate pass.
*/
static void dot2_generic(const float *a, const float *b, int64_t d, double *ab, double *bb) {
  double s[4] = {0, 0, 0, 0}, n[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= d; i += 4) {
    for (int j = 0; j < 4; j++) {
      double x = loadf(a + i + j), y = loadf(b + i + j);
      s[j] += x * y;
      n[j] += y * y;
    }
  }
  for (; i < d; i++) {
    double x = loadf(a + i), y = loadf(b + i);
    s[0] += x * y;
    n[0] += y * y;
  }
  *ab = (s[0] + s[1]) + (s[2] + s[3]);
  *bb = (n[0] + n[1]) + (n[2] + n[3]);
}

#ifdef HS_X86
static void dot2_sse2(const float *a, const float *b, int64_t d, double *ab, double *bb) {
  __m128d s0 = _mm_setzero_pd(), s1 = _mm_setzero_pd();
  __m128d n0 = _mm_setzero_pd(), n1 = _mm_setzero_pd();
  int64_t i = 0;
  for (; i + 4 <= d; i += 4) {
    __m128 va = _mm_loadu_ps(a + i), vb = _mm_loadu_ps(b + i);
    __m128d alo = _mm_cvtps_pd(va), ahi = _mm_cvtps_pd(_mm_movehl_ps(va, va));
    __m128d blo = _mm_cvtps_pd(vb), bhi = _mm_cvtps_pd(_mm_movehl_ps(vb, vb));
    s0 = _mm_add_pd(s0, _mm_mul_pd(alo, blo));
    s1 = _mm_add_pd(s1, _mm_mul_pd(ahi, bhi));
    n0 = _mm_add_pd(n0, _mm_mul_pd(blo, blo));
    n1 = _mm_add_pd(n1, _mm_mul_pd(bhi, bhi));
  }
  double s[2], n[2];
  _mm_storeu_pd(s, _mm_add_pd(s0, s1));
  _mm_storeu_pd(n, _mm_add_pd(n0, n1));
  double sa = s[0] + s[1], na = n[0] + n[1];
  for (; i < d; i++) {
    double x = loadf(a + i), y = loadf(b + i);
    sa += x * y;
    na += y * y;
  }
  *ab = sa;
  *bb = na;
}

__attribute__((target("avx2,fma")))
static double hsum256(__m256d v) {
  __m128d lo = _mm256_castpd256_pd128(v), hi = _mm256_extractf128_pd(v, 1);
  lo = _mm_add_pd(lo, hi);
  return _mm_cvtsd_f64(_mm_add_sd(lo, _mm_unpackhi_pd(lo, lo)));
}

__attribute__((target("avx2,fma")))
static void dot2_avx2(const float *a, const float *b, int64_t d, double *ab, double *bb) {
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  __m256d n0 = _mm256_setzero_pd(), n1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    __m256 va = _mm256_loadu_ps(a + i), vb = _mm256_loadu_ps(b + i);
    __m256d alo = _mm256_cvtps_pd(_mm256_castps256_ps128(va));
    __m256d ahi = _mm256_cvtps_pd(_mm256_extractf128_ps(va, 1));
    __m256d blo = _mm256_cvtps_pd(_mm256_castps256_ps128(vb));
    __m256d bhi = _mm256_cvtps_pd(_mm256_extractf128_ps(vb, 1));
    s0 = _mm256_fmadd_pd(alo, blo, s0);
    s1 = _mm256_fmadd_pd(ahi, bhi, s1);
    n0 = _mm256_fmadd_pd(blo, blo, n0);
    n1 = _mm256_fmadd_pd(bhi, bhi, n1);
  }
  double sa = hsum256(_mm256_add_pd(s0, s1)), na = hsum256(_mm256_add_pd(n0, n1));
  for (; i < d; i++) {
    double x = loadf(a + i), y = loadf(b + i);
    sa += x * y;
    na += y * y;
  }
  *ab = sa;
  *bb = na;
}
#endif

/* cosine_topk's first pass: ab = a.b and bb = b.b in float32, a and b at any alignment. */
typedef void (*Dot2FFn)(const float *a, const float *b, int64_t d, float *ab, float *bb);

static void dot2f_generic(const float *a, const float *b, int64_t d, float *ab, float *bb) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, n[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    for (int j = 0; j < 8; j++) {
      float x = (float)loadf(a + i + j), y = (float)loadf(b + i + j);
      s[j] += x * y;
      n[j] += y * y;
    }
  }
  for (; i < d; i++) {
    float x = (float)loadf(a + i), y = (float)loadf(b + i);
    s[0] += x * y;
    n[0] += y * y;
  }
  *ab = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  *bb = ((n[0] + n[1]) + (n[2] + n[3])) + ((n[4] + n[5]) + (n[6] + n[7]));
}

/* The packed scan's first pass: float32 accumulation, and int8 with int32 sums. */
typedef float (*DotFFn)(const float *a, const float *b, int64_t d);
typedef int32_t (*DotI8Fn)(const int8_t *a, const int8_t *b, int64_t d);

static float dotf_generic(const float *a, const float *b, int64_t d) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
  }
  for (; i < d; i++) s[0] += a[i] * b[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static int32_t doti8_generic(const int8_t *a, const int8_t *b, int64_t d) {
  int32_t s = 0;
  for (int64_t i = 0; i < d; i++) s += (int32_t)a[i] * (int32_t)b[i];
  return s;
}

#ifdef HS_X86
__attribute__((target("avx2,fma")))
static float dotf_avx2(const float *a, const float *b, int64_t d) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= d; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= d; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  __m256 t = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  float sum = _mm_cvtss_f32(h);
  for (; i < d; i++) sum += a[i] * b[i];
  return sum;
}

__attribute__((target("avx2,fma")))
static float hsum256_ps(__m256 t) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

__attribute__((target("avx2,fma")))
static void dot2f_avx2(const float *a, const float *b, int64_t d, float *ab, float *bb) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  __m256 n0 = _mm256_setzero_ps(), n1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    __m256 a0 = _mm256_loadu_ps(a + i), a1 = _mm256_loadu_ps(a + i + 8);
    __m256 b0 = _mm256_loadu_ps(b + i), b1 = _mm256_loadu_ps(b + i + 8);
    s0 = _mm256_fmadd_ps(a0, b0, s0);
    s1 = _mm256_fmadd_ps(a1, b1, s1);
    n0 = _mm256_fmadd_ps(b0, b0, n0);
    n1 = _mm256_fmadd_ps(b1, b1, n1);
  }
  float sa = hsum256_ps(_mm256_add_ps(s0, s1)), na = hsum256_ps(_mm256_add_ps(n0, n1));
  for (; i < d; i++) {
    float x = (float)loadf(a + i), y = (float)loadf(b + i);
    sa += x * y;
    na += y * y;
  }
  *ab = sa;
  *bb = na;
}

__attribute__((target("avx2")))
static int32_t doti8_avx2(const int8_t *a, const int8_t *b, int64_t d) {
  __m256i acc = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= d; i += 32) {
    __m256i va = _mm256_loadu_si256((const __m256i *)(a + i));
    __m256i vb = _mm256_loadu_si256((const __m256i *)(b + i));
    __m256i alo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(va));
    __m256i ahi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(va, 1));
    __m256i blo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(vb));
    __m256i bhi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(vb, 1));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(alo, blo));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(ahi, bhi));
  }
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
  int32_t sum = _mm_cvtsi128_si32(h);
  for (; i < d; i++) sum += (int32_t)a[i] * (int32_t)b[i];
  return sum;
}
#endif

static Dot2Fn dot2_fn;
static Dot2FFn dot2f_fn = dot2f_generic;
static DotFFn dotf_fn = dotf_generic;
static DotI8Fn doti8_fn = doti8_generic;
static const char *simd_name = "unchosen";

static void choose_simd(void) {
  const char *force = getenv("HYBRIDSQL_SIMD");
  Dot2Fn fn = dot2_generic;
  const char *name = "generic";
#ifdef HS_X86
  int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (force && strcmp(force, "generic") == 0) {
    /* keep the generic path */
  } else if ((force && strcmp(force, "sse2") == 0) || !avx2) {
    fn = dot2_sse2;
    name = "sse2";
  } else {
    fn = dot2_avx2;
    name = "avx2+fma";
    dot2f_fn = dot2f_avx2;
    dotf_fn = dotf_avx2;
    doti8_fn = doti8_avx2;
  }
#else
  (void)force;
#endif
  simd_name = name;
  dot2_fn = fn; /* a benign race: every thread stores the same values */
}

static Dot2Fn dot2(void) {
  if (!dot2_fn) choose_simd();
  return dot2_fn;
}

const char *hs_simd_path(void) {
  dot2();
  return simd_name;
}

/* Requirement 4 from the dot product and both squared norms. */
static double cosine_from(double ab, double qq, double bb) {
  if (qq == 0.0 || bb == 0.0) return 0.0;
  double c = ab / sqrt(qq * bb);
  return c > 1.0 ? 1.0 : (c < -1.0 ? -1.0 : c);
}

/* Requirement 4, with the query's squared norm qq already known. */
static double cosine_with(double qq, const float *q, const float *v, int64_t d, Dot2Fn fn) {
  double ab, bb;
  fn(q, v, d, &ab, &bb);
  return cosine_from(ab, qq, bb);
}

static double squared_norm(const float *v, int64_t d, Dot2Fn fn) {
  double ab, bb;
  fn(v, v, d, &ab, &bb);
  return bb;
}

double hs_cosine(const float *a, const float *b, int64_t d) {
  Dot2Fn fn = dot2();
  return cosine_with(squared_norm(a, d, fn), a, b, d, fn);
}

int64_t hs_first_nonfinite(const float *v, int64_t d) {
  for (int64_t i = 0; i < d; i++) {
    if (!isfinite(loadf(v + i))) return i;
  }
  return -1;
}

#ifndef HYBRIDSQL_KERNELS_ONLY /* the top-k heap and packed scan serve the SQL layer */
/* ------------------------------------------------------------------------
** A bounded min-heap of (score, id): the root is the worst kept row.
** "Better" is a higher score, then a lower id (Requirement 5).
*/
typedef struct Hit {
  double score;
  int64_t id;
} Hit;

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

static void heap_push(Hit *h, int64_t *n, int64_t k, Hit x) {
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

/* The score a new hit must beat to enter a heap of the k best: its worst once full. */
static double heap_bar(const Hit *h, int64_t n, int64_t k) {
  return n == k ? h[0].score : -INFINITY;
}

static int cmp_hits(const void *a, const void *b) {
  const Hit *x = a, *y = b;
  if (better(x, y)) return -1;
  return better(y, x) ? 1 : 0;
}

/*
** A packed copy of many vectors (Requirement 10): row r is vecs[r*d .. r*d+d),
** ids ascending, with an int8 copy made when an int8 search first asks.
** Its buffers come from malloc, not sqlite3_malloc: SQLite refuses any one
** allocation over about 2 GB, and 1M x 768 floats is 3 GB.
*/
typedef struct Packed {
  int64_t n, d;
  int64_t *ids;
  float *vecs;
  float *inv_norms;
  int8_t *q8;      /* the int8 copy, made when an int8 search first asks */
  float *q8_mul;   /* per row: int8 dot product to cosine */
  int32_t *q8_l1;  /* per row: L1 norm of the int8 values */
} Packed;

/*
** Buffers of the packed copy, `size` bytes; 0 when out of memory.  On Linux a
** big one is aligned to 2 MB and advised for transparent huge pages, as numpy
** does: fewer page faults and TLB misses.  Packing 100k x 384 after a write
** went from 336 to 260 ms (bench/run.py); the scan's time did not change
** measurably.  free() releases either kind.
*/
static void *big_alloc(size_t size) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const size_t huge = (size_t)2 << 20;
  if (size >= 2 * huge) {
    void *p = 0;
    if (posix_memalign(&p, huge, size) != 0) return 0;
    madvise(p, size, MADV_HUGEPAGE); /* advice only: a refusal changes nothing */
    return p;
  }
#endif
  return malloc(size ? size : 1);
}

/* Grows a big_alloc buffer from `used` bytes to `size`, as realloc does. */
static void *big_grow(void *old, size_t used, size_t size) {
  void *p = big_alloc(size);
  if (!p) return 0;
  if (used) memcpy(p, old, used);
  free(old);
  return p;
}

/*
** int8 with one scale per vector: v[i] ~ out[i] * m / 127, m = max |v[i]|,
** so |out[i]| <= 127 and each value is off by at most half a step.  Returns
** the L1 norm of out; *mul is m / (127 |v|), the factor from an int8 dot
** product to a cosine, computed in double so that no tiny or huge vector
** overflows it.
*/
static int32_t quantize(const float *v, int64_t d, int8_t *out, float *mul) {
  double m = 0, nn = 0;
  for (int64_t i = 0; i < d; i++) {
    double x = v[i];
    m = fabs(x) > m ? fabs(x) : m;
    nn += x * x;
  }
  double inv = m > 0 ? 127.0 / m : 0.0;
  int32_t l1 = 0;
  for (int64_t i = 0; i < d; i++) {
    out[i] = (int8_t)lrint(v[i] * inv);
    l1 += out[i] < 0 ? -out[i] : out[i];
  }
  *mul = nn > 0 ? (float)(m / (127.0 * sqrt(nn))) : 0.0f;
  return l1;
}

/* Builds the int8 copy; 0 when out of memory. */
static int packed_quantize(Packed *p) {
  if (p->q8) return 1;
  p->q8 = big_alloc((size_t)(p->n * p->d));
  p->q8_mul = big_alloc(sizeof(float) * (size_t)p->n);
  p->q8_l1 = big_alloc(sizeof(int32_t) * (size_t)p->n);
  if (!p->q8 || !p->q8_mul || !p->q8_l1) return 0;
  for (int64_t r = 0; r < p->n; r++) {
    p->q8_l1[r] = quantize(p->vecs + r * p->d, p->d, p->q8 + r * p->d, &p->q8_mul[r]);
  }
  return 1;
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
static double float32_error(int64_t d) { return (double)(d + 16) * 0x1p-22 + 1e-9; }

static int safe_norm(double nn) { return nn >= HS_SAFE_LO && nn <= HS_SAFE_HI; }

/*
** Asks the CPU to start loading row r, eight rows ahead of the scan.  A
** filter's rows are scattered, where the hardware prefetcher cannot guess the
** next address; and in a scan of every row it does not run far enough ahead
** either (it stops at 4 KiB page boundaries): prefetching made the unfiltered
** int8 scan at 100k x 384 take 0.70 to 0.73 x the time, and float32 0.82 x
** (bench/run.py's hybrid database, interleaved in one process).
*/
static void prefetch_row(const Packed *p, int64_t r, int int8, int64_t bytes) {
#if defined(__GNUC__) || defined(__clang__)
  const char *at = int8 ? (const char *)(p->q8 + r * p->d) : (const char *)(p->vecs + r * p->d);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(at + off);
#else
  (void)p, (void)r, (void)int8, (void)bytes;
#endif
}

/*
** The k best of the packed rows (all, or the `nrows` row numbers in `rows`),
** scored exactly as cosine_topk scores them (Requirement 4), into `out` (room
** for k hits); returns how many, or -1 when out of memory.
**
** A first pass bounds each row's cosine cheaply, in float32 or on the int8
** copy; a row is scored exactly only when its upper bound reaches the k-th
** best exact score so far.  A skipped row scores below that, so it cannot be
** in the top k: the answer is exact whatever the data.  Typically a few
** hundred rows are scored exactly; near-duplicate vectors make it more.
**
** int8: with q = sq (q8 + a) and v = sv (v8 + b), |a|, |b| <= 1/2 per value,
** q.v = sq sv (q8.v8 + e) with |e| <= (|q8|_1 + |v8|_1) / 2 + d / 4.
*/
static int64_t packed_search(const Packed *p, const float *q, int64_t k, const int64_t *rows,
                             int64_t nrows, int int8, Hit *out) {
  int64_t count = rows ? nrows : p->n, d = p->d, len = 0;
  if (count <= 0 || k <= 0) return 0;
  Hit *heap = malloc(sizeof(Hit) * (size_t)k);
  int8_t *q8 = int8 ? malloc((size_t)d) : 0;
  if (!heap || (int8 && !q8)) {
    free(heap), free(q8);
    return -1;
  }
  Dot2Fn fn = dot2();
  double qq = squared_norm(q, d, fn), qerr = 0;
  float qmul = 0, inv_q = safe_norm(qq) ? (float)(1.0 / sqrt(qq)) : NAN; /* NaN: exact */
  if (int8) qerr = quantize(q, d, q8, &qmul) / 2.0 + (double)d / 4.0;
  const double f32err = float32_error(d), slack = 1e-6;
  const int64_t row_bytes = int8 ? d : 4 * d, ahead = 8;
  for (int64_t i = 0; i < count; i++) {
    int64_t r = rows ? rows[i] : i;
    if (i + ahead < count) prefetch_row(p, rows ? rows[i + ahead] : i + ahead, int8, row_bytes);
    double approx, err;
    if (int8) {
      double mul = (double)qmul * p->q8_mul[r];
      approx = mul * doti8_fn(q8, p->q8 + r * d, d);
      err = mul * (qerr + p->q8_l1[r] / 2.0) + slack;
    } else {
      approx = (double)(dotf_fn(q, p->vecs + r * d, d) * p->inv_norms[r] * inv_q);
      err = f32err;
    }
    if (approx + err < heap_bar(heap, len, k)) continue; /* false for a NaN: scored exactly */
    Hit x = {cosine_with(qq, q, p->vecs + r * d, d, fn), r}; /* ids ascend with r */
    heap_push(heap, &len, k, x);
  }
  for (int64_t i = 0; i < len; i++) heap[i].id = p->ids[heap[i].id];
  qsort(heap, (size_t)len, sizeof(Hit), cmp_hits);
  memcpy(out, heap, sizeof(Hit) * (size_t)len);
  free(heap), free(q8);
  return len;
}
#endif

/* ------------------------------------------------------------------------
** Scores (Requirements 6 and 8).
*/
double hs_bm25_score(double rank, double saturation) {
  double r = rank < 0 ? -rank : 0.0;
  return r / (saturation + r);
}

double hs_decay(double age_days, double half_life_days) {
  if (age_days < 0) age_days = 0;
  return exp(-log(2.0) / half_life_days * age_days);
}

/* Days from 1970-01-01 to a civil date (Howard Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static int days_in_month(int64_t y, int64_t m) {
  static const int dm[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return dm[m - 1] + (m == 2 && leap);
}

static int digits(const char *s, int n, int64_t *v) {
  int64_t x = 0;
  for (int i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return 0;
    x = x * 10 + (s[i] - '0');
  }
  *v = x;
  return 1;
}

/* Parses YYYY-MM-DD at s (10 bytes) into days since the epoch. */
static int parse_date(const char *s, int64_t *days) {
  int64_t y, m, d;
  if (!digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &m) || s[7] != '-' ||
      !digits(s + 8, 2, &d))
    return 0;
  if (m < 1 || m > 12 || d < 1 || d > days_in_month(y, m)) return 0;
  *days = days_from_civil(y, m, d);
  return 1;
}

int hs_path_date(const char *path, int64_t n, int64_t *days) {
  int64_t start = 0;
  for (int64_t i = 0; i < n; i++) {
    if (path[i] == '/' || path[i] == '\\') start = i + 1;
  }
  const char *name = path + start;
  return n - start == 13 && memcmp(name + 10, ".md", 3) == 0 && parse_date(name, days);
}

int hs_parse_time(const char *s, int64_t n, double *unix_seconds) {
  int64_t days, hh = 0, mm = 0, ss = 0, oh = 0, om = 0;
  double frac = 0;
  if (n < 10 || !parse_date(s, &days)) return 0;
  int64_t i = 10;
  if (i < n && (s[i] == 'T' || s[i] == ' ')) {
    if (n - i < 6 || !digits(s + i + 1, 2, &hh) || s[i + 3] != ':' || !digits(s + i + 4, 2, &mm))
      return 0;
    i += 6;
    if (i < n && s[i] == ':') {
      if (n - i < 3 || !digits(s + i + 1, 2, &ss)) return 0;
      i += 3;
      if (i < n && s[i] == '.') {
        double scale = 0.1;
        int64_t start = ++i;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, scale /= 10) frac += (s[i] - '0') * scale;
        if (i == start) return 0;
      }
    }
    if (hh > 23 || mm > 59 || ss > 59) return 0;
    if (i < n && s[i] == 'Z') {
      i++;
    } else if (i < n && (s[i] == '+' || s[i] == '-')) {
      int sign = s[i] == '-' ? -1 : 1;
      if (n - i >= 6 && s[i + 3] == ':' && digits(s + i + 1, 2, &oh) && digits(s + i + 4, 2, &om)) {
        i += 6;
      } else if (n - i >= 5 && digits(s + i + 1, 2, &oh) && digits(s + i + 3, 2, &om)) {
        i += 5;
      } else {
        return 0;
      }
      if (oh > 23 || om > 59) return 0;
      oh *= sign;
      om *= sign;
    }
  }
  if (i != n) return 0;
  *unix_seconds = (double)(days * 86400 + hh * 3600 + mm * 60 + ss - oh * 3600 - om * 60) + frac;
  return 1;
}

/* ------------------------------------------------------------------------
** Vector text (Requirements 1 and 9).
*/
static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/*
** Numbers in text always have a '.' decimal point, whatever setlocale() a program has called,
** as in SQLite itself: under de_DE, strtod() would read "0.5" as 0 and printf() write "0,5".
** So the '.' is swapped for the locale's decimal point on the way in, and back on the way out.
*/
static const char *locale_point(void) {
  const char *dp = localeconv()->decimal_point;
  return dp && dp[0] && strlen(dp) <= 8 ? dp : ".";
}

/* strtod() of the n bytes of a C-locale number at s (n <= HS_MAX_NUMBER). */
static double c_strtod(const char *s, int64_t n) {
  char buf[HS_MAX_NUMBER + 16];
  const char *dp = locale_point();
  size_t dl = strlen(dp);
  int64_t j = 0;
  for (int64_t i = 0; i < n; i++) {
    if (s[i] == '.') {
      memcpy(buf + j, dp, dl); /* a JSON number has one '.' at most */
      j += (int64_t)dl;
    } else {
      buf[j++] = s[i];
    }
  }
  buf[j] = 0;
  return strtod(buf, 0);
}

/* snprintf(buf, cap, "%.*g", precision, x) with a '.' decimal point; returns the length. */
static int c_format(char *buf, size_t cap, int precision, double x) {
  int len = snprintf(buf, cap, "%.*g", precision, x);
  const char *dp = locale_point();
  char *at = strstr(buf, dp);
  if (len > 0 && (size_t)len < cap && at && strcmp(dp, ".") != 0) {
    size_t dl = strlen(dp);
    *at = '.';
    memmove(at + 1, at + dl, strlen(at + dl) + 1);
    len -= (int)dl - 1;
  }
  return len;
}

/* Length of the JSON number at s (at most n bytes), 0 when there is none. */
static int64_t json_number_len(const char *s, int64_t n) {
  int64_t i = 0;
  if (i < n && s[i] == '-') i++;
  if (i < n && s[i] == '0') {
    i++;
  } else if (i < n && s[i] >= '1' && s[i] <= '9') {
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
  } else {
    return 0;
  }
  if (i < n && s[i] == '.') {
    int64_t start = ++i;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i == start) return 0;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    int64_t start = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i == start) return 0;
  }
  return i;
}

int hs_parse_json_vector(const char *s, int64_t n, float *out, int64_t cap, int64_t *dims,
                         int64_t *bad_index) {
  int64_t i = 0, d = 0;
  *dims = 0;
  *bad_index = -1;
  while (i < n && is_ws(s[i])) i++;
  if (i >= n || s[i] != '[') return HS_MALFORMED;
  i++;
  while (i < n && is_ws(s[i])) i++;
  if (i < n && s[i] == ']') {
    i++;
  } else {
    for (;;) {
      int64_t len = json_number_len(s + i, n - i);
      if (len == 0 || len > HS_MAX_NUMBER) return HS_MALFORMED;
      if (d >= cap) return HS_TOO_LONG;
      float f = (float)c_strtod(s + i, len);
      if (!isfinite(f) && *bad_index < 0) *bad_index = d;
      out[d++] = f;
      i += len;
      while (i < n && is_ws(s[i])) i++;
      if (i < n && s[i] == ',') {
        i++;
        while (i < n && is_ws(s[i])) i++;
        continue;
      }
      if (i < n && s[i] == ']') {
        i++;
        break;
      }
      return HS_MALFORMED;
    }
  }
  while (i < n && is_ws(s[i])) i++;
  if (i != n) return HS_MALFORMED;
  *dims = d;
  if (d == 0) return HS_EMPTY;
  return *bad_index >= 0 ? HS_NONFINITE : HS_OK;
}

int hs_format_float(float x, char *buf, int64_t cap) {
  int len = 0;
  for (int p = 6; p <= 9; p++) {
    len = c_format(buf, (size_t)cap, p, (double)x);
    if (len > 0 && (float)c_strtod(buf, len) == x) break;
  }
  return len;
}

#ifndef HYBRIDSQL_KERNELS_ONLY
/* ========================================================================
** The SQL layer: thin wrappers that check arguments and call the kernels.
*/
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT1

static const char *ordinal(int i) {
  static const char *names[] = {"1st", "2nd", "3rd", "4th", "5th"};
  return names[i];
}

static const char *type_name(sqlite3_value *v) {
  switch (sqlite3_value_type(v)) {
    case SQLITE_INTEGER: return "integer";
    case SQLITE_FLOAT: return "real";
    case SQLITE_TEXT: return "text";
    case SQLITE_BLOB: return "blob";
    default: return "NULL";
  }
}

/* Reports an error built with sqlite3_vmprintf (Requirement 3). */
/* A number for an error message: C's %g, which Python's '%g' matches. */
typedef struct Num {
  char s[32];
} Num;

static Num num(double x) {
  Num n;
  c_format(n.s, sizeof(n.s), 6, x);
  return n;
}

static void fail_with(sqlite3_context *ctx, char *msg);

static void fail(sqlite3_context *ctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  fail_with(ctx, msg);
}

/* A vector argument: v points at D floats, in SQLite's memory or in owned. */
typedef struct Vec {
  const float *v;
  int64_t d;
  float *owned;
} Vec;

static void vec_free(Vec *x) {
  sqlite3_free(x->owned);
  x->owned = 0;
}

/* The message parse_vector() returns when out of memory; never freed. */
static char NOMEM[] = "out of memory";

/*
** Reads a vector value (Requirement 1).  Returns NULL with *out set (out->v
** is NULL for an SQL NULL), or an error message from sqlite3_mprintf (or
** NOMEM) for the caller to report.  `what` names the value in the message,
** e.g. "1st argument" or "4th argument of row 17".
*/
static char *parse_vector(sqlite3_value *arg, const char *fn, const char *what, Vec *out) {
  out->v = 0;
  out->d = 0;
  out->owned = 0;
  int type = sqlite3_value_type(arg);
  if (type == SQLITE_NULL) return 0;
  if (type == SQLITE_BLOB) {
    const void *p = sqlite3_value_blob(arg);
    int64_t n = sqlite3_value_bytes(arg);
    if (n % 4 != 0) {
      return sqlite3_mprintf("%s(): %s is a BLOB of %lld bytes, not a multiple of 4", fn, what, n);
    }
    if (n == 0) return sqlite3_mprintf("%s(): %s is an empty vector", fn, what);
    if (n / 4 > HS_MAX_DIMS) {
      return sqlite3_mprintf("%s(): %s has %lld dimensions, more than %d", fn, what, n / 4,
                             HS_MAX_DIMS);
    }
    out->v = p; /* possibly unaligned: every kernel reads it with loadf() or loadu */
    out->d = n / 4;
    int64_t bad = hs_first_nonfinite(out->v, out->d);
    if (bad >= 0) {
      vec_free(out);
      return sqlite3_mprintf("%s(): %s has a non-finite value at index %lld", fn, what, bad);
    }
    return 0;
  }
  if (type == SQLITE_TEXT) {
    const char *s = (const char *)sqlite3_value_text(arg);
    int64_t n = sqlite3_value_bytes(arg), d = 0, bad = -1;
    int64_t cap = n / 2 + 1;
    if (cap > HS_MAX_DIMS) cap = HS_MAX_DIMS;
    out->owned = sqlite3_malloc64(sizeof(float) * (sqlite3_uint64)cap);
    if (!s || !out->owned) {
      vec_free(out);
      return NOMEM;
    }
    int rc = hs_parse_json_vector(s, n, out->owned, cap, &d, &bad);
    if (rc == HS_OK) {
      out->v = out->owned;
      out->d = d;
      return 0;
    }
    vec_free(out);
    if (rc == HS_EMPTY) return sqlite3_mprintf("%s(): %s is an empty vector", fn, what);
    if (rc == HS_NONFINITE) {
      return sqlite3_mprintf("%s(): %s has a non-finite value at index %lld", fn, what, bad);
    }
    if (rc == HS_TOO_LONG) {
      return sqlite3_mprintf("%s(): %s has more than %d dimensions", fn, what, HS_MAX_DIMS);
    }
    return sqlite3_mprintf("%s(): %s is not a JSON array of numbers", fn, what);
  }
  return sqlite3_mprintf("%s(): %s must be a vector (float32 BLOB or JSON array text), got %s", fn,
                         what, type_name(arg));
}

/* Reports a message from parse_vector() on ctx and frees it. */
static void fail_with(sqlite3_context *ctx, char *msg) {
  if (!msg || msg == NOMEM) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  sqlite3_result_error(ctx, msg, -1);
  sqlite3_free(msg);
}

/* parse_vector() for a function argument: 1 with *out set, 0 for NULL, -1 after an error. */
static int read_vector(sqlite3_context *ctx, sqlite3_value *arg, const char *fn,
                       const char *what, Vec *out) {
  char *err = parse_vector(arg, fn, what, out);
  if (err) {
    fail_with(ctx, err);
    return -1;
  }
  return out->v ? 1 : 0;
}

/* Reads a number argument; 0 after reporting an error.  NULL and infinities are errors. */
static int read_number(sqlite3_context *ctx, sqlite3_value *arg, const char *fn, int pos,
                       const char *name, double *out) {
  int type = sqlite3_value_type(arg);
  if (type != SQLITE_INTEGER && type != SQLITE_FLOAT) {
    fail(ctx, "%s(): %s argument %s must be a number, got %s", fn, ordinal(pos), name,
         type_name(arg));
    return 0;
  }
  *out = sqlite3_value_double(arg);
  if (!isfinite(*out)) {
    fail(ctx, "%s(): %s argument %s must be a finite number, got %s", fn, ordinal(pos), name,
         num(*out).s);
    return 0;
  }
  return 1;
}

static void cosine_similarity_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  Vec a, b;
  (void)argc;
  int ra = read_vector(ctx, argv[0], "cosine_similarity", "1st argument", &a);
  if (ra < 0) return;
  int rb = read_vector(ctx, argv[1], "cosine_similarity", "2nd argument", &b);
  if (rb < 0) {
    vec_free(&a);
    return;
  }
  if (ra == 0 || rb == 0) {
    sqlite3_result_null(ctx);
  } else if (a.d != b.d) {
    fail(ctx, "cosine_similarity(): 1st argument has %lld dimensions, 2nd argument has %lld",
         a.d, b.d);
  } else {
    sqlite3_result_double(ctx, hs_cosine(a.v, b.v, a.d)); /* Requirement 4 */
  }
  vec_free(&a);
  vec_free(&b);
}

/*
** The state of one cosine_topk() aggregate (Requirement 5): a heap of the k
** best rows by exact score.  As in packed_search, a row is first scored in
** float32 with a bound on its error, and scored exactly only when it could
** beat the k-th best so far.
*/
typedef struct TopK {
  int started;     /* the first row has been read */
  int null_query;  /* the query is NULL: the result is NULL */
  Vec query;
  double qq;       /* the query's squared norm */
  float qqf;       /* the same in float32, for the first pass; NaN when not safe */
  int64_t k, len;
  Hit *heap;
} TopK;

static void topk_step(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  TopK *t = sqlite3_aggregate_context(ctx, sizeof(TopK));
  if (!t) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (!t->started) {
    t->started = 1;
    int rq = read_vector(ctx, argv[0], "cosine_topk", "1st argument", &t->query);
    if (rq < 0) return;
    if (sqlite3_value_type(argv[1]) != SQLITE_INTEGER) {
      fail(ctx, "cosine_topk(): 2nd argument k must be an integer from 1 to %d, got %s", HS_MAX_K,
           type_name(argv[1]));
      return;
    }
    t->k = sqlite3_value_int64(argv[1]);
    if (t->k < 1 || t->k > HS_MAX_K) {
      fail(ctx, "cosine_topk(): 2nd argument k must be an integer from 1 to %d, got %lld",
           HS_MAX_K, t->k);
      return;
    }
    if (rq == 0) {
      t->null_query = 1;
      return;
    }
    if (!t->query.owned) { /* the query must outlive this row */
      float *copy = sqlite3_malloc64(sizeof(float) * (sqlite3_uint64)t->query.d);
      if (!copy) {
        sqlite3_result_error_nomem(ctx);
        return;
      }
      memcpy(copy, t->query.v, sizeof(float) * (size_t)t->query.d);
      t->query.v = t->query.owned = copy;
    }
    t->qq = squared_norm(t->query.v, t->query.d, dot2());
    float ignored;
    dot2f_fn(t->query.v, t->query.v, t->query.d, &ignored, &t->qqf);
    if (!safe_norm(t->qq)) t->qqf = NAN; /* every row scored exactly */
    t->heap = sqlite3_malloc64(sizeof(Hit) * (sqlite3_uint64)t->k);
    if (!t->heap) {
      sqlite3_result_error_nomem(ctx);
      return;
    }
  }
  if (t->null_query || !t->heap) return;
  if (sqlite3_value_type(argv[3]) == SQLITE_NULL) return;
  if (sqlite3_value_type(argv[2]) != SQLITE_INTEGER) {
    fail(ctx, "cosine_topk(): 3rd argument id must be an integer, got %s", type_name(argv[2]));
    return;
  }
  int64_t id = sqlite3_value_int64(argv[2]);
  Vec v = {0, 0, 0};
  if (sqlite3_value_type(argv[3]) == SQLITE_BLOB) { /* the common case, kept lean */
    v.v = sqlite3_value_blob(argv[3]);
    v.d = sqlite3_value_bytes(argv[3]) / 4;
  }
  if (!v.v || v.d != t->query.d || sqlite3_value_bytes(argv[3]) % 4 != 0) {
    char what[64];
    sqlite3_snprintf(sizeof(what), what, "4th argument of row %lld", id);
    if (read_vector(ctx, argv[3], "cosine_topk", what, &v) < 0) return;
    if (v.d != t->query.d) {
      fail(ctx, "cosine_topk(): 1st argument has %lld dimensions, row %lld has %lld", t->query.d,
           id, v.d);
      vec_free(&v);
      return;
    }
  }
  float abf, bbf;
  dot2f_fn(t->query.v, v.v, v.d, &abf, &bbf);
  if (isfinite(abf) && safe_norm(bbf) && !isnan(t->qqf)) { /* the float32 first pass */
    double approx = abf / sqrt((double)t->qqf * bbf);
    if (approx + float32_error(v.d) < heap_bar(t->heap, t->len, t->k)) {
      vec_free(&v);
      return;
    }
  }
  double ab, bb;
  dot2_fn(t->query.v, v.v, v.d, &ab, &bb);
  if (!isfinite(bb)) { /* Requirement 1 */
    fail(ctx, "cosine_topk(): 4th argument of row %lld has a non-finite value at index %lld", id,
         hs_first_nonfinite(v.v, v.d));
    vec_free(&v);
    return;
  }
  Hit x = {cosine_from(ab, t->qq, bb), id};
  heap_push(t->heap, &t->len, t->k, x);
  vec_free(&v);
}

/* Prints a double for JSON: 17 significant digits, '.' whatever the locale. */
static void append_double(sqlite3_str *out, double x) {
  char buf[40];
  c_format(buf, sizeof(buf), 17, x);
  sqlite3_str_appendall(out, buf);
}

static void topk_final(sqlite3_context *ctx) {
  TopK *t = sqlite3_aggregate_context(ctx, 0);
  if (!t) { /* no rows */
    sqlite3_result_text(ctx, "[]", 2, SQLITE_STATIC);
    return;
  }
  if (t->null_query) {
    sqlite3_result_null(ctx);
  } else if (t->heap) {
    qsort(t->heap, (size_t)t->len, sizeof(Hit), cmp_hits);
    sqlite3_str *out = sqlite3_str_new(0);
    sqlite3_str_appendchar(out, 1, '[');
    for (int64_t i = 0; i < t->len; i++) {
      sqlite3_str_appendf(out, "%s[%lld,", i ? "," : "", t->heap[i].id);
      append_double(out, t->heap[i].score);
      sqlite3_str_appendchar(out, 1, ']');
    }
    sqlite3_str_appendchar(out, 1, ']');
    int n = sqlite3_str_length(out);
    char *json = sqlite3_str_finish(out);
    if (!json) {
      sqlite3_result_error_nomem(ctx);
    } else {
      sqlite3_result_text(ctx, json, n, sqlite3_free);
    }
  }
  vec_free(&t->query);
  sqlite3_free(t->heap);
  t->heap = 0;
}

static void bm25_score_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  double rank, saturation = HS_SATURATION;
  if (argc > 1) {
    if (!read_number(ctx, argv[1], "bm25_score", 1, "saturation", &saturation)) return;
    if (!(saturation > 0)) {
      fail(ctx, "bm25_score(): 2nd argument saturation must be > 0, got %s", num(saturation).s);
      return;
    }
  }
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL) { /* Requirement 6 */
    sqlite3_result_double(ctx, 0.0);
    return;
  }
  if (!read_number(ctx, argv[0], "bm25_score", 0, "rank", &rank)) return;
  sqlite3_result_double(ctx, hs_bm25_score(rank, saturation));
}

static void hybrid_score_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  static const char *names[] = {"vector_score", "bm25_rank", "vector_weight", "keyword_weight",
                                "saturation"};
  double x[5] = {0.0, 0.0, 0.7, 0.3, HS_SATURATION};
  int rank_is_null = sqlite3_value_type(argv[1]) == SQLITE_NULL;
  for (int i = 0; i < argc; i++) {
    if ((i == 0 || i == 1) && sqlite3_value_type(argv[i]) == SQLITE_NULL) continue;
    if (!read_number(ctx, argv[i], "hybrid_score", i, names[i], &x[i])) return;
  }
  for (int i = 2; i < 4; i++) {
    if (x[i] < 0) {
      fail(ctx, "hybrid_score(): %s argument %s must be >= 0, got %s", ordinal(i), names[i],
           num(x[i]).s);
      return;
    }
  }
  if (!(x[4] > 0)) {
    fail(ctx, "hybrid_score(): 5th argument saturation must be > 0, got %s", num(x[4]).s);
    return;
  }
  double keyword = rank_is_null ? 0.0 : hs_bm25_score(x[1], x[4]);
  sqlite3_result_double(ctx, x[2] * x[0] + x[3] * keyword); /* Requirement 7 */
}

static void temporal_decay_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  double now, half_life = HS_HALF_LIFE;
  if (argc > 2) {
    if (!read_number(ctx, argv[2], "temporal_decay", 2, "half_life_days", &half_life)) return;
    if (!(half_life > 0)) {
      fail(ctx, "temporal_decay(): 3rd argument half_life_days must be > 0, got %s",
           num(half_life).s);
      return;
    }
  }
  int ptype = sqlite3_value_type(argv[0]), ntype = sqlite3_value_type(argv[1]);
  if (ptype == SQLITE_NULL || ntype == SQLITE_NULL) return; /* Requirement 2 */
  if (ptype != SQLITE_TEXT) {
    fail(ctx, "temporal_decay(): 1st argument path must be text, got %s", type_name(argv[0]));
    return;
  }
  if (ntype == SQLITE_INTEGER || ntype == SQLITE_FLOAT) {
    if (!read_number(ctx, argv[1], "temporal_decay", 1, "now", &now)) return;
  } else {
    const char *s = ntype == SQLITE_TEXT ? (const char *)sqlite3_value_text(argv[1]) : 0;
    if (!s || !hs_parse_time(s, sqlite3_value_bytes(argv[1]), &now)) {
      fail(ctx, "temporal_decay(): 2nd argument now must be unix seconds or ISO-8601 text, got %s",
           ntype == SQLITE_TEXT ? "unreadable text" : type_name(argv[1]));
      return;
    }
  }
  int64_t days;
  const char *path = (const char *)sqlite3_value_text(argv[0]);
  if (!hs_path_date(path, sqlite3_value_bytes(argv[0]), &days)) {
    sqlite3_result_double(ctx, 1.0); /* Requirement 8: undated paths never decay */
    return;
  }
  sqlite3_result_double(ctx, hs_decay((now - (double)days * 86400.0) / 86400.0, half_life));
}

static void vector_blob_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  Vec v;
  (void)argc;
  if (read_vector(ctx, argv[0], "vector_blob", "1st argument", &v) <= 0) return;
  sqlite3_result_blob64(ctx, v.v, sizeof(float) * (sqlite3_uint64)v.d, SQLITE_TRANSIENT);
  vec_free(&v);
}

static void vector_json_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  Vec v;
  char buf[32];
  (void)argc;
  if (read_vector(ctx, argv[0], "vector_json", "1st argument", &v) <= 0) return;
  sqlite3_str *out = sqlite3_str_new(0);
  sqlite3_str_appendchar(out, 1, '[');
  for (int64_t i = 0; i < v.d; i++) {
    if (i) sqlite3_str_appendchar(out, 1, ',');
    hs_format_float((float)loadf(v.v + i), buf, sizeof(buf));
    sqlite3_str_appendall(out, buf);
  }
  sqlite3_str_appendchar(out, 1, ']');
  int n = sqlite3_str_length(out);
  char *json = sqlite3_str_finish(out);
  if (!json) {
    sqlite3_result_error_nomem(ctx);
  } else {
    sqlite3_result_text(ctx, json, n, sqlite3_free);
  }
  vec_free(&v);
}

static void version_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  sqlite3_result_text(ctx, HS_VERSION, -1, SQLITE_STATIC);
}

static void debug_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  char *s = sqlite3_mprintf("hybridsql %s; backend extension; simd %s; sqlite %s; headers %s",
                            HS_VERSION, hs_simd_path(), sqlite3_libversion(), SQLITE_VERSION);
  if (!s) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  sqlite3_result_text(ctx, s, -1, sqlite3_free);
}

/* ========================================================================
** vector_topk (Requirement 10): an eponymous table-valued function over a
** packed copy of the `vectors` table, kept per connection and rebuilt when
** meta.vectors_version (bumped by triggers on every write, from any
** connection) differs from the one it was built at.
*/

/* One per connection: the packed copy and what it was built from. */
typedef struct TopkCache {
  Packed p;
  char *model;            /* the model_id it holds; NULL for every row */
  sqlite3_int64 version;  /* meta.vectors_version it was built at */
  int valid;              /* built outside a transaction, so from committed rows */
} TopkCache;

static void packed_clear(Packed *p) {
  free(p->ids);
  free(p->vecs);
  free(p->inv_norms);
  free(p->q8);
  free(p->q8_mul);
  free(p->q8_l1);
  memset(p, 0, sizeof(*p));
}

static void cache_free(void *arg) {
  TopkCache *c = arg;
  packed_clear(&c->p);
  sqlite3_free(c->model);
  sqlite3_free(c);
}

typedef struct TopkVtab {
  sqlite3_vtab base;
  sqlite3 *db;
  TopkCache *cache;
} TopkVtab;

typedef struct TopkCursor {
  sqlite3_vtab_cursor base;
  Hit *hits;
  int64_t len, i;
} TopkCursor;

enum { TK_ID, TK_SCORE, TK_QUERY, TK_K, TK_MODEL, TK_IDS, TK_PRECISION };

static int topk_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                        sqlite3_vtab **out, char **err) {
  (void)argc;
  (void)argv;
  (void)err;
  int rc = sqlite3_declare_vtab(db,
                                "create table x(id integer, score real, query hidden, k hidden,"
                                " model hidden, ids hidden, precision hidden)");
  if (rc != SQLITE_OK) return rc;
  TopkVtab *vt = sqlite3_malloc(sizeof(TopkVtab));
  if (!vt) return SQLITE_NOMEM;
  memset(vt, 0, sizeof(*vt));
  vt->db = db;
  vt->cache = aux;
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  *out = &vt->base;
  return SQLITE_OK;
}

static int topk_disconnect(sqlite3_vtab *vt) {
  sqlite3_free(vt);
  return SQLITE_OK;
}

/* The hidden columns that have an = constraint go to xFilter in column order. */
static int topk_best_index(sqlite3_vtab *vt, sqlite3_index_info *info) {
  int at[7] = {-1, -1, -1, -1, -1, -1, -1}, mask = 0, n = 0;
  (void)vt;
  for (int i = 0; i < info->nConstraint; i++) {
    const struct sqlite3_index_constraint *c = &info->aConstraint[i];
    if (c->iColumn < TK_QUERY || c->op != SQLITE_INDEX_CONSTRAINT_EQ) continue;
    if (!c->usable) return SQLITE_CONSTRAINT;
    at[c->iColumn] = i;
  }
  for (int col = TK_QUERY; col <= TK_PRECISION; col++) {
    if (at[col] < 0) continue;
    mask |= 1 << col;
    info->aConstraintUsage[at[col]].argvIndex = ++n;
    info->aConstraintUsage[at[col]].omit = 1;
  }
  info->idxNum = mask;
  info->estimatedCost = 10.0;
  info->estimatedRows = 10;
  return SQLITE_OK;
}

static int topk_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out) {
  (void)vt;
  TopkCursor *c = sqlite3_malloc(sizeof(TopkCursor));
  if (!c) return SQLITE_NOMEM;
  memset(c, 0, sizeof(*c));
  *out = &c->base;
  return SQLITE_OK;
}

static int topk_close(sqlite3_vtab_cursor *cur) {
  TopkCursor *c = (TopkCursor *)cur;
  sqlite3_free(c->hits);
  sqlite3_free(c);
  return SQLITE_OK;
}

/* Sets the vtab's error message; takes ownership of msg (or NOMEM). */
static int vt_error(sqlite3_vtab *vt, char *msg) {
  sqlite3_free(vt->zErrMsg);
  vt->zErrMsg = 0;
  if (!msg || msg == NOMEM) return SQLITE_NOMEM;
  vt->zErrMsg = msg;
  return SQLITE_ERROR;
}

/* Reads meta.vectors_version; 0 after setting an error. */
static int read_version(TopkVtab *vt, sqlite3_int64 *version) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(vt->db, "select value from meta where key = 'vectors_version'", -1, &st,
                         0) != SQLITE_OK) {
    vt_error(&vt->base, sqlite3_mprintf("vector_topk(): this database has no hybridsql index"
                                        " (no table meta): %s", sqlite3_errmsg(vt->db)));
    return 0;
  }
  int rc = sqlite3_step(st);
  *version = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  return 1;
}

/* Rebuilds the packed copy from the vectors of `model` (every row when NULL). */
static int cache_build(TopkVtab *vt, const char *model, sqlite3_int64 version) {
  TopkCache *cache = vt->cache;
  Packed *p = &cache->p;
  packed_clear(p);
  cache->valid = 0;
  sqlite3_free(cache->model);
  cache->model = model ? sqlite3_mprintf("%s", model) : 0;
  if (model && !cache->model) return SQLITE_NOMEM;
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(vt->db,
                              "select chunk_id, vector from vectors"
                              " where ?1 is null or model_id = ?1 order by chunk_id",
                              -1, &st, 0);
  if (rc != SQLITE_OK) {
    return vt_error(&vt->base, sqlite3_mprintf("vector_topk(): cannot read table vectors: %s",
                                               sqlite3_errmsg(vt->db)));
  }
  sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC);
  int64_t cap = 0, first_id = 0;
  char *err = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (sqlite3_column_type(st, 1) == SQLITE_NULL) continue;
    int64_t id = sqlite3_column_int64(st, 0);
    char what[64];
    Vec v;
    sqlite3_snprintf(sizeof(what), what, "the vector of row %lld", id);
    if ((err = parse_vector(sqlite3_column_value(st, 1), "vector_topk", what, &v))) break;
    if (p->n == 0) {
      p->d = v.d;
      first_id = id;
    } else if (v.d != p->d) {
      err = sqlite3_mprintf("vector_topk(): row %lld has %lld dimensions, row %lld has %lld", id,
                            v.d, first_id, p->d);
      vec_free(&v);
      break;
    }
    if (p->n == cap) {
      cap = cap ? cap * 2 : 1024;
      int64_t *ids = realloc(p->ids, sizeof(int64_t) * (size_t)cap);
      float *vecs =
          ids ? big_grow(p->vecs, sizeof(float) * (size_t)(p->n * p->d),
                         sizeof(float) * (size_t)(cap * p->d))
              : 0;
      float *inv = vecs ? realloc(p->inv_norms, sizeof(float) * (size_t)cap) : 0;
      if (ids) p->ids = ids;
      if (vecs) p->vecs = vecs;
      if (inv) p->inv_norms = inv;
      if (!inv) {
        err = NOMEM;
        vec_free(&v);
        break;
      }
    }
    memcpy(p->vecs + p->n * p->d, v.v, sizeof(float) * (size_t)p->d);
    double nn = squared_norm(v.v, v.d, dot2());
    p->inv_norms[p->n] = safe_norm(nn) ? (float)(1.0 / sqrt(nn)) : NAN; /* NaN: exact */
    p->ids[p->n++] = id;
    vec_free(&v);
  }
  if (!err && rc != SQLITE_DONE) {
    err = sqlite3_mprintf("vector_topk(): reading vectors failed: %s", sqlite3_errmsg(vt->db));
  }
  sqlite3_finalize(st);
  if (err) {
    packed_clear(p);
    return vt_error(&vt->base, err);
  }
  cache->version = version;
  /* Rows read inside a transaction may yet be rolled back: use them once only. */
  cache->valid = sqlite3_get_autocommit(vt->db);
  return SQLITE_OK;
}

static int cmp_int64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Parses a JSON array of integer ids into the sorted row numbers they have. */
static char *parse_ids(const Packed *p, const char *s, int64_t n, int64_t **rows, int64_t *nrows) {
  int64_t cap = n / 2 + 1, len = 0, parsed = 0, i = 0;
  int64_t *out = sqlite3_malloc64(sizeof(int64_t) * (uint64_t)cap);
  if (!out) return NOMEM;
  while (i < n && is_ws(s[i])) i++;
  int ok = i < n && s[i] == '[';
  i++;
  while (ok) {
    while (i < n && is_ws(s[i])) i++;
    if (i < n && s[i] == ']' && parsed == 0) break; /* [] and only [] */
    int64_t start = i, neg = i < n && s[i] == '-', over = 0;
    uint64_t u = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (neg) i++;
    while (i < n && s[i] >= '0' && s[i] <= '9') { /* an id beyond int64 is an error */
      unsigned digit = (unsigned)(s[i++] - '0');
      if (u > (limit - digit) / 10) over = 1;
      else u = u * 10 + digit;
    }
    if (i == start + neg || over) {
      ok = 0;
      break;
    }
    parsed++;
    int64_t v = neg ? (int64_t)(0 - u) : (int64_t)u; /* 0 - 2^63 wraps to INT64_MIN */
    /* ids are ascending: binary search, from the last find when v is past it (json_group_array
       over an index gives ascending ids: then each search gallops over a few rows) */
    int64_t lo = 0, hi = p->n;
    if (len > 0 && p->ids[out[len - 1]] <= v) {
      int64_t step = 1;
      lo = out[len - 1];
      while (lo + step < p->n && p->ids[lo + step] < v) step *= 2;
      hi = lo + step < p->n ? lo + step + 1 : p->n;
      lo += step / 2;
    }
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (p->ids[mid] < v) lo = mid + 1; else hi = mid;
    }
    if (lo < p->n && p->ids[lo] == v) out[len++] = lo;
    while (i < n && is_ws(s[i])) i++;
    if (i < n && s[i] == ',') {
      i++;
      continue;
    }
    ok = i < n && s[i] == ']';
    break;
  }
  if (ok) {
    i++;
    while (i < n && is_ws(s[i])) i++;
    ok = i == n;
  }
  if (!ok) {
    sqlite3_free(out);
    return sqlite3_mprintf("vector_topk(): 4th argument ids must be a JSON array of integers");
  }
  /* sort (unless sorted already) and drop duplicates, so each row is scored once */
  int sorted = 1;
  for (int64_t a = 1; a < len && sorted; a++) sorted = out[a - 1] <= out[a];
  if (!sorted) qsort(out, (size_t)len, sizeof(int64_t), cmp_int64);
  int64_t m = 0;
  for (int64_t a = 0; a < len; a++) {
    if (m == 0 || out[m - 1] != out[a]) out[m++] = out[a];
  }
  *rows = out;
  *nrows = m;
  return 0;
}

static int topk_filter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr, int argc,
                       sqlite3_value **argv) {
  TopkCursor *c = (TopkCursor *)cur;
  TopkVtab *vt = (TopkVtab *)cur->pVtab;
  sqlite3_value *arg[7] = {0};
  (void)idxStr;
  for (int col = TK_QUERY, j = 0; col <= TK_PRECISION && j < argc; col++) {
    if (idxNum & (1 << col)) arg[col] = argv[j++];
  }
  sqlite3_free(c->hits);
  c->hits = 0;
  c->len = c->i = 0;
  if (!arg[TK_QUERY] || !arg[TK_K]) {
    return vt_error(cur->pVtab, sqlite3_mprintf("vector_topk(): needs a query vector and k"));
  }
  Vec q;
  char *err = parse_vector(arg[TK_QUERY], "vector_topk", "1st argument", &q);
  if (err) return vt_error(cur->pVtab, err);
  if (!q.v) return SQLITE_OK; /* a NULL query: no rows */
  int rc = SQLITE_OK;
  int64_t k = 0, *rows = 0, nrows = 0;
  const char *model = 0;
  if (sqlite3_value_type(arg[TK_K]) != SQLITE_INTEGER) {
    rc = vt_error(cur->pVtab, sqlite3_mprintf("vector_topk(): 2nd argument k must be an integer"
                                              " from 1 to %d, got %s", HS_MAX_K,
                                              type_name(arg[TK_K])));
    goto done;
  }
  k = sqlite3_value_int64(arg[TK_K]);
  if (k < 1 || k > HS_MAX_K) {
    rc = vt_error(cur->pVtab, sqlite3_mprintf("vector_topk(): 2nd argument k must be an integer"
                                              " from 1 to %d, got %lld", HS_MAX_K, k));
    goto done;
  }
  if (arg[TK_MODEL] && sqlite3_value_type(arg[TK_MODEL]) != SQLITE_NULL) {
    if (sqlite3_value_type(arg[TK_MODEL]) != SQLITE_TEXT) {
      rc = vt_error(cur->pVtab, sqlite3_mprintf("vector_topk(): 3rd argument model must be text,"
                                                " got %s", type_name(arg[TK_MODEL])));
      goto done;
    }
    model = (const char *)sqlite3_value_text(arg[TK_MODEL]);
  }
  int int8 = 1; /* the default: exact, and the faster pass */
  if (arg[TK_PRECISION] && sqlite3_value_type(arg[TK_PRECISION]) != SQLITE_NULL) {
    const char *prec = (const char *)sqlite3_value_text(arg[TK_PRECISION]);
    int8 = prec && strcmp(prec, "int8") == 0;
    if (!prec || (!int8 && strcmp(prec, "float32") != 0)) {
      rc = vt_error(cur->pVtab, sqlite3_mprintf("vector_topk(): 5th argument precision must be"
                                                " 'float32' or 'int8'"));
      goto done;
    }
  }
  sqlite3_int64 version;
  if (!read_version(vt, &version)) {
    rc = SQLITE_ERROR;
    goto done;
  }
  TopkCache *cache = vt->cache;
  int same_model = (!model && !cache->model) ||
                   (model && cache->model && strcmp(model, cache->model) == 0);
  if (!cache->valid || cache->version != version || !same_model) {
    if ((rc = cache_build(vt, model, version)) != SQLITE_OK) goto done;
  }
  Packed *p = &cache->p;
  if (p->n > 0 && q.d != p->d) {
    rc = vt_error(cur->pVtab, sqlite3_mprintf("vector_topk(): 1st argument has %lld dimensions,"
                                              " the vectors have %lld", q.d, p->d));
    goto done;
  }
  if (arg[TK_IDS] && sqlite3_value_type(arg[TK_IDS]) != SQLITE_NULL) {
    const char *s = (const char *)sqlite3_value_text(arg[TK_IDS]);
    if (sqlite3_value_type(arg[TK_IDS]) != SQLITE_TEXT || !s) {
      rc = vt_error(cur->pVtab, sqlite3_mprintf("vector_topk(): 4th argument ids must be a JSON"
                                                " array of integers"));
      goto done;
    }
    if ((err = parse_ids(p, s, sqlite3_value_bytes(arg[TK_IDS]), &rows, &nrows))) {
      rc = vt_error(cur->pVtab, err);
      goto done;
    }
  }
  if (int8) {
    if (!packed_quantize(p)) {
      rc = SQLITE_NOMEM;
      goto done;
    }
  }
  c->hits = sqlite3_malloc64(sizeof(Hit) * (uint64_t)k);
  if (!c->hits) {
    rc = SQLITE_NOMEM;
    goto done;
  }
  c->len = p->n ? packed_search(p, q.v, k, rows, rows ? nrows : -1, int8, c->hits) : 0;
  if (c->len < 0) {
    c->len = 0;
    rc = SQLITE_NOMEM;
  }
done:
  if (!vt->cache->valid) packed_clear(&vt->cache->p); /* read in a transaction: drop it */
  vec_free(&q);
  sqlite3_free(rows);
  return rc;
}

static int topk_next(sqlite3_vtab_cursor *cur) {
  ((TopkCursor *)cur)->i++;
  return SQLITE_OK;
}

static int topk_eof(sqlite3_vtab_cursor *cur) {
  TopkCursor *c = (TopkCursor *)cur;
  return c->i >= c->len;
}

static int topk_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  TopkCursor *c = (TopkCursor *)cur;
  if (col == TK_ID) sqlite3_result_int64(ctx, c->hits[c->i].id);
  else if (col == TK_SCORE) sqlite3_result_double(ctx, c->hits[c->i].score);
  return SQLITE_OK;
}

static int topk_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid) {
  *rowid = ((TopkCursor *)cur)->i + 1;
  return SQLITE_OK;
}

static sqlite3_module topk_module = {
    .xCreate = 0, /* eponymous only */
    .xConnect = topk_connect,
    .xBestIndex = topk_best_index,
    .xDisconnect = topk_disconnect,
    .xOpen = topk_open,
    .xClose = topk_close,
    .xFilter = topk_filter,
    .xNext = topk_next,
    .xEof = topk_eof,
    .xColumn = topk_column,
    .xRowid = topk_rowid,
};

/* ------------------------------------------------------------------------
** bm25_candidate (Requirement 11): bm25() without its costliest step for
** rows that cannot make the top n.  bm25() reads every matching row's length
** from the %_docsize table, a lookup that is about 70% of its time
** (bench/run.py, 100k chunks).  A row's bm25 score is highest when its
** length is 0, and that bound needs no lookup: when it is below the n-th best
** score seen so far, the row is out.  The phrase counts come from
** xPhraseFirst/xPhraseNext, which read each phrase's positions once, where
** xInst first merges all phrases' positions into one sorted list.
*/
#define HS_BM25_K1 1.2 /* FTS5's bm25() constants */
#define HS_BM25_B 0.75

#define HS_BM25_TAB 16 /* counts whose length-0 term is looked up, not divided (4% faster) */

typedef struct Bm25Bound {
  int nphrase;
  double avgdl;
  double *idf, *freq; /* per phrase; freq is per row */
  int *order;         /* phrases by idf, highest first */
  double *rest;       /* rest[j]: the most phrases order[j..] can add (at any count and length) */
  double *top;        /* top[i * HS_BM25_TAB + f]: phrase i's score at count f and length 0 */
  int64_t n, len;
  Hit *best;          /* heap (heap_push) of the n best scores seen; heap_bar is the bar */
  sqlite3_int64 last; /* the last row counted, so that a second call does not count it twice */
  double last_rank;   /* and its rank */
  int counted;
} Bm25Bound;

static int count_row(const Fts5ExtensionApi *api, Fts5Context *fts, void *arg) {
  (void)api, (void)fts;
  (*(sqlite3_int64 *)arg)++;
  return SQLITE_OK;
}

/* One phrase's term of the bm25 sum, as FTS5 writes it. */
static double bm25_term(double idf, double f, double length, double avgdl) {
  return idf * ((f * (HS_BM25_K1 + 1.0)) /
                (f + HS_BM25_K1 * (1.0 - HS_BM25_B + HS_BM25_B * length / avgdl)));
}

/* The query's constants, as FTS5's bm25() computes them; NULL when out of memory. */
static Bm25Bound *bm25_bound_new(const Fts5ExtensionApi *api, Fts5Context *fts, int64_t n,
                                 int *rc) {
  int np = api->xPhraseCount(fts);
  uint64_t doubles = (uint64_t)np * (3 + HS_BM25_TAB) + 1;
  Bm25Bound *b = sqlite3_malloc64(sizeof(Bm25Bound) + sizeof(Hit) * (uint64_t)n +
                                   sizeof(double) * doubles + sizeof(int) * (uint64_t)np);
  if (!b) {
    *rc = SQLITE_NOMEM;
    return 0;
  }
  memset(b, 0, sizeof(*b));
  b->nphrase = np;
  b->best = (Hit *)(b + 1);
  b->idf = (double *)(b->best + n);
  b->freq = b->idf + np;
  b->rest = b->freq + np;
  b->top = b->rest + np + 1;
  b->order = (int *)(b->top + (size_t)np * HS_BM25_TAB);
  b->n = n;
  sqlite3_int64 rows = 0, tokens = 0;
  if ((*rc = api->xRowCount(fts, &rows)) == SQLITE_OK &&
      (*rc = api->xColumnTotalSize(fts, -1, &tokens)) == SQLITE_OK) {
    b->avgdl = rows > 0 ? (double)tokens / (double)rows : 1.0;
    for (int i = 0; i < np && *rc == SQLITE_OK; i++) {
      sqlite3_int64 hits = 0;
      *rc = api->xQueryPhrase(fts, i, &hits, count_row);
      double idf = log((rows - hits + 0.5) / (hits + 0.5));
      b->idf[i] = idf > 0.0 ? idf : 1e-6;
      int j = i; /* insertion sort into order[], highest idf first (queries have few phrases) */
      for (; j > 0 && b->idf[b->order[j - 1]] < b->idf[i]; j--) b->order[j] = b->order[j - 1];
      b->order[j] = i;
      for (int f = 0; f < HS_BM25_TAB; f++)
        b->top[i * HS_BM25_TAB + f] = bm25_term(b->idf[i], f, 0.0, b->avgdl);
    }
  }
  if (*rc != SQLITE_OK) {
    sqlite3_free(b);
    return 0;
  }
  b->rest[np] = 0.0;
  for (int j = np - 1; j >= 0; j--) /* a term is below idf * (k1 + 1) at any count */
    b->rest[j] = b->rest[j + 1] + b->idf[b->order[j]] * (HS_BM25_K1 + 1.0);
  return b;
}

/* The bm25 score (bm25() negated) of a row of `length` tokens with b->freq, in
** the order of FTS5's own sum, so that the rank is bm25()'s to the last bit. */
static double bm25_of(const Bm25Bound *b, double length) {
  double score = 0.0;
  for (int i = 0; i < b->nphrase; i++) score += bm25_term(b->idf[i], b->freq[i], length, b->avgdl);
  return score;
}

static void bm25_candidate_func(const Fts5ExtensionApi *api, Fts5Context *fts,
                                sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  if (argc != 1 || sqlite3_value_type(argv[0]) != SQLITE_INTEGER ||
      sqlite3_value_int64(argv[0]) < 1 || sqlite3_value_int64(argv[0]) > HS_MAX_K) {
    fail(ctx, "bm25_candidate(): 2nd argument n must be an integer from 1 to %d", HS_MAX_K);
    return;
  }
  int rc = SQLITE_OK;
  Bm25Bound *b = api->xGetAuxdata(fts, 0);
  if (!b) {
    if (!(b = bm25_bound_new(api, fts, sqlite3_value_int64(argv[0]), &rc)) ||
        (rc = api->xSetAuxdata(fts, b, sqlite3_free)) != SQLITE_OK) {
      sqlite3_result_error_code(ctx, rc);
      return;
    }
  }
  sqlite3_int64 row = api->xRowid(fts);
  if (b->counted && row == b->last) { /* asked again about the same row */
    sqlite3_result_double(ctx, b->last_rank);
    return;
  }
  /* Count the phrases, rarest first, and stop as soon as the row cannot reach
  ** the bar at any length: what is counted at length 0 plus the most the rest
  ** could add.  The 1e-9 covers rounding in sums taken in another order. */
  double bar = heap_bar(b->best, b->len, b->n), reach = 0.0;
  for (int j = 0; j < b->nphrase; j++) {
    int i = b->order[j], column, offset, f = 0;
    Fts5PhraseIter it;
    rc = api->xPhraseFirst(fts, i, &it, &column, &offset);
    for (; rc == SQLITE_OK && column >= 0; api->xPhraseNext(fts, &it, &column, &offset)) f++;
    if (rc != SQLITE_OK) {
      sqlite3_result_error_code(ctx, rc);
      return;
    }
    b->freq[i] = f;
    reach += f < HS_BM25_TAB ? b->top[i * HS_BM25_TAB + f] : bm25_term(b->idf[i], f, 0.0, b->avgdl);
    if ((reach + b->rest[j + 1]) * (1.0 + 1e-9) < bar) {
      sqlite3_result_null(ctx);
      return;
    }
  }
  int length = 0;
  if ((rc = api->xColumnSize(fts, -1, &length)) != SQLITE_OK) {
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  Hit x = {bm25_of(b, (double)length), row};
  heap_push(b->best, &b->len, b->n, x);
  b->last = row;
  b->last_rank = -1.0 * x.score; /* as bm25() returns it */
  b->counted = 1;
  sqlite3_result_double(ctx, b->last_rank);
}

/* Registers bm25_candidate with FTS5, when this SQLite has FTS5. */
static int register_fts5(sqlite3 *db) {
  fts5_api *fts5 = 0;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, "select fts5(?1)", -1, &st, 0) != SQLITE_OK) return SQLITE_OK;
  sqlite3_bind_pointer(st, 1, (void *)&fts5, "fts5_api_ptr", 0);
  sqlite3_step(st);
  sqlite3_finalize(st);
  if (!fts5 || fts5->iVersion < 2) return SQLITE_OK;
  return fts5->xCreateFunction(fts5, "bm25_candidate", 0, bm25_candidate_func, 0);
}

#define HS_PURE (SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS)

static const struct {
  const char *name;
  int nArg;
  int flags;
  void (*xFunc)(sqlite3_context *, int, sqlite3_value **);
  void (*xStep)(sqlite3_context *, int, sqlite3_value **);
  void (*xFinal)(sqlite3_context *);
} FUNCTIONS[] = {
    {"cosine_similarity", 2, HS_PURE, cosine_similarity_func, 0, 0},
    {"cosine_topk", 4, HS_PURE, 0, topk_step, topk_final},
    {"bm25_score", 1, HS_PURE, bm25_score_func, 0, 0},
    {"bm25_score", 2, HS_PURE, bm25_score_func, 0, 0},
    {"hybrid_score", 2, HS_PURE, hybrid_score_func, 0, 0},
    {"hybrid_score", 4, HS_PURE, hybrid_score_func, 0, 0},
    {"hybrid_score", 5, HS_PURE, hybrid_score_func, 0, 0},
    {"temporal_decay", 2, HS_PURE, temporal_decay_func, 0, 0},
    {"temporal_decay", 3, HS_PURE, temporal_decay_func, 0, 0},
    {"vector_blob", 1, HS_PURE, vector_blob_func, 0, 0},
    {"vector_json", 1, HS_PURE, vector_json_func, 0, 0},
    {"hybridsql_version", 0, HS_PURE, version_func, 0, 0},
    {"hybridsql_debug", 0, SQLITE_UTF8 | SQLITE_INNOCUOUS, debug_func, 0, 0},
};

/* Sets *pzErrMsg to "hybridsql: cannot register NAME: why" and returns rc. */
static int init_error(sqlite3 *db, char **pzErrMsg, const char *name, int rc) {
  if (pzErrMsg) {
    *pzErrMsg = sqlite3_mprintf("hybridsql: cannot register %s: %s", name,
                                rc == SQLITE_NOMEM ? "out of memory" : sqlite3_errmsg(db));
  }
  return rc;
}

/* The one symbol the library exports: setup.py builds with -fvisibility=hidden. */
#if defined(_WIN32)
__declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
__attribute__((visibility("default")))
#endif
int sqlite3_hybridsql_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  SQLITE_EXTENSION_INIT2(pApi);
  dot2();
  TopkCache *cache = sqlite3_malloc(sizeof(TopkCache));
  if (!cache) return init_error(db, pzErrMsg, "vector_topk", SQLITE_NOMEM);
  memset(cache, 0, sizeof(*cache));
  int rc = sqlite3_create_module_v2(db, "vector_topk", &topk_module, cache, cache_free);
  if (rc != SQLITE_OK) return init_error(db, pzErrMsg, "vector_topk", rc);
  for (size_t i = 0; i < sizeof(FUNCTIONS) / sizeof(FUNCTIONS[0]); i++) {
    rc = sqlite3_create_function_v2(db, FUNCTIONS[i].name, FUNCTIONS[i].nArg,
                                        FUNCTIONS[i].flags, 0, FUNCTIONS[i].xFunc,
                                        FUNCTIONS[i].xStep, FUNCTIONS[i].xFinal, 0);
    if (rc != SQLITE_OK) return init_error(db, pzErrMsg, FUNCTIONS[i].name, rc);
  }
  rc = register_fts5(db);
  return rc == SQLITE_OK ? rc : init_error(db, pzErrMsg, "bm25_candidate", rc);
}
#endif /* HYBRIDSQL_KERNELS_ONLY */
