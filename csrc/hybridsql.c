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
**   bm25_score(rank [, saturation])          -> REAL in [0, 1]
**       an FTS5 bm25() rank mapped to a score.  select bm25_score(-4.2) -> 0.295774647887324
**   hybrid_score(vector_score, bm25_rank [, vector_weight, keyword_weight [, saturation]])
**       the weighted fusion of both.  select hybrid_score(0.8, -4.2) -> 0.648732394366197
**   temporal_decay(path, now [, half_life_days]) -> REAL in [0, 1]
**       decay of a dated memory file.
**       select temporal_decay('memory/2026-10-22.md', '2026-11-21') -> 0.5
**   vector_blob(x), vector_json(x)           -> BLOB, TEXT
**       convert between the encodings.  select vector_json(vector_blob('[0.1, 2]')) -> [0.1,2]
**   create virtual table T using vector_index(COLUMN float[D], ...)
**       a table that owns its vectors; its k-nearest query is the fast form
**       of cosine_topk.  select rowid, score from T where COLUMN match :q
**       and k = 10 and project = 'x'
**   bm25_candidate(fts_table, n)             -> REAL or NULL, an FTS5 function
**       the row's bm25() rank, or NULL when it cannot be among the n best:
**       order by it with LIMIT n instead of by bm25(), for a fraction of the work.
**   hybridsql_version()                      -> TEXT, e.g. 0.1.0
**   hybridsql_debug()                        -> TEXT, version, SIMD path and SQLite versions
**   hybridsql_simd()                         -> TEXT, the SIMD path the kernels run:
**       avx2+fma or sse2 (x86_64, by cpuid), neon (aarch64) or generic.
**       select hybridsql_simd() -> avx2+fma
**   embed(text), hybridsql_model(source)     -> BLOB, TEXT
**       a text's vector by the embedding model, and the model file it runs: csrc/embedsql.c,
**       Requirements 12 to 15.
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
**    typical FTS5 ranks are 10 to 20 and r / (1 + r) flattens them all.  The
**    score is in [0, 1] (it rounds to 1 when saturation is tiny beside r),
**    also when saturation + r would overflow a double.
** 7. hybrid_score(v, rank [, vw, kw [, saturation]]) =
**    vw * coalesce(v, 0) + kw * bm25_score(rank, saturation); v is a number
**    from -1 to 1 (a cosine, or a score in [0, 1]); vw and kw default to 0.7
**    and 0.3 and must be numbers >= 0 whose score is finite (weights near the
**    largest double can overflow it: an error, never an infinity).
** 8. temporal_decay(path, now [, half_life_days]) =
**    exp(-ln 2 / half_life * max(0, age_days)) when the file name of path
**    (after the last '/' or '\') is YYYY-MM-DD.md with a real calendar date;
**    age_days is the time from that date's UTC midnight to now, in days.
**    1.0 for every other path.  now is unix seconds (INTEGER or REAL) or
**    ISO-8601 text: YYYY-MM-DD, optionally followed by 'T' or ' ', HH:MM,
**    optional :SS and fraction, and an optional Z or +HH:MM / -HH:MM offset.
**    half_life_days defaults to 30 and must be a number > 0.  No clock is
**    read, so the function is deterministic.  The result is in [0, 1] (0 when
**    the decay underflows), 1.0 at age 0 whatever the half life.
**    No SQL function returns NaN or an infinity.
** 9. vector_blob(x) returns the float32 BLOB of vector x; vector_json(x) its
**    JSON text, each value printed with the fewest digits (6 to 9) that read
**    back as the same float32.
** 10. vector_index is a virtual table module.  Its declaration names one
**    vector column, NAME float[D] (every row has D dimensions) or NAME float[]
**    (the rows of one partition share theirs); at most one NAME integer primary
**    key, another name for the rowid; and up to 24 columns NAME TYPE, TYPE text,
**    integer or real, each a partition column with "partition key" after it,
**    else a metadata column.  A row's vector is read as Requirement 1 and must
**    not be NULL; a partition or metadata value is NULL or of its column's type
**    (an integer is taken for a real).  score and k are hidden columns.  A query
**    "VECTOR match Q and k = K" gives the K rows most like Q among those its
**    other conditions select, with score the cosine of Requirement 4: the
**    same rows and scores as cosine_topk(Q, K, rowid, VECTOR) over those rows,
**    best first, ties by rowid.  The conditions applied before the top k are
**    those SQLite hands the table: comparisons (=, <, <=, >, >=, !=, IS, IS
**    NOT, IS NULL, IS NOT NULL, LIKE, GLOB, IN) of the rowid, a partition
**    column or a metadata column with a value, every one of them, and the ORs
**    SQLite reads as one of them (x = 1 or x = 2 as an IN list).  SQLite hands
**    no virtual table another OR, NOT IN, an expression of a column or another
**    table's column: it applies those to the K rows, and "rowid in (select
**    rowid from T where ...)" applies them first.  With k, a condition SQLite
**    hands over that the table cannot apply first (LIKE or GLOB on the rowid,
**    another collation, score other than >, >= and IS [NOT] NULL, the vector
**    compared with a value) is an error, never fewer rows.  Without k, the
**    query gives every row its conditions select, best first (k NULL), and
**    SQLite applies the rest, the ORDER BY and the LIMIT: "order by score desc
**    limit N" is the N best of the rows every condition selects (scored alone
**    where SQLite hands the LIMIT over, which it does only with every
**    condition, vx_best_index).  A NULL Q gives no rows.  The
**    first pass bounds each row's cosine from its int8 record (rec_build) and
**    the rows that could be in the top k are rescored exactly, so the answer
**    is exact whatever the data.  Without MATCH, the table is an ordinary
**    table of its columns.  INSERT, UPDATE (of any column, the rowid too) and
**    DELETE work as on a table, with ON CONFLICT REPLACE and IGNORE for the
**    rowid; a table's rows live in its shadow tables, written in the
**    statement's transaction, so any connection reads them straight from the
**    file.
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
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define HS_NEON 1 /* NEON is part of every aarch64 CPU: no run-time check is needed */
#include <arm_neon.h>
#endif

#if defined(_WIN32)
#include <malloc.h> /* _aligned_malloc */
#endif

/* The version is written once, in hybridsql/__init__.py; every build passes it (setup.py,
** scripts/platforms.py, fuzz/build.sh), so a library cannot report another one. */
#ifndef HYBRIDSQL_VERSION
#error "build with -DHYBRIDSQL_VERSION='\"X.Y.Z\"'; setup.py passes hybridsql.__version__"
#endif
#define HS_VERSION HYBRIDSQL_VERSION
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

/* ------------------------------------------------------------------------
** Kernels: dot products in double precision, with the SIMD path chosen at
** run time: on x86_64 AVX2+FMA when cpuid and xgetbv say the CPU and the OS
** support it, else SSE2; NEON on aarch64; a generic loop elsewhere.
** HYBRIDSQL_SIMD=generic|sse2 forces a lesser path, for testing.
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
/*
** a.b with maddubs (unsigned x signed bytes): |a| times b with a's sign, so that
** pairs of products, at most 2 x 127 x 128, never saturate 16 bits.  a is the
** query's codes, within [-127, 127] (quantize).
*/
static int32_t doti8_avx2(const int8_t *a, const int8_t *b, int64_t d) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= d; i += 32) {
    __m256i va = _mm256_loadu_si256((const __m256i *)(a + i));
    __m256i vb = _mm256_loadu_si256((const __m256i *)(b + i));
    __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(va), _mm256_sign_epi8(vb, va));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
  }
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
  int32_t sum = _mm_cvtsi128_si32(h);
  for (; i < d; i++) sum += (int32_t)a[i] * (int32_t)b[i];
  return sum;
}
#endif

#ifdef HS_NEON
static void dot2_neon(const float *a, const float *b, int64_t d, double *ab, double *bb) {
  float64x2_t s0 = vdupq_n_f64(0), s1 = vdupq_n_f64(0), n0 = vdupq_n_f64(0), n1 = vdupq_n_f64(0);
  int64_t i = 0;
  for (; i + 4 <= d; i += 4) {
    float32x4_t va = vld1q_f32(a + i), vb = vld1q_f32(b + i);
    float64x2_t alo = vcvt_f64_f32(vget_low_f32(va)), ahi = vcvt_high_f64_f32(va);
    float64x2_t blo = vcvt_f64_f32(vget_low_f32(vb)), bhi = vcvt_high_f64_f32(vb);
    s0 = vfmaq_f64(s0, alo, blo);
    s1 = vfmaq_f64(s1, ahi, bhi);
    n0 = vfmaq_f64(n0, blo, blo);
    n1 = vfmaq_f64(n1, bhi, bhi);
  }
  double sa = vaddvq_f64(vaddq_f64(s0, s1)), na = vaddvq_f64(vaddq_f64(n0, n1));
  for (; i < d; i++) {
    double x = loadf(a + i), y = loadf(b + i);
    sa += x * y;
    na += y * y;
  }
  *ab = sa;
  *bb = na;
}

static float dotf_neon(const float *a, const float *b, int64_t d) {
  float32x4_t s0 = vdupq_n_f32(0), s1 = vdupq_n_f32(0), s2 = vdupq_n_f32(0), s3 = vdupq_n_f32(0);
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
    s2 = vfmaq_f32(s2, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8));
    s3 = vfmaq_f32(s3, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12));
  }
  for (; i + 4 <= d; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
  float sum = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
  for (; i < d; i++) sum += a[i] * b[i];
  return sum;
}

static void dot2f_neon(const float *a, const float *b, int64_t d, float *ab, float *bb) {
  float32x4_t s0 = vdupq_n_f32(0), s1 = vdupq_n_f32(0), n0 = vdupq_n_f32(0), n1 = vdupq_n_f32(0);
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    float32x4_t a0 = vld1q_f32(a + i), a1 = vld1q_f32(a + i + 4);
    float32x4_t b0 = vld1q_f32(b + i), b1 = vld1q_f32(b + i + 4);
    s0 = vfmaq_f32(s0, a0, b0);
    s1 = vfmaq_f32(s1, a1, b1);
    n0 = vfmaq_f32(n0, b0, b0);
    n1 = vfmaq_f32(n1, b1, b1);
  }
  float sa = vaddvq_f32(vaddq_f32(s0, s1)), na = vaddvq_f32(vaddq_f32(n0, n1));
  for (; i < d; i++) {
    float x = (float)loadf(a + i), y = (float)loadf(b + i);
    sa += x * y;
    na += y * y;
  }
  *ab = sa;
  *bb = na;
}

/* Exact: each product of two int8 fits int16 (vmull), and pairs are summed into int32. */
static int32_t doti8_neon(const int8_t *a, const int8_t *b, int64_t d) {
  int32x4_t acc = vdupq_n_s32(0);
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    int8x16_t va = vld1q_s8(a + i), vb = vld1q_s8(b + i);
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(va), vget_low_s8(vb)));
    acc = vpadalq_s16(acc, vmull_high_s8(va, vb));
  }
  int32_t sum = vaddvq_s32(acc);
  for (; i < d; i++) sum += (int32_t)a[i] * (int32_t)b[i];
  return sum;
}
#endif

#ifdef HS_X86
/*
** Whether the CPU has AVX2 and FMA and the OS saves the YMM registers, asked of
** cpuid and xgetbv directly: __builtin_cpu_supports() needs a runtime that some
** toolchains stub (zig cc's always answers 0).
*/
static void hs_cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
  __asm__ __volatile__("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

static int hs_has_avx2_fma(void) {
  unsigned r[4];
  hs_cpuid(0, 0, r);
  if (r[0] < 7) return 0;
  hs_cpuid(1, 0, r);
  int fma = (r[2] >> 12) & 1, osxsave = (r[2] >> 27) & 1, avx = (r[2] >> 28) & 1;
  if (!fma || !osxsave || !avx) return 0;
  unsigned lo, hi;
  __asm__ __volatile__(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0)); /* xgetbv */
  (void)hi;
  if ((lo & 6) != 6) return 0; /* the OS saves XMM and YMM state */
  hs_cpuid(7, 0, r);
  return (r[1] >> 5) & 1;
}
#endif

/* The checksum of one whole 256-byte chunk of a T_codes row (format 3: see chunk_sum). */
typedef uint64_t (*ChunkFn)(const uint8_t *p);
static uint64_t chunk_sum_generic(const uint8_t *p);
#ifdef HS_X86
static uint64_t chunk_sum_sse2(const uint8_t *p);
static uint64_t chunk_sum_avx2(const uint8_t *p);
#elif defined(HS_NEON)
static uint64_t chunk_sum_neon(const uint8_t *p);
#endif

static Dot2Fn dot2_fn;
static ChunkFn chunk_fn = chunk_sum_generic;
static Dot2FFn dot2f_fn = dot2f_generic;
static DotFFn dotf_fn = dotf_generic;
static DotI8Fn doti8_fn = doti8_generic;
static const char *simd_name = "unchosen";

static void choose_simd(void) {
  const char *force = getenv("HYBRIDSQL_SIMD");
  int generic = force && strcmp(force, "generic") == 0;
  Dot2Fn fn = dot2_generic;
  const char *name = "generic";
#ifdef HS_X86
  if (generic) {
    /* keep the generic path */
  } else if ((force && strcmp(force, "sse2") == 0) || !hs_has_avx2_fma()) {
    fn = dot2_sse2;
    name = "sse2";
    chunk_fn = chunk_sum_sse2;
  } else {
    fn = dot2_avx2;
    name = "avx2+fma";
    chunk_fn = chunk_sum_avx2;
    dot2f_fn = dot2f_avx2;
    dotf_fn = dotf_avx2;
    doti8_fn = doti8_avx2;
  }
#elif defined(HS_NEON)
  if (!generic) {
    fn = dot2_neon;
    name = "neon";
    chunk_fn = chunk_sum_neon;
    dot2f_fn = dot2f_neon;
    dotf_fn = dotf_neon;
    doti8_fn = doti8_neon;
  }
#else
  (void)generic;
#endif
  simd_name = name;
  dot2_fn = fn; /* a benign race: every thread stores the same values */
}

static Dot2Fn dot2(void) {
  if (!dot2_fn) choose_simd();
  return dot2_fn;
}

HS_EXPORT const char *hs_simd_path(void) {
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

HS_EXPORT double hs_cosine(const float *a, const float *b, int64_t d) {
  Dot2Fn fn = dot2();
  return cosine_with(squared_norm(a, d, fn), a, b, d, fn);
}

HS_EXPORT int64_t hs_first_nonfinite(const float *v, int64_t d) {
  for (int64_t i = 0; i < d; i++) {
    if (!isfinite(loadf(v + i))) return i;
  }
  return -1;
}

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

/* ------------------------------------------------------------------------
** Records: what vector_index's first pass reads (Requirement 10).  One row is
** an int64 id, the float mul and int32 l1 of quantize(), then its d int8
** codes, padded to a multiple of 8 bytes.  A block stores its rows' records
** one after another.
*/
#define HS_REC_HEAD 16

static int64_t rec_stride(int64_t d) { return HS_REC_HEAD + ((d + 7) & ~(int64_t)7); }

static void rec_build(uint8_t *rec, int64_t id, const float *v, int64_t d) {
  float mul;
  memset(rec, 0, (size_t)rec_stride(d));
  int32_t l1 = quantize(v, d, (int8_t *)(rec + HS_REC_HEAD), &mul);
  memcpy(rec, &id, 8);
  memcpy(rec + 8, &mul, 4);
  memcpy(rec + 12, &l1, 4);
}

static int64_t rec_id(const uint8_t *rec) {
  int64_t id;
  memcpy(&id, rec, 8);
  return id;
}

/*
** Format 3's checksum of `n` bytes (a multiple of 8) of a T_codes row that
** start at its byte `first` (a multiple of HS_SUM_CHUNK).  The row is summed
** in chunks of HS_SUM_CHUNK bytes (the last one shorter), each multiplied by
** an odd number of its position.  In a chunk each 32-bit word w_i adds
** w_i * (2i + 1) (a change of one word always changes this term), and the
** words of its two halves are multiplied pairwise, each xor'd with a key of
** its place (so that changes which cancel in the first term do not cancel in
** the second).  Whole chunks are summed by the SIMD path chosen at run time
** (chunk_fn); a write adds the sums of the chunks it changes and takes away
** what they were.  It finds damage; it is
** not a cryptographic hash.
*/
#define HS_SUM_CHUNK 256

/* A chunk's weights (2i + 1) and keys (j in each byte, xor'd with a constant), as tables: loads
** where a vectorised loop would compute them. */
static const uint32_t SUM_WEIGHTS[HS_SUM_CHUNK / 4] = {
    1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
    33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63,
    65, 67, 69, 71, 73, 75, 77, 79, 81, 83, 85, 87, 89, 91, 93, 95,
    97, 99, 101, 103, 105, 107, 109, 111, 113, 115, 117, 119, 121, 123, 125, 127,
};
static const uint32_t SUM_KEYS[2][HS_SUM_CHUNK / 8] = {
  {
    0x9e3779b9u, 0x9f3678b8u, 0x9c357bbbu, 0x9d347abau, 0x9a337dbdu, 0x9b327cbcu,
    0x98317fbfu, 0x99307ebeu, 0x963f71b1u, 0x973e70b0u, 0x943d73b3u, 0x953c72b2u,
    0x923b75b5u, 0x933a74b4u, 0x903977b7u, 0x913876b6u, 0x8e2769a9u, 0x8f2668a8u,
    0x8c256babu, 0x8d246aaau, 0x8a236dadu, 0x8b226cacu, 0x88216fafu, 0x89206eaeu,
    0x862f61a1u, 0x872e60a0u, 0x842d63a3u, 0x852c62a2u, 0x822b65a5u, 0x832a64a4u,
    0x802967a7u, 0x812866a6u,
  },
  {
    0x7f4a7c15u, 0x7e4b7d14u, 0x7d487e17u, 0x7c497f16u, 0x7b4e7811u, 0x7a4f7910u,
    0x794c7a13u, 0x784d7b12u, 0x7742741du, 0x7643751cu, 0x7540761fu, 0x7441771eu,
    0x73467019u, 0x72477118u, 0x7144721bu, 0x7045731au, 0x6f5a6c05u, 0x6e5b6d04u,
    0x6d586e07u, 0x6c596f06u, 0x6b5e6801u, 0x6a5f6900u, 0x695c6a03u, 0x685d6b02u,
    0x6752640du, 0x6653650cu, 0x6550660fu, 0x6451670eu, 0x63566009u, 0x62576108u,
    0x6154620bu, 0x6055630au,
  },
};

/* A chunk of fewer than HS_SUM_CHUNK bytes (a row's last). */
static uint64_t chunk_sum(const uint8_t *p, int64_t bytes) {
  uint32_t w[HS_SUM_CHUNK / 4];
  int64_t nw = bytes / 4, half = nw / 2;
  uint64_t lin = 0, nh = 0;
  memcpy(w, p, (size_t)bytes);
  for (int64_t i = 0; i < nw; i++) lin += (uint64_t)w[i] * SUM_WEIGHTS[i];
  for (int64_t i = 0; i < half; i++) {
    nh += (uint64_t)(w[i] ^ SUM_KEYS[0][i]) * (uint64_t)(w[i + half] ^ SUM_KEYS[1][i]);
  }
  return lin + nh;
}

/* A whole chunk, the same sum; the SIMD paths below must give it to the bit. */
static uint64_t chunk_sum_generic(const uint8_t *p) {
  uint32_t w[HS_SUM_CHUNK / 4];
  uint64_t lin = 0, nh = 0;
  memcpy(w, p, sizeof(w));
  for (int i = 0; i < HS_SUM_CHUNK / 4; i++) lin += (uint64_t)w[i] * SUM_WEIGHTS[i];
  for (int i = 0; i < HS_SUM_CHUNK / 8; i++) {
    nh += (uint64_t)(w[i] ^ SUM_KEYS[0][i]) * (uint64_t)(w[i + HS_SUM_CHUNK / 8] ^ SUM_KEYS[1][i]);
  }
  return lin + nh;
}

/*
** The same with 32x32 -> 64-bit multiplies of the even and odd words of each
** vector (pmuludq): compilers widen every word to 64 bits first, which halves
** the throughput of the baseline x86-64 build.
*/
#ifdef HS_X86
static uint64_t chunk_sum_sse2(const uint8_t *p) {
  __m128i lin = _mm_setzero_si128(), nh = _mm_setzero_si128();
  for (int i = 0; i < HS_SUM_CHUNK / 4; i += 4) {
    __m128i v = _mm_loadu_si128((const __m128i *)(p + 4 * i));
    __m128i w = _mm_loadu_si128((const __m128i *)(SUM_WEIGHTS + i));
    lin = _mm_add_epi64(lin, _mm_mul_epu32(v, w));
    lin = _mm_add_epi64(lin, _mm_mul_epu32(_mm_srli_epi64(v, 32), _mm_srli_epi64(w, 32)));
  }
  for (int i = 0; i < HS_SUM_CHUNK / 8; i += 4) {
    __m128i a = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(p + 4 * i)),
                              _mm_loadu_si128((const __m128i *)(SUM_KEYS[0] + i)));
    __m128i b = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(p + HS_SUM_CHUNK / 2 + 4 * i)),
                              _mm_loadu_si128((const __m128i *)(SUM_KEYS[1] + i)));
    nh = _mm_add_epi64(nh, _mm_mul_epu32(a, b));
    nh = _mm_add_epi64(nh, _mm_mul_epu32(_mm_srli_epi64(a, 32), _mm_srli_epi64(b, 32)));
  }
  uint64_t r[2];
  _mm_storeu_si128((__m128i *)r, _mm_add_epi64(lin, nh));
  return r[0] + r[1];
}

__attribute__((target("avx2")))
static uint64_t chunk_sum_avx2(const uint8_t *p) {
  __m256i lin = _mm256_setzero_si256(), nh = _mm256_setzero_si256();
  for (int i = 0; i < HS_SUM_CHUNK / 4; i += 8) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(p + 4 * i));
    __m256i w = _mm256_loadu_si256((const __m256i *)(SUM_WEIGHTS + i));
    lin = _mm256_add_epi64(lin, _mm256_mul_epu32(v, w));
    lin = _mm256_add_epi64(lin, _mm256_mul_epu32(_mm256_srli_epi64(v, 32), _mm256_srli_epi64(w, 32)));
  }
  for (int i = 0; i < HS_SUM_CHUNK / 8; i += 8) {
    __m256i a = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + 4 * i)),
                                 _mm256_loadu_si256((const __m256i *)(SUM_KEYS[0] + i)));
    __m256i b =
        _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + HS_SUM_CHUNK / 2 + 4 * i)),
                         _mm256_loadu_si256((const __m256i *)(SUM_KEYS[1] + i)));
    nh = _mm256_add_epi64(nh, _mm256_mul_epu32(a, b));
    nh = _mm256_add_epi64(nh, _mm256_mul_epu32(_mm256_srli_epi64(a, 32), _mm256_srli_epi64(b, 32)));
  }
  uint64_t r[4];
  _mm256_storeu_si256((__m256i *)r, _mm256_add_epi64(lin, nh));
  return (r[0] + r[1]) + (r[2] + r[3]);
}
#elif defined(HS_NEON)
static uint64_t chunk_sum_neon(const uint8_t *p) {
  uint64x2_t lin = vdupq_n_u64(0), nh = vdupq_n_u64(0);
  for (int i = 0; i < HS_SUM_CHUNK / 4; i += 4) {
    uint32x4_t v = vreinterpretq_u32_u8(vld1q_u8(p + 4 * i)), w = vld1q_u32(SUM_WEIGHTS + i);
    lin = vmlal_u32(lin, vget_low_u32(v), vget_low_u32(w));
    lin = vmlal_u32(lin, vget_high_u32(v), vget_high_u32(w));
  }
  for (int i = 0; i < HS_SUM_CHUNK / 8; i += 4) {
    uint32x4_t a = veorq_u32(vreinterpretq_u32_u8(vld1q_u8(p + 4 * i)), vld1q_u32(SUM_KEYS[0] + i));
    uint32x4_t b = veorq_u32(vreinterpretq_u32_u8(vld1q_u8(p + HS_SUM_CHUNK / 2 + 4 * i)),
                             vld1q_u32(SUM_KEYS[1] + i));
    nh = vmlal_u32(nh, vget_low_u32(a), vget_low_u32(b));
    nh = vmlal_u32(nh, vget_high_u32(a), vget_high_u32(b));
  }
  uint64x2_t s = vaddq_u64(lin, nh);
  return vgetq_lane_u64(s, 0) + vgetq_lane_u64(s, 1);
}
#endif

static uint64_t codes_sum(const uint8_t *p, int64_t n, int64_t first) {
  uint64_t sum = 0, c = (uint64_t)(first / HS_SUM_CHUNK);
  int64_t at = 0;
  dot2(); /* chooses chunk_fn with the other kernels */
  for (; at + HS_SUM_CHUNK <= n; at += HS_SUM_CHUNK, c++) sum += chunk_fn(p + at) * (2 * c + 1);
  if (at < n) sum += chunk_sum(p + at, n - at) * (2 * c + 1);
  return sum;
}

/* The checksum of a T_codes row of `n` zero bytes: a new block's. */
static uint64_t zeros_sum(int64_t n) {
  uint8_t zero[16 * HS_SUM_CHUNK] = {0};
  uint64_t sum = 0;
  for (int64_t at = 0; at < n; at += (int64_t)sizeof(zero)) {
    int64_t part = n - at < (int64_t)sizeof(zero) ? n - at : (int64_t)sizeof(zero);
    sum += codes_sum(zero, part, at);
  }
  return sum;
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

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static void map_free(I64Map *m) {
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

static int map_find(const I64Map *m, int64_t key, int64_t *val) {
  if (m->cap == 0) return 0;
  int64_t i = map_slot(m, key);
  if (!m->used[i]) return 0;
  if (val) *val = m->vals[i];
  return 1;
}

/* Adds or replaces key; 0 when out of memory. */
static int map_put(I64Map *m, int64_t key, int64_t val) {
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
typedef struct Cand {
  double upper;
  int64_t id, block, slot;
  uint64_t print; /* codes_sum of its record: what its float32 vector must give (vx_knn) */
} Cand;

typedef struct Knn {
  const float *q;
  int64_t d, k;
  double qq, qerr;
  float qmul;
  int8_t *q8;
  Hit *lower; /* heap of the k best lower bounds (ids unused) */
  int64_t nlower;
  Cand *cand;
  int64_t ncand, capcand;
} Knn;

static void knn_free(Knn *s) {
  free(s->q8);
  free(s->lower);
  free(s->cand);
  memset(s, 0, sizeof(*s));
}

/* Prepares the query's int8 codes and bound; 0 when out of memory. */
static int knn_init(Knn *s, const float *q, int64_t d, int64_t k) {
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
** Asks the CPU to start loading a record ahead of the scan: in a scan of every
** row the hardware prefetcher stops at 4 KiB page boundaries, and a filter's
** rows are scattered.  docs/benchmarks.md has what it buys.
*/
static void prefetch(const uint8_t *at, int64_t bytes) {
#if defined(__GNUC__) || defined(__clang__)
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(at + off);
#else
  (void)at, (void)bytes;
#endif
}

/*
** Bounds the rows of one block: `count` records at buf, or only the `nslots`
** slots listed in `slots` (ascending), or only those whose id is in `only`.
** Rows that could be in the top k become candidates.  0 when out of memory.
*/
static int knn_scan(Knn *s, const uint8_t *buf, int64_t count, int64_t block,
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
static int cmp_place(const void *a, const void *b) {
  const Cand *x = a, *y = b;
  if (x->block != y->block) return x->block < y->block ? -1 : 1;
  return (x->slot > y->slot) - (x->slot < y->slot);
}

/* Drops the candidates below the final bar and sorts the rest, best upper bound first. */
static void knn_candidates(Knn *s) {
  double bar = heap_bar(s->lower, s->nlower, s->k);
  int64_t m = 0;
  for (int64_t i = 0; i < s->ncand; i++) {
    if (s->cand[i].upper >= bar) s->cand[m++] = s->cand[i];
  }
  s->ncand = m;
  if (m > 1) qsort(s->cand, (size_t)m, sizeof(Cand), cmp_cand);
}

/* ------------------------------------------------------------------------
** Scores (Requirements 6 and 8).
*/
double hs_bm25_score(double rank, double saturation) {
  double r = rank < 0 ? -rank : 0.0, sum = saturation + r;
  if (isinf(sum)) return (r / 2) / (saturation / 2 + r / 2); /* both near the largest double */
  return r / sum;
}

double hs_decay(double age_days, double half_life_days) {
  /* Not age 0: a tiny half life makes the rate infinite, and infinity times 0 is NaN. */
  if (!(age_days > 0)) return 1.0;
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

/* ========================================================================
** The SQL layer: thin wrappers that check arguments and call the kernels.
*/
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT1
#include "embedsql.h"

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
** NOMEM) for the caller to report.  The message starts with `fn`, the name of
** what reads it ("cosine_topk()", or a vector_index table's name), and
** `what` names the value, e.g. "1st argument" or "4th argument of row 17".
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
      return sqlite3_mprintf("%s: %s is a BLOB of %lld bytes, not a multiple of 4", fn, what, n);
    }
    if (n == 0) return sqlite3_mprintf("%s: %s is an empty vector", fn, what);
    if (n / 4 > HS_MAX_DIMS) {
      return sqlite3_mprintf("%s: %s has %lld dimensions, more than %d", fn, what, n / 4,
                             HS_MAX_DIMS);
    }
    out->v = p; /* possibly unaligned: every kernel reads it with loadf() or loadu */
    out->d = n / 4;
    int64_t bad = hs_first_nonfinite(out->v, out->d);
    if (bad >= 0) {
      vec_free(out);
      return sqlite3_mprintf("%s: %s has a non-finite value at index %lld", fn, what, bad);
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
    if (rc == HS_EMPTY) return sqlite3_mprintf("%s: %s is an empty vector", fn, what);
    if (rc == HS_NONFINITE) {
      return sqlite3_mprintf("%s: %s has a non-finite value at index %lld", fn, what, bad);
    }
    if (rc == HS_TOO_LONG) {
      return sqlite3_mprintf("%s: %s has more than %d dimensions", fn, what, HS_MAX_DIMS);
    }
    return sqlite3_mprintf("%s: %s is not a JSON array of numbers", fn, what);
  }
  return sqlite3_mprintf("%s: %s must be a vector (float32 BLOB or JSON array text), got %s", fn,
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
  int ra = read_vector(ctx, argv[0], "cosine_similarity()", "1st argument", &a);
  if (ra < 0) return;
  int rb = read_vector(ctx, argv[1], "cosine_similarity()", "2nd argument", &b);
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
    int rq = read_vector(ctx, argv[0], "cosine_topk()", "1st argument", &t->query);
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
    if (read_vector(ctx, argv[3], "cosine_topk()", what, &v) < 0) return;
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
  if (x[0] < -1 || x[0] > 1) {
    fail(ctx, "hybrid_score(): 1st argument vector_score must be from -1 to 1, got %s",
         num(x[0]).s);
    return;
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
  double score = x[2] * x[0] + x[3] * keyword; /* Requirement 7 */
  if (!isfinite(score)) {
    fail(ctx, "hybrid_score(): 3rd argument vector_weight %s and 4th argument keyword_weight %s"
         " give a score beyond the range of a double", num(x[2]).s, num(x[3]).s);
    return;
  }
  sqlite3_result_double(ctx, score);
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
  if (read_vector(ctx, argv[0], "vector_blob()", "1st argument", &v) <= 0) return;
  sqlite3_result_blob64(ctx, v.v, sizeof(float) * (sqlite3_uint64)v.d, SQLITE_TRANSIENT);
  vec_free(&v);
}

static void vector_json_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  Vec v;
  char buf[32];
  (void)argc;
  if (read_vector(ctx, argv[0], "vector_json()", "1st argument", &v) <= 0) return;
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

/* The SIMD path the kernels run: avx2+fma, sse2, neon or generic. */
static void simd_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  sqlite3_result_text(ctx, hs_simd_path(), -1, SQLITE_STATIC);
}

/* ========================================================================
** vector_index (Requirement 10): a virtual table module that owns its
** vectors, stored in shadow tables of the same database:
**
**   T_info(key, value)                 the storage format's version, and
**                                      from format 2 the layout: page_size,
**                                      block_rows and group_rows (float[D])
**   T_blocks(id, dims, capacity, count, nonce, p0, p1, ...)
**                                      one row per block: which partition
**                                      (p0...), how many rows, and a nonce
**   T_codes(id, data)                  a block's records (rec_build), what
**                                      the first pass reads
**   T_vectors(id, data)                the float32 vectors, in groups of
**                                      the layout's group rows of a block,
**                                      id block * 256 + group: what exact
**                                      rescoring reads
**   T_rowids(rowid, block, slot, m0, m1, ...)
**                                      where each row is, and its metadata
**
** Rows of one partition fill blocks of the layout's rows (at most
** HS_BLOCK_ROWS); only the last block of a partition has free slots, and it
** grows by doubling from HS_BLOCK_MIN.  Format 1 has 256 rows a block and
** groups of about 16 KiB; format 2 sizes both, when the table is made, to the
** database's page size, so that the rows of T_codes and T_vectors fill their
** pages (layout_v2).  A delete moves the partition's last row into the hole, so
** blocks stay dense and an emptied block is deleted: its pages go back to
** SQLite's free list at once, and VACUUM returns them to the file system.
**
** Every write to a block gives it a new random 64-bit nonce.  A connection
** keeps the records of the blocks it has read (Cache), each with the nonce it
** was read at, and reads a block again only when its nonce has changed.  The
** nonce lives in the same row as the count and is written in the same
** transaction as the records, so whatever brings a block back (a rollback, a
** restored backup, another file attached under the same name) brings back
** the nonce that goes with it: the cache cannot serve rows that are not in
** the database.
**
** From format 3 the nonce is also the block's checksum: a sum over the words
** of its T_codes row, weighted by their position (codes_sum), plus a hash of
** its id, dims, capacity, count and partition values (block_head).  A write
** changes it by what it changes (the chunks it rewrites, the count), so it
** reads no more of the block than those chunks; a block read from the file is
** checked against it before any of its rows is scored, and the cache keeps
** only blocks that passed.  A format 1 or 2 table becomes format 3 in the
** first transaction that writes to it (vx_upgrade), which sums every block
** once.
*/
#define HS_BLOCK_ROWS 256
#define HS_BLOCK_MIN 16
#define HS_GROUP_BYTES 16384
#define HS_MAX_FILTERS 24        /* partition and metadata columns together */
#define HS_CACHE_BYTES ((size_t)4 << 30) /* per table and connection */
#define HS_SWEEP_EVERY 256       /* queries between sweeps of dropped blocks */
#define HS_FORMAT 3
#define HS_TAILS 64 /* partitions whose last block a table remembers */
#define HS_LAYOUTS 4 /* layouts (one per number of dimensions) a table remembers */

/*
** A block's data (T_codes.data) for `cap` rows of d dimensions: the records,
** then for each numeric (integer or real) metadata column its values, 8 bytes
** each (int64 or double), and a NULL flag per row (1 byte; the flags padded
** to 8 bytes), so that a filter on one reads a few bytes a row.
*/
static int64_t num_area(int64_t cap) { return cap * 8 + ((cap + 7) & ~(int64_t)7); }

static int64_t num_offset(int64_t cap, int64_t d, int num) {
  return cap * rec_stride(d) + num * num_area(cap);
}

/*
** The layout of a block: rows in a full block, and rows in one T_vectors group
** (a block's groups are ceil(rows / group) rows each, the last one too).
*/
typedef struct Layout {
  int64_t dims, rows, group;
} Layout;

/* Format 1: 256 rows a block, groups of a power of two rows, about 16 KiB. */
static Layout layout_v1(int64_t d) {
  Layout l = {d, HS_BLOCK_ROWS, 1};
  while (l.group < HS_BLOCK_ROWS && 2 * l.group * 4 * d <= HS_GROUP_BYTES) l.group *= 2;
  return l;
}

/*
** The bytes of file that a table B-tree row of p bytes of payload takes, with
** pages of u bytes, as SQLite's btree.c stores it: a cell keeps up to u - 35
** bytes on its leaf page, or else min_local (m) plus what is left over once
** overflow pages of u - 4 bytes are filled, and the cells of one size share
** their leaves.  A cell's own bytes: a 2-byte pointer, varints (at most 12 here)
** and the number of its first overflow page.
*/
static double row_cost(int64_t p, int64_t u) {
  int64_t x = u - 35, m = (u - 12) * 32 / 255 - 23, local = p, over = 0;
  if (p > x) {
    local = m + (p - m) % (u - 4);
    if (local > x) local = m;
    over = (p - local + u - 5) / (u - 4);
  }
  int64_t per = (u - 8) / (local + 14 + (over ? 4 : 0));
  return (double)over * (double)u + (double)u / (double)(per > 0 ? per : 1);
}

/*
** Format 2: the layout that wastes the least of pages of `page` bytes (the
** database's page size when the table was made, in T_info), for vectors of d
** dimensions and nnum numeric metadata columns.  A group is at most two pages
** (or HS_GROUP_BYTES), so that rescoring one row reads a page or two; of
** layouts within 0.2% of each other, the one with larger blocks and groups.
** A float[D] table keeps its layout in T_info; a float[] table computes it
** here for each D from page_size, so this function is part of format 2.
*/
static Layout layout_v2(int64_t page, int64_t d, int nnum) {
  Layout best = layout_v1(d);
  double best_cost = 1e300;
  int64_t most = 2 * page > HS_GROUP_BYTES ? 2 * page : HS_GROUP_BYTES;
  for (int64_t r = HS_BLOCK_ROWS; r >= HS_BLOCK_MIN; r--) {
    double codes = row_cost(num_offset(r, d, nnum), page);
    for (int64_t g = r < most / (4 * d) ? r : most / (4 * d); g >= 1; g--) {
      double cost = (codes + (double)((r + g - 1) / g) * row_cost(4 * d * g, page)) / (double)r;
      if (cost < best_cost * 0.998) best_cost = cost, best.rows = r, best.group = g;
    }
  }
  return best;
}

static int64_t group_id(const Layout *l, int64_t block, int64_t slot) {
  return block * 256 + slot / l->group;
}

static sqlite3_int64 fresh_nonce(void) {
  sqlite3_int64 x;
  sqlite3_randomness(sizeof(x), &x);
  return x;
}

enum { VX_VECTOR = 1, VX_ALIAS, VX_PARTITION, VX_METADATA };
enum { VX_TEXT = 1, VX_INTEGER, VX_REAL };
static const char *const VX_TYPES[] = {"", "text", "integer", "real"};

typedef struct VxCol {
  char *name;
  int role;   /* VX_VECTOR, VX_ALIAS, VX_PARTITION or VX_METADATA */
  int type;   /* VX_TEXT, VX_INTEGER or VX_REAL: partition and metadata columns */
  int shadow; /* its number among the partition columns (p0...) or metadata (m0...) */
  int num;    /* a numeric metadata column: its number among them (block_bytes), else -1 */
} VxCol;

/* A block's records as a connection last read them. */
typedef struct CBlock {
  int64_t id, nonce, count, dims, capacity;
  size_t bytes;
  uint8_t *buf;
  uint64_t used; /* the query that last used it */
} CBlock;

/* A block as a query's block list gives it. */
typedef struct BlockRef {
  int64_t id, dims, capacity, count, nonce;
} BlockRef;

/*
** The buffers of cached full blocks (the most, by far), as slots of 2 MiB-aligned
** regions advised for transparent huge pages: a cache filled in 4 KiB pages pays
** a page fault per 4 KiB, most of a fill's time.  Other sizes come from malloc.
** Regions are given back when the cache goes.
*/
typedef struct Pool {
  size_t slot, region; /* the bytes of a full block's records, and of a region; 0 at first */
  uint8_t **regions, **free;
  int64_t nregions, nfree, capfree;
} Pool;

#define HS_REGION ((size_t)2 << 20)

/* Memory aligned to align (a power of two), freed by region_free() alone. */
static void *region_alloc(size_t align, size_t size) {
#if defined(_WIN32)
  return _aligned_malloc(size, align);
#else
  void *p = 0;
  return posix_memalign(&p, align, size) == 0 ? p : 0;
#endif
}

static void region_free(void *p) {
#if defined(_WIN32)
  _aligned_free(p);
#else
  free(p);
#endif
}

static uint8_t *pool_get(Pool *p, size_t bytes, int full) {
  if (!full || (p->slot && bytes != p->slot)) return malloc(bytes);
  p->slot = bytes;
  if (p->nfree == 0) {
    size_t per = HS_REGION >= 8 * bytes ? HS_REGION / bytes : 8, size = per * bytes;
    size = (size + HS_REGION - 1) / HS_REGION * HS_REGION;
    p->region = size;
    void *region = 0;
    uint8_t **regions = realloc(p->regions, sizeof(*regions) * (size_t)(p->nregions + 1));
    if (!regions) return 0;
    p->regions = regions;
    if ((int64_t)per > p->capfree) {
      uint8_t **grown = realloc(p->free, sizeof(*grown) * per);
      if (!grown) return 0;
      p->free = grown, p->capfree = (int64_t)per;
    }
    if (!(region = region_alloc(HS_REGION, size))) return 0;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(region, size, MADV_HUGEPAGE); /* advice only: a refusal changes nothing */
#endif
    p->regions[p->nregions++] = region;
    for (size_t i = 0; i < per; i++) p->free[p->nfree++] = (uint8_t *)region + i * bytes;
  }
  return p->free[--p->nfree];
}

static int pool_owns(const Pool *p, const uint8_t *buf) {
  for (int64_t i = 0; i < p->nregions; i++) {
    if (buf >= p->regions[i] && buf < p->regions[i] + p->region) return 1;
  }
  return 0;
}

static void pool_put(Pool *p, uint8_t *buf) {
  if (!buf) return;
  if (!pool_owns(p, buf)) {
    free(buf);
    return;
  }
  if (p->nfree == p->capfree) {
    int64_t cap = p->capfree ? 2 * p->capfree : 64;
    uint8_t **grown = realloc(p->free, sizeof(*grown) * (size_t)cap);
    if (!grown) return; /* the slot stays unused until the cache goes */
    p->free = grown, p->capfree = cap;
  }
  p->free[p->nfree++] = buf;
}

static void pool_clear(Pool *p) {
  for (int64_t i = 0; i < p->nregions; i++) region_free(p->regions[i]);
  free(p->regions);
  free(p->free);
  memset(p, 0, sizeof(*p));
}

typedef struct Cache {
  CBlock *b;
  int64_t n, cap;
  I64Map at;         /* block id -> index in b */
  I64Map seen;       /* block id -> the nonce it had when last read and not kept */
  Pool pool;         /* where the records of cached full blocks are */
  uint8_t *scratch;  /* where a block not kept is read */
  size_t scratch_cap, bytes;
  uint64_t clock, sweep;
} Cache;

/* The prepared statements on the shadow tables, made when first needed. */
enum {
  VS_TAIL,
  VS_BLOCK,
  VS_NEW_BLOCK,
  VS_NEW_CODES,
  VS_GROW,
  VS_SET_COUNT,
  VS_TOUCH,
  VS_DROP_BLOCK,
  VS_DROP_CODES,
  VS_DROP_GROUPS,
  VS_NEW_GROUP,
  VS_DROP_GROUP,
  VS_FIND,
  VS_ADD_ROW,
  VS_MOVE_ROW,
  VS_DROP_ROW,
  VS_SET_META,
  VS_MAX_ROWID,
  VS_COUNT
};

/*
** Rows that a write transaction appends one after another to a partition's
** last block, kept here and written together (their records and numeric
** metadata in one write of the block's T_codes row, their vectors a group at a
** time, the block's count and checksum once) rather than each by itself:
** vx_flush.  Their T_rowids rows go in at once, so every check of a later row
** sees them.  They are written before
** anything else reads or changes the table through this connection (xFilter, a
** delete or update, integrity_check, a rename), when a savepoint begins or ends
** (a statement's too: xSavepoint, xRelease) and at the commit (xSync); a rollback
** forgets them.  Only this connection's reads of the shadow tables themselves,
** within the transaction and outside any savepoint, could miss them: the numpy
** reader (vectors.py) reads in a savepoint of its own.
*/
typedef struct Appended {
  int64_t block, dims, capacity, count; /* the block as T_blocks has it; block 0: none */
  sqlite3_value *parts[HS_MAX_FILTERS]; /* its partition's values */
  int64_t n, cap;                       /* rows held, and room for them */
  uint8_t *recs;  /* their records, rec_stride(dims) bytes each */
  float *vecs;    /* their vectors, dims floats each */
  uint8_t *nums;  /* their numeric metadata, 9 * nnum bytes each: values, then NULL flags */
  uint8_t *scratch; /* a group of vectors, or a numeric column, as it is written */
  int64_t scratch_cap;
} Appended;

typedef struct VxTab {
  sqlite3_vtab base;
  sqlite3 *db;
  char *schema, *name;
  int ncol, vec, alias, npart, nmeta, nnum;
  VxCol *col;
  int64_t dims; /* D of float[D]; 0 for float[], one D per partition */
  int busy;     /* inside a method that reads or writes the shadow tables */
  int64_t rows; /* for xBestIndex's costs */
  int64_t page; /* format 2: the page size its layout is made for; 0: format 1 */
  int64_t format; /* T_info's format: 3 keeps checksums as nonces; -1: to be read again */
  int upgrade;    /* a transaction began: its first write makes an older format 3 */
  I64Map pending; /* format 3, within one xUpdate: block -> what its writes added to its sum */
  Layout layouts[HS_LAYOUTS];
  int nlayouts;
  int64_t tails[HS_TAILS]; /* by a hash of partition values: a block that was its last */
  Cache cache;
  sqlite3_stmt *st[VS_COUNT];
  char *broken; /* xConnect found the shadow tables damaged: what every use of it says */
  Appended app; /* rows appended and not yet written */
} VxTab;

#define VX_SCORE(t) ((t)->ncol)
#define VX_K(t) ((t)->ncol + 1)

/* The bytes of a block's data for `cap` rows of d dimensions (num_offset). */
static int64_t block_bytes(const VxTab *t, int64_t cap, int64_t d) {
  return num_offset(cap, d, t->nnum);
}

/* The layout of blocks of vectors of d dimensions. */
static const Layout *vx_layout(VxTab *t, int64_t d) {
  for (int i = 0; i < t->nlayouts; i++) {
    if (t->layouts[i].dims == d) return &t->layouts[i];
  }
  int i = t->nlayouts < HS_LAYOUTS ? t->nlayouts++ : (int)(d % HS_LAYOUTS);
  t->layouts[i] = t->page ? layout_v2(t->page, d, t->nnum) : layout_v1(d);
  return &t->layouts[i];
}

/* ---- errors ---- */

static int vx_fail(VxTab *t, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  sqlite3_free(t->base.zErrMsg);
  t->base.zErrMsg = msg;
  return msg ? rc : SQLITE_NOMEM;
}

/* An error of SQLite's own from a shadow statement: keeps its code, so that an
** I/O error or a full disk rolls the transaction back (not only the statement). */
static int vx_sql_fail(VxTab *t, int rc) {
  if (rc == SQLITE_NOMEM) return rc;
  const char *msg = sqlite3_errmsg(t->db);
  size_t n = strlen(t->name);
  if (strncmp(msg, t->name, n) == 0 && msg[n] == ':') return vx_fail(t, rc, "%s", msg); /* ours */
  return vx_fail(t, rc, "%s: %s", t->name, msg);
}

/* Takes a message from parse_vector() (or NOMEM). */
static int vx_take(VxTab *t, char *msg) {
  sqlite3_free(t->base.zErrMsg);
  t->base.zErrMsg = 0;
  if (!msg || msg == NOMEM) return SQLITE_NOMEM;
  t->base.zErrMsg = msg;
  return SQLITE_ERROR;
}

/*
** Damage in a shadow table is SQLITE_CORRUPT naming the table and the block:
** never an allocation of a size read from the file (whose failure, "out of
** memory", would roll back the caller's transaction), never a wrong answer.
** block_problem() says what is wrong with a block row's dims, capacity and
** count: they must be integers, 1 to HS_MAX_DIMS dimensions (the table's D
** for float[D]), room for 1 to a full block's rows, and min_count to capacity
** rows.  NULL when they are right, else a message from sqlite3_mprintf (or
** NOMEM).
*/
static char *block_problem(VxTab *t, int64_t id, sqlite3_value *dims, sqlite3_value *cap,
                           sqlite3_value *count, int64_t min_count) {
  static const char *const names[] = {"dims", "capacity", "count"};
  sqlite3_value *v[] = {dims, cap, count};
  char *msg = 0;
  for (int i = 0; i < 3; i++) {
    if (sqlite3_value_type(v[i]) != SQLITE_INTEGER) {
      msg = sqlite3_mprintf("%s: block %lld is damaged: its %s is of type %s, not integer",
                            t->name, id, names[i], type_name(v[i]));
      return msg ? msg : NOMEM;
    }
  }
  int64_t d = sqlite3_value_int64(dims);
  if (d < 1 || d > HS_MAX_DIMS) {
    msg = sqlite3_mprintf("%s: block %lld is damaged: it has %lld dimensions, not 1 to %d",
                          t->name, id, d, HS_MAX_DIMS);
  } else if (t->dims && d != t->dims) {
    msg = sqlite3_mprintf("%s: block %lld is damaged: it has %lld dimensions, the table has %lld",
                          t->name, id, d, t->dims);
  } else {
    int64_t c = sqlite3_value_int64(cap), n = sqlite3_value_int64(count);
    int64_t full = vx_layout(t, d)->rows;
    if (c < 1 || c > full) {
      msg = sqlite3_mprintf("%s: block %lld is damaged: it has room for %lld rows, not 1 to %lld",
                            t->name, id, c, full);
    } else if (n < min_count || n > c) {
      msg = sqlite3_mprintf("%s: block %lld is damaged: it holds %lld rows in room for %lld",
                            t->name, id, n, c);
    } else {
      return 0;
    }
  }
  return msg ? msg : NOMEM;
}

/* block_problem() for columns dims, cap and count of a statement's row. */
static int vx_check_block(VxTab *t, int64_t id, sqlite3_stmt *st, int dims, int cap, int count) {
  char *msg = block_problem(t, id, sqlite3_column_value(st, dims), sqlite3_column_value(st, cap),
                            sqlite3_column_value(st, count), 0);
  if (!msg) return SQLITE_OK;
  if (msg == NOMEM) return SQLITE_NOMEM;
  sqlite3_free(t->base.zErrMsg);
  t->base.zErrMsg = msg;
  return SQLITE_CORRUPT_VTAB;
}

/* ---- the column declaration: vector_index(embedding float[384], project text partition key, ...) */

static int ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         (unsigned char)c >= 0x80;
}

/* Reads a column name at *s (bare or quoted with "", `` or []); NULL for none or out of memory. */
static char *read_name(const char **s) {
  const char *p = *s;
  while (is_ws(*p)) p++;
  char open = *p, close = open == '[' ? ']' : open;
  if (open == '"' || open == '`' || open == '[') {
    sqlite3_str *out = sqlite3_str_new(0);
    for (p++; *p; p++) {
      if (*p == close) {
        if (close != ']' && p[1] == close) {
          sqlite3_str_appendchar(out, 1, close);
          p++;
          continue;
        }
        break;
      }
      sqlite3_str_appendchar(out, 1, *p);
    }
    if (*p != close || sqlite3_str_length(out) == 0) {
      sqlite3_free(sqlite3_str_finish(out));
      return 0;
    }
    *s = p + 1;
    return sqlite3_str_finish(out);
  }
  const char *start = p;
  while (ident_char(*p)) p++;
  if (p == start) return 0;
  *s = p;
  return sqlite3_mprintf("%.*s", (int)(p - start), start);
}

/* sqlite3_str_finish(), but "" (not NULL) for an empty string; NULL when out of memory. */
static char *str_finish(sqlite3_str *s) {
  int err = sqlite3_str_errcode(s);
  char *out = sqlite3_str_finish(s);
  if (err != SQLITE_OK) {
    sqlite3_free(out);
    return 0;
  }
  return out ? out : sqlite3_mprintf("");
}

/* The words after the name, lower case, one space between them. */
static char *read_words(const char *s) {
  sqlite3_str *out = sqlite3_str_new(0);
  int space = 0;
  for (; *s; s++) {
    if (is_ws(*s)) {
      space = sqlite3_str_length(out) > 0;
      continue;
    }
    if (space) sqlite3_str_appendchar(out, 1, ' ');
    space = 0;
    char c = *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s;
    sqlite3_str_appendchar(out, 1, c);
  }
  return str_finish(out);
}

/* float[N] or float[] (*dims 0); 0 when the words are not a vector type. */
static int vector_type(const char *w, int64_t *dims) {
  if (strncmp(w, "float[", 6) != 0) return 0;
  const char *p = w + 6;
  int64_t n = 0;
  while (*p >= '0' && *p <= '9' && n <= HS_MAX_DIMS) n = n * 10 + (*p++ - '0');
  if (strcmp(p, "]") != 0) return 0;
  *dims = p == w + 6 ? 0 : (n >= 1 && n <= HS_MAX_DIMS ? n : -1);
  return 1;
}

static void vx_free_cols(VxTab *t) {
  for (int i = 0; i < t->ncol; i++) sqlite3_free(t->col[i].name);
  sqlite3_free(t->col);
  t->col = 0;
  t->ncol = 0;
}

static int vx_parse(VxTab *t, int argc, const char *const *argv, char **err) {
  int n = argc - 3;
  t->vec = t->alias = -1;
  t->col = sqlite3_malloc64(sizeof(VxCol) * (sqlite3_uint64)(n > 0 ? n : 1));
  if (!t->col) return SQLITE_NOMEM;
  memset(t->col, 0, sizeof(VxCol) * (size_t)(n > 0 ? n : 1));
  for (int i = 0; i < n; i++) {
    const char *arg = argv[i + 3], *rest = arg;
    VxCol *c = &t->col[i];
    t->ncol = i + 1;
    c->name = read_name(&rest);
    char *words = c->name ? read_words(rest) : 0;
    int64_t dims = 0;
    if (!c->name || !words) {
      sqlite3_free(words);
      *err = sqlite3_mprintf("vector_index: column %d (%s) has no name", i + 1, arg);
      return SQLITE_ERROR;
    }
    if (vector_type(words, &dims)) {
      c->role = VX_VECTOR;
      if (t->vec >= 0 || dims < 0) {
        *err = dims < 0 ? sqlite3_mprintf("vector_index: column %s: the dimensions of float[N]"
                                          " must be 1 to %d", c->name, HS_MAX_DIMS)
                        : sqlite3_mprintf("vector_index: more than one vector column (%s and %s)",
                                          t->col[t->vec].name, c->name);
        sqlite3_free(words);
        return SQLITE_ERROR;
      }
      t->vec = i;
      t->dims = dims;
    } else if (strcmp(words, "integer primary key") == 0) {
      c->role = VX_ALIAS;
      if (t->alias >= 0) {
        *err = sqlite3_mprintf("vector_index: more than one integer primary key (%s and %s)",
                               t->col[t->alias].name, c->name);
        sqlite3_free(words);
        return SQLITE_ERROR;
      }
      t->alias = i;
    } else {
      int partition = 0;
      size_t len = strlen(words);
      if (len > 14 && strcmp(words + len - 14, " partition key") == 0) {
        partition = 1;
        words[len - 14] = 0;
      }
      for (int ty = VX_TEXT; ty <= VX_REAL; ty++) {
        if (strcmp(words, VX_TYPES[ty]) == 0) c->type = ty;
      }
      if (!c->type) {
        while (is_ws(*rest)) rest++;
        *err = sqlite3_mprintf("vector_index: column %s: the type must be float[N], float[],"
                               " integer primary key, or text, integer or real with an optional"
                               " 'partition key'; got '%s'", c->name, rest);
        sqlite3_free(words);
        return SQLITE_ERROR;
      }
      c->role = partition ? VX_PARTITION : VX_METADATA;
      c->shadow = partition ? t->npart++ : t->nmeta++;
      c->num = !partition && c->type != VX_TEXT ? t->nnum++ : -1;
    }
    sqlite3_free(words);
    static const char *const reserved[] = {"score", "k", "rowid", "oid", "_rowid_"};
    for (size_t r = 0; r < sizeof(reserved) / sizeof(reserved[0]); r++) {
      if (sqlite3_stricmp(c->name, reserved[r]) == 0) {
        *err = sqlite3_mprintf("vector_index: the column name %s is reserved", c->name);
        return SQLITE_ERROR;
      }
    }
    for (int j = 0; j < i; j++) {
      if (sqlite3_stricmp(c->name, t->col[j].name) == 0) {
        *err = sqlite3_mprintf("vector_index: two columns are named %s", c->name);
        return SQLITE_ERROR;
      }
    }
  }
  if (t->vec < 0) {
    *err = sqlite3_mprintf("vector_index: a vector column is needed, e.g. embedding float[384]");
    return SQLITE_ERROR;
  }
  if (t->npart + t->nmeta > HS_MAX_FILTERS) {
    *err = sqlite3_mprintf("vector_index: at most %d partition and metadata columns",
                           HS_MAX_FILTERS);
    return SQLITE_ERROR;
  }
  return SQLITE_OK;
}

static int vx_declare(VxTab *t) {
  sqlite3_str *s = sqlite3_str_new(0);
  sqlite3_str_appendall(s, "create table x(");
  for (int i = 0; i < t->ncol; i++) {
    const VxCol *c = &t->col[i];
    const char *type = c->role == VX_VECTOR ? "blob"
                       : c->role == VX_ALIAS ? "integer"
                                             : VX_TYPES[c->type];
    sqlite3_str_appendf(s, "\"%w\" %s, ", c->name, type);
  }
  sqlite3_str_appendall(s, "score hidden real, k hidden integer)");
  char *sql = sqlite3_str_finish(s);
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_declare_vtab(t->db, sql);
  sqlite3_free(sql);
  return rc;
}

/* ---- the shadow statements ---- */

/* "p0, p1" or "b.p0, b.p1" (prefix) for the partition columns; likewise m for metadata. */
static void append_cols(sqlite3_str *s, const char *prefix, char letter, int n, int lead_comma) {
  for (int i = 0; i < n; i++) {
    sqlite3_str_appendf(s, "%s%s%c%d", (i || lead_comma) ? ", " : "", prefix, letter, i);
  }
}

static char *vs_sql(VxTab *t, int which) {
  sqlite3_str *s = sqlite3_str_new(0);
  const char *db = t->schema, *n = t->name;
  switch (which) {
    case VS_TAIL: /* ?1.. the partition values */
      sqlite3_str_appendf(s, "select id, dims, capacity, count from \"%w\".\"%w_blocks\" where 1",
                          db, n);
      for (int i = 0; i < t->npart; i++) sqlite3_str_appendf(s, " and p%d is ?%d", i, i + 1);
      sqlite3_str_appendall(s, " order by id desc limit 1");
      break;
    case VS_BLOCK: /* the partition values from column 3, then the nonce */
      sqlite3_str_appendall(s, "select dims, capacity, count");
      append_cols(s, "", 'p', t->npart, 1);
      sqlite3_str_appendf(s, ", nonce from \"%w\".\"%w_blocks\" where id = ?1", db, n);
      break;
    case VS_NEW_BLOCK: /* ?1 dims, ?2 capacity, ?3 nonce, ?4.. the partition values */
      sqlite3_str_appendf(s, "insert into \"%w\".\"%w_blocks\"(dims, capacity, count, nonce", db,
                          n);
      append_cols(s, "", 'p', t->npart, 1);
      sqlite3_str_appendall(s, ") values (?1, ?2, 0, ?3");
      for (int i = 0; i < t->npart; i++) sqlite3_str_appendf(s, ", ?%d", i + 4);
      sqlite3_str_appendall(s, ")");
      break;
    case VS_NEW_CODES:
      sqlite3_str_appendf(s, "insert into \"%w\".\"%w_codes\"(id, data) values (?1, zeroblob(?2))",
                          db, n);
      break;
    case VS_GROW: /* ?1 id, ?2 bytes: an empty blob of the new size */
      sqlite3_str_appendf(s, "update \"%w\".\"%w_codes\" set data = zeroblob(?2) where id = ?1",
                          db, n);
      break;
    case VS_SET_COUNT: /* ?1 id, ?2 count, ?3 capacity, ?4 nonce */
      sqlite3_str_appendf(s, "update \"%w\".\"%w_blocks\" set count = ?2, capacity = ?3,"
                             " nonce = ?4 where id = ?1", db, n);
      break;
    case VS_TOUCH:
      sqlite3_str_appendf(s, "update \"%w\".\"%w_blocks\" set nonce = ?2 where id = ?1", db, n);
      break;
    case VS_DROP_BLOCK:
      sqlite3_str_appendf(s, "delete from \"%w\".\"%w_blocks\" where id = ?1", db, n);
      break;
    case VS_DROP_CODES:
      sqlite3_str_appendf(s, "delete from \"%w\".\"%w_codes\" where id = ?1", db, n);
      break;
    case VS_DROP_GROUPS:
      sqlite3_str_appendf(s, "delete from \"%w\".\"%w_vectors\" where id between ?1 * 256"
                             " and ?1 * 256 + 255", db, n);
      break;
    case VS_NEW_GROUP: /* ?1 id, ?2 its data: zeros, or the group's vectors */
      sqlite3_str_appendf(s, "insert or replace into \"%w\".\"%w_vectors\"(id, data)"
                             " values (?1, ?2)", db, n);
      break;
    case VS_DROP_GROUP:
      sqlite3_str_appendf(s, "delete from \"%w\".\"%w_vectors\" where id = ?1", db, n);
      break;
    case VS_FIND:
      sqlite3_str_appendf(s, "select block, slot from \"%w\".\"%w_rowids\" where rowid = ?1", db,
                          n);
      break;
    case VS_ADD_ROW: /* ?1 rowid, ?2 block, ?3 slot, ?4.. the metadata values */
      sqlite3_str_appendf(s, "insert into \"%w\".\"%w_rowids\"(rowid, block, slot", db, n);
      append_cols(s, "", 'm', t->nmeta, 1);
      sqlite3_str_appendall(s, ") values (?1, ?2, ?3");
      for (int i = 0; i < t->nmeta; i++) sqlite3_str_appendf(s, ", ?%d", i + 4);
      sqlite3_str_appendall(s, ")");
      break;
    case VS_MOVE_ROW:
      sqlite3_str_appendf(s, "update \"%w\".\"%w_rowids\" set block = ?2, slot = ?3"
                             " where rowid = ?1", db, n);
      break;
    case VS_DROP_ROW:
      sqlite3_str_appendf(s, "delete from \"%w\".\"%w_rowids\" where rowid = ?1", db, n);
      break;
    case VS_SET_META: /* ?1 rowid, ?2.. the metadata values */
      sqlite3_str_appendf(s, "update \"%w\".\"%w_rowids\" set rowid = rowid", db, n);
      for (int i = 0; i < t->nmeta; i++) sqlite3_str_appendf(s, ", m%d = ?%d", i, i + 2);
      sqlite3_str_appendall(s, " where rowid = ?1");
      break;
    case VS_MAX_ROWID:
      sqlite3_str_appendf(s, "select max(rowid) from \"%w\".\"%w_rowids\"", db, n);
      break;
  }
  return sqlite3_str_finish(s);
}

/* The statement `which`, reset and unbound, or NULL after setting the error. */
static sqlite3_stmt *vs(VxTab *t, int which, int *rc) {
  if (!t->st[which]) {
    char *sql = vs_sql(t, which);
    if (!sql) {
      *rc = SQLITE_NOMEM;
      return 0;
    }
    *rc = sqlite3_prepare_v3(t->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &t->st[which], 0);
    sqlite3_free(sql);
    if (*rc != SQLITE_OK) {
      *rc = vx_sql_fail(t, *rc);
      return 0;
    }
  }
  return t->st[which];
}

/* Steps a statement that returns no row and resets it; SQLITE_OK or the error. */
static int vs_run(VxTab *t, sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : vx_sql_fail(t, rc);
}

/* Runs SQL that returns no rows, built with sqlite3_mprintf; for xCreate, xDestroy, xRename. */
static int vx_exec(sqlite3 *db, char **err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *sql = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_exec(db, sql, 0, 0, 0);
  if (rc != SQLITE_OK && err) {
    sqlite3_free(*err);
    *err = sqlite3_mprintf("vector_index: %s", sqlite3_errmsg(db));
  }
  sqlite3_free(sql);
  return rc;
}

/* ---- the cache of records ---- */

static void cache_clear(Cache *c) {
  for (int64_t i = 0; i < c->n; i++) pool_put(&c->pool, c->b[i].buf);
  free(c->b);
  free(c->scratch);
  map_free(&c->at);
  map_free(&c->seen);
  pool_clear(&c->pool);
  memset(c, 0, sizeof(*c));
}

static CBlock *cache_find(Cache *c, int64_t id) {
  int64_t i;
  return map_find(&c->at, id, &i) ? &c->b[i] : 0;
}

/* Rebuilds the index after entries were removed. */
static int cache_reindex(Cache *c) {
  map_free(&c->at);
  for (int64_t i = 0; i < c->n; i++) {
    if (!map_put(&c->at, c->b[i].id, i)) return 0;
  }
  return 1;
}

/* Drops the entries `drop` says to, by position. */
static int cache_drop(Cache *c, int (*drop)(const CBlock *, void *), void *arg) {
  int64_t m = 0;
  for (int64_t i = 0; i < c->n; i++) {
    if (drop(&c->b[i], arg)) {
      c->bytes -= c->b[i].bytes;
      pool_put(&c->pool, c->b[i].buf);
    } else {
      c->b[m++] = c->b[i];
    }
  }
  int changed = m != c->n;
  c->n = m;
  return !changed || cache_reindex(c);
}

static int older_than(const CBlock *b, void *arg) { return b->used < *(uint64_t *)arg; }

/*
** Keeps buf (malloc'd: the `count` records of block `id` at `nonce`) in the
** cache, making room by dropping the blocks unused the longest; frees buf when
** there is no room because this query uses every cached block.  A caller
** never holds a CBlock across this call.
*/
static void cache_keep(Cache *c, const BlockRef *r, size_t bytes, uint8_t *buf) {
  int64_t id = r->id;
  CBlock *e = cache_find(c, id);
  if (!e) {
    while (c->bytes + bytes > HS_CACHE_BYTES) {
      uint64_t cut = c->clock;
      for (int64_t i = 0; i < c->n; i++) {
        if (c->b[i].used < cut) cut = c->b[i].used;
      }
      cut++;
      if (cut > c->clock || !cache_drop(c, older_than, &cut)) {
        pool_put(&c->pool, buf);
        return;
      }
    }
    if (c->n == c->cap) {
      int64_t cap = c->cap ? 2 * c->cap : 64;
      CBlock *grown = realloc(c->b, sizeof(CBlock) * (size_t)cap);
      if (!grown) {
        pool_put(&c->pool, buf);
        return;
      }
      c->b = grown, c->cap = cap;
    }
    if (!map_put(&c->at, id, c->n)) {
      pool_put(&c->pool, buf);
      return;
    }
    e = &c->b[c->n++];
  } else {
    c->bytes -= e->bytes;
    pool_put(&c->pool, e->buf);
  }
  e->id = id, e->nonce = r->nonce, e->count = r->count, e->dims = r->dims;
  e->capacity = r->capacity, e->bytes = bytes, e->buf = buf;
  e->used = c->clock;
  c->bytes += bytes;
}

static int not_in(const CBlock *b, void *arg) { return !map_find(arg, b->id, 0); }

/* Forgets cached blocks that no longer exist (deleted ones), every HS_SWEEP_EVERY queries. */
static int cache_sweep(VxTab *t) {
  Cache *c = &t->cache;
  if (c->n == 0 || ++c->sweep < HS_SWEEP_EVERY) return SQLITE_OK;
  c->sweep = 0;
  char *sql = sqlite3_mprintf("select id from \"%w\".\"%w_blocks\"", t->schema, t->name);
  sqlite3_stmt *st = 0;
  int rc = sql ? sqlite3_prepare_v2(t->db, sql, -1, &st, 0) : SQLITE_NOMEM;
  sqlite3_free(sql);
  I64Map live = {0};
  while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (!map_put(&live, sqlite3_column_int64(st, 0), 0)) rc = SQLITE_NOMEM;
    else rc = SQLITE_OK;
  }
  if (rc == SQLITE_DONE) {
    rc = cache_drop(c, not_in, &live) ? SQLITE_OK : SQLITE_NOMEM;
    map_free(&c->seen); /* forgets deleted blocks; the others are kept at their next read */
  }
  else if (rc != SQLITE_NOMEM) rc = vx_sql_fail(t, rc);
  sqlite3_finalize(st);
  map_free(&live);
  return rc;
}

/* ---- reading rows ---- */

/* The block a row of T_codes (its id) or T_vectors (a group: block * 256 + n) belongs to. */
static int64_t block_of(const char *suffix, int64_t id) {
  return strcmp(suffix, "codes") == 0 ? id : id / 256;
}

/*
** Opens (or moves) a read or write handle on a shadow table's data column.  A
** row that is missing or not a BLOB, or a shadow table that is gone or is a
** view, is SQLITE_ERROR from SQLite, and damage here; every other error
** (interrupted, busy, locked, I/O, out of memory) is reported as itself.
*/
static int vx_blob(VxTab *t, sqlite3_blob **h, const char *suffix, int64_t id, int write) {
  int rc;
  if (*h) {
    rc = sqlite3_blob_reopen(*h, id);
  } else {
    char *table = sqlite3_mprintf("%s_%s", t->name, suffix);
    if (!table) return SQLITE_NOMEM;
    rc = sqlite3_blob_open(t->db, t->schema, table, "data", id, write, h);
    sqlite3_free(table);
  }
  if (rc == SQLITE_OK) return rc;
  if (rc != SQLITE_ERROR) return vx_sql_fail(t, rc);
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: its %s row %lld is missing"
                 " or unreadable: %s", t->name, block_of(suffix, id), suffix, id,
                 sqlite3_errmsg(t->db));
}

static void vx_blob_close(sqlite3_blob **h) {
  if (*h) sqlite3_blob_close(*h);
  *h = 0;
}

/* Reads `bytes` at `offset` of an open handle, checking that they are there. */
static int vx_blob_read(VxTab *t, sqlite3_blob *h, void *out, int64_t bytes, int64_t offset,
                        const char *what, int64_t id) {
  if (offset < 0 || offset + bytes > sqlite3_blob_bytes(h)) {
    return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: its %s row %lld has %d"
                   " bytes, too few for %lld at %lld", t->name, block_of(what, id), what, id,
                   sqlite3_blob_bytes(h), bytes, offset);
  }
  int rc = sqlite3_blob_read(h, out, (int)bytes, (int)offset);
  return rc == SQLITE_OK ? rc : vx_sql_fail(t, rc);
}

/* Opens (or moves) h on the vectors group gid, of vectors of d dimensions: exactly its size. */
static int vx_group(VxTab *t, sqlite3_blob **h, int64_t gid, int64_t d) {
  int rc = vx_blob(t, h, "vectors", gid, 0);
  int64_t want = 4 * d * vx_layout(t, d)->group;
  if (rc || sqlite3_blob_bytes(*h) == want) return rc;
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: its vectors row %lld has %d"
                 " bytes, not %lld", t->name, gid / 256, gid, sqlite3_blob_bytes(*h), want);
}

/* The float32 vector of (block, slot) into out (dims floats), through handle *h. */
static int vx_read_vector(VxTab *t, sqlite3_blob **h, int64_t block, int64_t slot, int64_t dims,
                          float *out) {
  const Layout *l = vx_layout(t, dims);
  int64_t gid = group_id(l, block, slot), off = (slot % l->group) * 4 * dims;
  int rc = vx_group(t, h, gid, dims);
  return rc ? rc : vx_blob_read(t, *h, out, 4 * dims, off, "vectors", gid);
}

/* ---- writing rows (xUpdate) ---- */

/* A block as T_blocks has it. */
typedef struct BlockRow {
  int64_t id, dims, capacity, count;
} BlockRow;

static int same_value(sqlite3_value *a, sqlite3_value *b);

static uint64_t hash_values(sqlite3_value *const *v, int n) {
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < n; i++) {
    int type = sqlite3_value_type(v[i]);
    uint64_t x = (uint64_t)type;
    if (type == SQLITE_INTEGER || type == SQLITE_FLOAT) {
      double d = sqlite3_value_double(v[i]); /* 3 and 3.0 are the same partition */
      memcpy(&x, &d, sizeof(x));
    } else if (type != SQLITE_NULL) {
      const unsigned char *p = sqlite3_value_blob(v[i]);
      for (int j = 0, len = sqlite3_value_bytes(v[i]); j < len; j++) x = x * 31 + p[j];
    }
    h = mix64(h ^ x);
  }
  return h;
}

/*
** The last block of the partition whose values are parts[] (found = 0 when it
** has none).  The partition's last block is remembered: a block that is still
** of that partition and not full is its last, since only a partition's last
** block has free slots.  So most inserts read one block row by its id, and
** only a full block sends them to the partition's index.
*/
static int vx_tail(VxTab *t, sqlite3_value *const *parts, BlockRow *out, int *found) {
  int rc;
  int64_t *remembered = &t->tails[hash_values(parts, t->npart) % HS_TAILS];
  sqlite3_stmt *st;
  if (*remembered) {
    if (!(st = vs(t, VS_BLOCK, &rc))) return rc;
    sqlite3_bind_int64(st, 1, *remembered);
    rc = sqlite3_step(st);
    int ok = rc == SQLITE_ROW && sqlite3_column_int64(st, 2) < sqlite3_column_int64(st, 1);
    for (int i = 0; i < t->npart && ok; i++) ok = same_value(sqlite3_column_value(st, 3 + i), parts[i]);
    if (ok && (rc = vx_check_block(t, *remembered, st, 0, 1, 2))) {
      sqlite3_reset(st);
      return rc;
    }
    if (ok) {
      out->id = *remembered;
      out->dims = sqlite3_column_int64(st, 0);
      out->capacity = sqlite3_column_int64(st, 1);
      out->count = sqlite3_column_int64(st, 2);
      *found = 1;
    }
    sqlite3_reset(st);
    if (ok) return SQLITE_OK;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return vx_sql_fail(t, rc);
  }
  if (!(st = vs(t, VS_TAIL, &rc))) return rc;
  for (int i = 0; i < t->npart; i++) sqlite3_bind_value(st, i + 1, parts[i]);
  rc = sqlite3_step(st);
  *found = rc == SQLITE_ROW;
  if (*found) {
    int bad = vx_check_block(t, sqlite3_column_int64(st, 0), st, 1, 2, 3);
    if (bad) {
      sqlite3_reset(st);
      return bad;
    }
    out->id = sqlite3_column_int64(st, 0);
    out->dims = sqlite3_column_int64(st, 1);
    out->capacity = sqlite3_column_int64(st, 2);
    out->count = sqlite3_column_int64(st, 3);
    *remembered = out->id;
  }
  sqlite3_reset(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : vx_sql_fail(t, rc);
}

/* Where row `rowid` is; found = 0 when it is not in the table. */
static int vx_find(VxTab *t, int64_t rowid, int64_t *block, int64_t *slot, int *found) {
  int rc;
  sqlite3_stmt *st = vs(t, VS_FIND, &rc);
  if (!st) return rc;
  sqlite3_bind_int64(st, 1, rowid);
  rc = sqlite3_step(st);
  *found = rc == SQLITE_ROW;
  if (*found) {
    *block = sqlite3_column_int64(st, 0);
    *slot = sqlite3_column_int64(st, 1);
  }
  sqlite3_reset(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : vx_sql_fail(t, rc);
}

/* ---- format 3's checksums ---- */

static int vx_int(sqlite3 *db, const char *sql, int64_t *out);

/* What a block's row adds to the sum of its T_codes row to make its checksum. */
static uint64_t block_head(int64_t id, int64_t dims, int64_t capacity, int64_t count,
                           uint64_t parts) {
  return mix64((uint64_t)id ^ 0x243f6a8885a308d3ULL) + mix64((uint64_t)dims ^ 0x13198a2e03707344ULL) +
         mix64((uint64_t)capacity ^ 0xa4093822299f31d0ULL) +
         mix64((uint64_t)count ^ 0x082efa98ec4e6c89ULL) + parts;
}

/* T_info's format into t->format: 1 when it has none (format 1 wrote none). */
static int vx_format(VxTab *t) {
  if (t->format >= 0) return SQLITE_OK;
  char *sql = sqlite3_mprintf("select coalesce((select value from \"%w\".\"%w_info\" where key ="
                              " 'format'), 1)", t->schema, t->name);
  int rc = vx_int(t->db, sql, &t->format);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    t->format = -1;
    return vx_sql_fail(t, rc);
  }
  return SQLITE_OK;
}

/* Block `id`'s row as T_blocks has it, and the hash of its partition values; found = 0 when
** there is none. */
static int vx_block_ref(VxTab *t, int64_t id, BlockRef *r, uint64_t *parts, int *found) {
  int rc;
  sqlite3_stmt *st = vs(t, VS_BLOCK, &rc);
  if (!st) return rc;
  sqlite3_bind_int64(st, 1, id);
  rc = sqlite3_step(st);
  *found = rc == SQLITE_ROW;
  if (*found) {
    sqlite3_value *v[HS_MAX_FILTERS];
    for (int i = 0; i < t->npart; i++) v[i] = sqlite3_column_value(st, 3 + i);
    r->id = id;
    r->dims = sqlite3_column_int64(st, 0);
    r->capacity = sqlite3_column_int64(st, 1);
    r->count = sqlite3_column_int64(st, 2);
    r->nonce = sqlite3_column_int64(st, 3 + t->npart);
    *parts = hash_values(v, t->npart);
  }
  sqlite3_reset(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : vx_sql_fail(t, rc);
}

static int vx_set_nonce(VxTab *t, int64_t block, sqlite3_int64 nonce) {
  int rc;
  sqlite3_stmt *st = vs(t, VS_TOUCH, &rc);
  if (!st) return rc;
  sqlite3_bind_int64(st, 1, block);
  sqlite3_bind_int64(st, 2, nonce);
  return vs_run(t, st);
}

/*
** The nonce of block `id` once its row has `capacity` and `count` (b NULL:
** those it has): in format 3 its checksum, the one it has changed by the new
** count and capacity and by what the writes since added (t->pending); before,
** a random one.  A checksum that did not match before still does not.
*/
static int vx_new_nonce(VxTab *t, int64_t id, const BlockRow *b, sqlite3_int64 *nonce) {
  if (t->format < 3) {
    *nonce = fresh_nonce();
    return SQLITE_OK;
  }
  BlockRef r;
  uint64_t parts;
  int found, rc = vx_block_ref(t, id, &r, &parts, &found);
  if (rc) return rc;
  if (!found) {
    return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: its row is missing",
                   t->name, id);
  }
  int64_t delta = 0;
  map_find(&t->pending, id, &delta);
  if (!map_put(&t->pending, id, 0)) return SQLITE_NOMEM;
  uint64_t x = (uint64_t)r.nonce - block_head(id, r.dims, r.capacity, r.count, parts) +
               block_head(id, r.dims, b ? b->capacity : r.capacity, b ? b->count : r.count, parts) +
               (uint64_t)delta;
  *nonce = (sqlite3_int64)x;
  return SQLITE_OK;
}

/* Adds x to what the writes of this xUpdate added to block id's sum. */
static int add_pending(VxTab *t, int64_t id, uint64_t x) {
  int64_t was = 0;
  map_find(&t->pending, id, &was);
  return map_put(&t->pending, id, (int64_t)((uint64_t)was + x)) ? SQLITE_OK : SQLITE_NOMEM;
}

/* A new block's checksum: its row's, with a T_codes row of zeros. */
static int vx_seal_new(VxTab *t, int64_t id) {
  if (t->format < 3) return SQLITE_OK;
  BlockRef r;
  uint64_t parts;
  int found, rc = vx_block_ref(t, id, &r, &parts, &found);
  if (rc || !found) return rc;
  if (!map_put(&t->pending, id, 0)) return SQLITE_NOMEM;
  uint64_t x = block_head(id, r.dims, r.capacity, r.count, parts) +
               zeros_sum(block_bytes(t, r.capacity, r.dims));
  return vx_set_nonce(t, id, (sqlite3_int64)x);
}

/* Sets a block's count and capacity, with a new nonce. */
static int vx_set_count(VxTab *t, const BlockRow *b) {
  sqlite3_int64 nonce = 0;
  int rc = vx_new_nonce(t, b->id, b, &nonce);
  if (rc) return rc;
  sqlite3_stmt *st = vs(t, VS_SET_COUNT, &rc);
  if (!st) return rc;
  sqlite3_bind_int64(st, 1, b->id);
  sqlite3_bind_int64(st, 2, b->count);
  sqlite3_bind_int64(st, 3, b->capacity);
  sqlite3_bind_int64(st, 4, nonce);
  return vs_run(t, st);
}

static int vx_touch(VxTab *t, int64_t block) {
  sqlite3_int64 nonce = 0;
  int rc = vx_new_nonce(t, block, 0, &nonce);
  return rc ? rc : vx_set_nonce(t, block, nonce);
}

static int vx_id_op(VxTab *t, int which, int64_t a, int64_t b) {
  int rc;
  sqlite3_stmt *st = vs(t, which, &rc);
  if (!st) return rc;
  sqlite3_bind_int64(st, 1, a);
  sqlite3_bind_int64(st, 2, b);
  return vs_run(t, st);
}

/* The numeric metadata of one row, as block_bytes keeps it: 8 bytes and a NULL flag a column. */
static void num_encode(const VxTab *t, sqlite3_value *const *metas, uint8_t *vals,
                       uint8_t *nulls) {
  for (int i = 0; i < t->ncol; i++) {
    const VxCol *c = &t->col[i];
    if (c->num < 0) continue;
    sqlite3_value *v = metas[c->shadow];
    uint8_t *at = vals + 8 * c->num;
    memset(at, 0, 8);
    nulls[c->num] = sqlite3_value_type(v) == SQLITE_NULL;
    if (nulls[c->num]) continue;
    if (c->type == VX_INTEGER) {
      int64_t x = sqlite3_value_int64(v);
      memcpy(at, &x, 8);
    } else {
      double x = sqlite3_value_double(v);
      memcpy(at, &x, 8);
    }
  }
}

/* Writes n bytes at offset through an open handle, checking that they are there.  In
** format 3 a write to T_codes adds to the block's pending sum what it changes: the sum of the
** words it writes less that of the words they replace. */
static int blob_put(VxTab *t, sqlite3_blob *h, const void *data, int64_t n, int64_t offset,
                    const char *what, int64_t id) {
  int64_t size = sqlite3_blob_bytes(h), from = offset - offset % HS_SUM_CHUNK;
  int64_t to = (offset + n + HS_SUM_CHUNK - 1) / HS_SUM_CHUNK * HS_SUM_CHUNK;
  int sums = t->format >= 3 && strcmp(what, "codes") == 0;
  if (to > size) to = size;
  if (offset < 0 || offset + n > size) {
    return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: its %s row %lld has %d"
                   " bytes, too few for %lld at %lld", t->name, block_of(what, id), what, id,
                   sqlite3_blob_bytes(h), n, offset);
  }
  int rc = SQLITE_OK;
  if (sums) {
    uint8_t *was = sqlite3_malloc64((sqlite3_uint64)(2 * (to - from)));
    if (!was) return SQLITE_NOMEM;
    uint8_t *now = was + (to - from);
    rc = sqlite3_blob_read(h, was, (int)(to - from), (int)from);
    if (rc == SQLITE_OK) {
      memcpy(now, was, (size_t)(to - from));
      memcpy(now + (offset - from), data, (size_t)n);
      rc = add_pending(t, id, codes_sum(now, to - from, from) - codes_sum(was, to - from, from));
    } else {
      rc = vx_sql_fail(t, rc);
    }
    sqlite3_free(was);
    if (rc) return rc;
  }
  rc = sqlite3_blob_write(h, data, (int)n, (int)offset);
  return rc == SQLITE_OK ? rc : vx_sql_fail(t, rc);
}

/* Writes a row's numeric metadata (vals, nulls from num_encode) at `slot` of block b. */
static int put_nums(VxTab *t, sqlite3_blob *h, const BlockRow *b, int64_t slot,
                    const uint8_t *vals, const uint8_t *nulls) {
  int rc = SQLITE_OK;
  for (int j = 0; j < t->nnum && rc == SQLITE_OK; j++) {
    int64_t off = num_offset(b->capacity, b->dims, j);
    rc = blob_put(t, h, vals + 8 * j, 8, off + 8 * slot, "codes", b->id);
    if (rc == SQLITE_OK) rc = blob_put(t, h, nulls + j, 1, off + 8 * b->capacity + slot, "codes", b->id);
  }
  return rc;
}

/* Writes bytes at offset of the data of row id in T_suffix. */
static int vx_write(VxTab *t, const char *suffix, int64_t id, const void *data, int64_t bytes,
                    int64_t offset) {
  sqlite3_blob *h = 0;
  int rc = vx_blob(t, &h, suffix, id, 1);
  if (rc == SQLITE_OK) rc = blob_put(t, h, data, bytes, offset, suffix, id);
  vx_blob_close(&h);
  return rc;
}

/*
** Writes row `rowid` (its record, numeric metadata unless metas is NULL, and
** float32 vector v) into slot `slot` of block b; `append`: the slot is new, and
** the first of its group makes the group.
*/
static int vx_put(VxTab *t, const BlockRow *b, int64_t slot, int64_t rowid, const float *v,
                  sqlite3_value *const *metas, int append) {
  int64_t d = b->dims, stride = rec_stride(d);
  uint8_t *rec = sqlite3_malloc64((sqlite3_uint64)(stride + 9 * HS_MAX_FILTERS));
  if (!rec) return SQLITE_NOMEM;
  rec_build(rec, rowid, v, d);
  sqlite3_blob *h = 0;
  int rc = vx_blob(t, &h, "codes", b->id, 1);
  if (rc == SQLITE_OK) rc = blob_put(t, h, rec, stride, slot * stride, "codes", b->id);
  if (rc == SQLITE_OK && metas && t->nnum) {
    uint8_t *vals = rec + stride, *nulls = vals + 8 * HS_MAX_FILTERS;
    num_encode(t, metas, vals, nulls);
    rc = put_nums(t, h, b, slot, vals, nulls);
  }
  vx_blob_close(&h);
  sqlite3_free(rec);
  const Layout *l = vx_layout(t, d);
  if (rc == SQLITE_OK && append && slot % l->group == 0) {
    sqlite3_stmt *st = vs(t, VS_NEW_GROUP, &rc);
    if (!st) return rc;
    sqlite3_bind_int64(st, 1, group_id(l, b->id, slot));
    sqlite3_bind_zeroblob64(st, 2, (sqlite3_uint64)(4 * d * l->group));
    rc = vs_run(t, st);
  }
  if (rc == SQLITE_OK) {
    rc = vx_write(t, "vectors", group_id(l, b->id, slot), v, 4 * d, (slot % l->group) * 4 * d);
  }
  return rc;
}

/*
** Doubles the capacity of block b, full, up to a full block's rows, keeping its
** records and numeric metadata.
*/
static int vx_grow(VxTab *t, BlockRow *b) {
  int64_t d = b->dims, cap = b->capacity, old_bytes = block_bytes(t, cap, d);
  int64_t most = vx_layout(t, d)->rows, to = 2 * cap < most ? 2 * cap : most;
  int64_t new_bytes = block_bytes(t, to, d);
  uint8_t *old = sqlite3_malloc64((sqlite3_uint64)(old_bytes + new_bytes));
  if (!old) return SQLITE_NOMEM;
  uint8_t *grown = old + old_bytes;
  memset(grown, 0, (size_t)new_bytes);
  sqlite3_blob *h = 0;
  int rc = vx_blob(t, &h, "codes", b->id, 0);
  if (rc == SQLITE_OK) rc = vx_blob_read(t, h, old, old_bytes, 0, "codes", b->id);
  vx_blob_close(&h);
  memcpy(grown, old, (size_t)(b->count * rec_stride(d)));
  for (int j = 0; j < t->nnum; j++) {
    memcpy(grown + num_offset(to, d, j), old + num_offset(cap, d, j), (size_t)(8 * b->count));
    memcpy(grown + num_offset(to, d, j) + 8 * to, old + num_offset(cap, d, j) + 8 * cap,
           (size_t)b->count);
  }
  if (rc == SQLITE_OK) rc = vx_id_op(t, VS_GROW, b->id, new_bytes);
  if (rc == SQLITE_OK && t->format >= 3) { /* the row became zeros of the new size */
    rc = add_pending(t, b->id, zeros_sum(new_bytes) - codes_sum(old, old_bytes, 0));
  }
  if (rc == SQLITE_OK) rc = vx_write(t, "codes", b->id, grown, new_bytes, 0);
  if (rc == SQLITE_OK) b->capacity = to;
  sqlite3_free(old);
  return rc;
}

/* ---- appended rows, written together (Appended) ---- */

/* Forgets the rows held (a rollback), keeping the memory for the next ones. */
static void app_clear(VxTab *t) {
  Appended *a = &t->app;
  for (int i = 0; i < HS_MAX_FILTERS; i++) {
    sqlite3_value_free(a->parts[i]);
    a->parts[i] = 0;
  }
  a->block = a->n = 0;
}

static void app_free(VxTab *t) {
  Appended *a = &t->app;
  app_clear(t);
  sqlite3_free(a->recs);
  sqlite3_free(a->vecs);
  sqlite3_free(a->nums);
  sqlite3_free(a->scratch);
  memset(a, 0, sizeof(*a));
}

/* Whether a row of these partition values and dimensions goes to the rows held. */
static int app_takes(VxTab *t, sqlite3_value *const *parts, int64_t d) {
  const Appended *a = &t->app;
  if (!a->block || a->dims != d || a->count + a->n >= a->capacity) return 0;
  for (int i = 0; i < t->npart; i++) {
    if (!same_value(a->parts[i], parts[i])) return 0;
  }
  return 1;
}

/* Holds the rows appended next to block b (its row as written), of partition parts[]. */
static int app_start(VxTab *t, const BlockRow *b, sqlite3_value *const *parts) {
  Appended *a = &t->app;
  app_clear(t);
  int64_t room = b->capacity - b->count, stride = rec_stride(b->dims);
  if (room <= 0) return SQLITE_OK;
  if (a->cap < room || a->dims != b->dims) { /* the largest block of this D: once */
    int64_t rows = vx_layout(t, b->dims)->rows;
    sqlite3_free(a->recs);
    sqlite3_free(a->vecs);
    sqlite3_free(a->nums);
    a->recs = sqlite3_malloc64((sqlite3_uint64)(rows * stride));
    a->vecs = sqlite3_malloc64((sqlite3_uint64)(rows * 4 * b->dims));
    a->nums = sqlite3_malloc64((sqlite3_uint64)(rows * 9 * (t->nnum ? t->nnum : 1)));
    a->cap = a->recs && a->vecs && a->nums ? rows : 0;
    if (!a->cap) return SQLITE_OK; /* no memory to hold them: each is written by itself */
  }
  for (int i = 0; i < t->npart; i++) {
    if (!(a->parts[i] = sqlite3_value_dup(parts[i]))) {
      app_clear(t);
      return SQLITE_NOMEM;
    }
  }
  a->block = b->id, a->dims = b->dims, a->capacity = b->capacity, a->count = b->count;
  return SQLITE_OK;
}

/* Holds row `rowid`, which app_takes: its T_rowids row goes in now. */
static int app_add(VxTab *t, int64_t rowid, const float *v, sqlite3_value *const *metas) {
  Appended *a = &t->app;
  int64_t d = a->dims, slot = a->count + a->n;
  int rc;
  sqlite3_stmt *st = vs(t, VS_ADD_ROW, &rc);
  if (!st) return rc;
  sqlite3_bind_int64(st, 1, rowid);
  sqlite3_bind_int64(st, 2, a->block);
  sqlite3_bind_int64(st, 3, slot);
  for (int i = 0; i < t->nmeta; i++) sqlite3_bind_value(st, i + 4, metas[i]);
  if ((rc = vs_run(t, st))) return rc;
  rec_build(a->recs + a->n * rec_stride(d), rowid, v, d);
  memcpy(a->vecs + a->n * d, v, (size_t)(4 * d));
  if (t->nnum) {
    uint8_t *vals = a->nums + a->n * 9 * t->nnum;
    num_encode(t, metas, vals, vals + 8 * t->nnum);
  }
  a->n++;
  t->rows++;
  return SQLITE_OK;
}

static uint8_t *app_scratch(Appended *a, int64_t bytes) {
  if (bytes > a->scratch_cap) {
    sqlite3_free(a->scratch);
    a->scratch = sqlite3_malloc64((sqlite3_uint64)bytes);
    a->scratch_cap = a->scratch ? bytes : 0;
  }
  return a->scratch;
}

/* Writes the rows held: records and numeric metadata in one write each, the vectors of a new
** group in the insert that makes it, the block's count and checksum once. */
static int vx_flush(VxTab *t) {
  Appended *a = &t->app;
  if (!a->block || !a->n) {
    app_clear(t);
    return SQLITE_OK;
  }
  sqlite3_int64 last = sqlite3_last_insert_rowid(t->db); /* what the user's statement made */
  int busy = t->busy;
  t->busy = 1;
  map_free(&t->pending); /* no write has come before it in this xUpdate, if in one */
  BlockRow b = {a->block, a->dims, a->capacity, a->count};
  int64_t d = b.dims, n = a->n, stride = rec_stride(d), end = b.count + n;
  const Layout *l = vx_layout(t, d);
  sqlite3_blob *h = 0;
  int rc = vx_blob(t, &h, "codes", b.id, 1);
  if (rc == SQLITE_OK) rc = blob_put(t, h, a->recs, n * stride, b.count * stride, "codes", b.id);
  for (int j = 0; j < t->nnum && rc == SQLITE_OK; j++) { /* column j of the rows held */
    uint8_t *col = app_scratch(a, 9 * n);
    if (!col) {
      rc = SQLITE_NOMEM;
      break;
    }
    for (int64_t i = 0; i < n; i++) {
      const uint8_t *vals = a->nums + i * 9 * t->nnum;
      memcpy(col + 8 * i, vals + 8 * j, 8);
      col[8 * n + i] = vals[8 * t->nnum + j];
    }
    int64_t off = num_offset(b.capacity, d, j);
    rc = blob_put(t, h, col, 8 * n, off + 8 * b.count, "codes", b.id);
    if (rc == SQLITE_OK) rc = blob_put(t, h, col + 8 * n, n, off + 8 * b.capacity + b.count, "codes", b.id);
  }
  vx_blob_close(&h);
  for (int64_t slot = b.count; slot < end && rc == SQLITE_OK;) {
    int64_t first = slot - slot % l->group, to = first + l->group < end ? first + l->group : end;
    const float *v = a->vecs + (slot - b.count) * d;
    if (slot == first) { /* a new group: made with its vectors, zeros after them */
      int64_t bytes = 4 * d * l->group;
      uint8_t *g = app_scratch(a, bytes);
      sqlite3_stmt *st = g ? vs(t, VS_NEW_GROUP, &rc) : 0;
      if (!g) rc = SQLITE_NOMEM;
      if (st) {
        memcpy(g, v, (size_t)(4 * d * (to - slot)));
        memset(g + 4 * d * (to - slot), 0, (size_t)(bytes - 4 * d * (to - slot)));
        sqlite3_bind_int64(st, 1, group_id(l, b.id, slot));
        sqlite3_bind_blob64(st, 2, g, (sqlite3_uint64)bytes, SQLITE_STATIC);
        rc = vs_run(t, st);
        sqlite3_bind_null(st, 2);
      }
    } else {
      rc = vx_write(t, "vectors", group_id(l, b.id, slot), v, 4 * d * (to - slot),
                    (slot - first) * 4 * d);
    }
    slot = to;
  }
  b.count = end;
  if (rc == SQLITE_OK) rc = vx_set_count(t, &b);
  app_clear(t);
  sqlite3_set_last_insert_rowid(t->db, last);
  t->busy = busy;
  return rc;
}

/*
** Appends row `rowid` to its partition (parts[]), with metadata metas[].  The
** caller has checked everything that can be wrong with the row, so that only
** SQLite's own errors can stop it half way (and those roll back the
** transaction: vx_sql_fail keeps their codes).  `hold`: the row may be held
** with the rows appended before it (Appended), and the rows after it with it.
*/
static int vx_append(VxTab *t, int64_t rowid, const float *v, int64_t d,
                     sqlite3_value *const *parts, sqlite3_value *const *metas, int hold) {
  int rc;
  if (t->app.block) {
    if (hold && app_takes(t, parts, d)) return app_add(t, rowid, v, metas);
    if ((rc = vx_flush(t))) return rc;
  }
  BlockRow b;
  int found;
  if ((rc = vx_tail(t, parts, &b, &found))) return rc;
  int64_t full = vx_layout(t, d)->rows;
  if (!found || (b.count == b.capacity && b.capacity == full)) {
    sqlite3_stmt *st = vs(t, VS_NEW_BLOCK, &rc);
    if (!st) return rc;
    b.dims = d;
    b.capacity = found ? full : HS_BLOCK_MIN; /* a partition that filled one block */
    b.count = 0;
    sqlite3_bind_int64(st, 1, b.dims);
    sqlite3_bind_int64(st, 2, b.capacity);
    sqlite3_bind_int64(st, 3, fresh_nonce());
    for (int i = 0; i < t->npart; i++) sqlite3_bind_value(st, i + 4, parts[i]);
    if ((rc = vs_run(t, st))) return rc;
    b.id = sqlite3_last_insert_rowid(t->db);
    t->tails[hash_values(parts, t->npart) % HS_TAILS] = b.id;
    rc = vx_id_op(t, VS_NEW_CODES, b.id, block_bytes(t, b.capacity, d));
    if ((rc & 0xff) == SQLITE_CONSTRAINT) { /* a row left behind by a block that is gone */
      return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: its codes row was there"
                     " before it", t->name, b.id);
    }
    if (rc || (rc = vx_seal_new(t, b.id))) return rc;
  } else if (b.count == b.capacity) { /* the partition's only block, full: double it */
    if ((rc = vx_grow(t, &b))) return rc;
  }
  if ((rc = vx_put(t, &b, b.count, rowid, v, metas, 1))) return rc;
  sqlite3_stmt *st = vs(t, VS_ADD_ROW, &rc);
  if (!st) return rc;
  sqlite3_bind_int64(st, 1, rowid);
  sqlite3_bind_int64(st, 2, b.id);
  sqlite3_bind_int64(st, 3, b.count);
  for (int i = 0; i < t->nmeta; i++) sqlite3_bind_value(st, i + 4, metas[i]);
  if ((rc = vs_run(t, st))) return rc;
  b.count++;
  if ((rc = vx_set_count(t, &b))) return rc;
  t->rows++;
  return hold ? app_start(t, &b, parts) : SQLITE_OK;
}

/* The row at (b, slot) moves to (to, to_slot): record, numeric metadata, vector, location. */
static int vx_move(VxTab *t, const BlockRow *b, int64_t slot, const BlockRow *to,
                   int64_t to_slot) {
  int64_t d = b->dims, stride = rec_stride(d);
  uint8_t *buf = sqlite3_malloc64((sqlite3_uint64)(stride + 4 * d + 9 * HS_MAX_FILTERS));
  if (!buf) return SQLITE_NOMEM;
  uint8_t *vals = buf + stride + 4 * d, *nulls = vals + 8 * HS_MAX_FILTERS;
  sqlite3_blob *h = 0;
  int rc = vx_blob(t, &h, "codes", b->id, 0);
  if (rc == SQLITE_OK) rc = vx_blob_read(t, h, buf, stride, slot * stride, "codes", b->id);
  for (int j = 0; j < t->nnum && rc == SQLITE_OK; j++) {
    int64_t off = num_offset(b->capacity, d, j);
    rc = vx_blob_read(t, h, vals + 8 * j, 8, off + 8 * slot, "codes", b->id);
    if (rc == SQLITE_OK) {
      rc = vx_blob_read(t, h, nulls + j, 1, off + 8 * b->capacity + slot, "codes", b->id);
    }
  }
  vx_blob_close(&h);
  if (rc == SQLITE_OK) rc = vx_read_vector(t, &h, b->id, slot, d, (float *)(buf + stride));
  vx_blob_close(&h);
  if (rc == SQLITE_OK) rc = vx_blob(t, &h, "codes", to->id, 1);
  if (rc == SQLITE_OK) rc = blob_put(t, h, buf, stride, to_slot * stride, "codes", to->id);
  if (rc == SQLITE_OK) rc = put_nums(t, h, to, to_slot, vals, nulls);
  vx_blob_close(&h);
  if (rc == SQLITE_OK) {
    const Layout *l = vx_layout(t, d);
    rc = vx_write(t, "vectors", group_id(l, to->id, to_slot), buf + stride, 4 * d,
                  (to_slot % l->group) * 4 * d);
  }
  if (rc == SQLITE_OK) {
    sqlite3_stmt *st = vs(t, VS_MOVE_ROW, &rc);
    if (st) {
      sqlite3_bind_int64(st, 1, rec_id(buf));
      sqlite3_bind_int64(st, 2, to->id);
      sqlite3_bind_int64(st, 3, to_slot);
      rc = vs_run(t, st);
    }
  }
  sqlite3_free(buf);
  return rc;
}

/* The block row of block `id`, with its partition values bound to VS_TAIL's parameters. */
static int vx_block(VxTab *t, int64_t id, BlockRow *out, sqlite3_value **parts, int *found) {
  int rc;
  sqlite3_stmt *st = vs(t, VS_BLOCK, &rc);
  if (!st) return rc;
  sqlite3_bind_int64(st, 1, id);
  rc = sqlite3_step(st);
  *found = rc == SQLITE_ROW;
  if (*found) {
    int bad = vx_check_block(t, id, st, 0, 1, 2);
    if (bad) {
      sqlite3_reset(st);
      return bad;
    }
    out->id = id;
    out->dims = sqlite3_column_int64(st, 0);
    out->capacity = sqlite3_column_int64(st, 1);
    out->count = sqlite3_column_int64(st, 2);
    for (int i = 0; i < t->npart && rc == SQLITE_ROW; i++) {
      parts[i] = sqlite3_value_dup(sqlite3_column_value(st, 3 + i));
      if (!parts[i]) rc = SQLITE_NOMEM;
    }
  }
  sqlite3_reset(st);
  if (rc == SQLITE_NOMEM) return rc;
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : vx_sql_fail(t, rc);
}

/* A row's location (T_rowids) must be one of its block's rows. */
static int vx_check_slot(VxTab *t, const BlockRow *b, int64_t rowid, int64_t slot) {
  if (slot >= 0 && slot < b->count) return SQLITE_OK;
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: row %lld is in its slot"
                 " %lld, not 0 to %lld", t->name, b->id, rowid, slot, b->count - 1);
}

static void free_values(sqlite3_value **v, int n) {
  for (int i = 0; i < n; i++) {
    sqlite3_value_free(v[i]);
    v[i] = 0;
  }
}

/* Deletes row `rowid`: the last row of its partition moves into its slot. */
static int vx_remove(VxTab *t, int64_t rowid) {
  int64_t block, slot;
  int found, rc = vx_find(t, rowid, &block, &slot, &found);
  if (rc || !found) return rc;
  sqlite3_value *parts[HS_MAX_FILTERS] = {0};
  BlockRow b, last;
  rc = vx_block(t, block, &b, parts, &found);
  if (rc == SQLITE_OK && !found) {
    rc = vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: row %lld is in block %lld, which is missing",
                 t->name, rowid, block);
  }
  if (rc == SQLITE_OK) rc = vx_check_slot(t, &b, rowid, slot);
  if (rc == SQLITE_OK) rc = vx_tail(t, parts, &last, &found);
  free_values(parts, t->npart);
  if (rc) return rc;
  if (!found || last.count < 1 || last.dims != b.dims) {
    return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: the partition of row %lld has no last block",
                   t->name, rowid);
  }
  int64_t end = last.count - 1;
  if (last.id != block || end != slot) {
    if ((rc = vx_move(t, &last, end, &b, slot))) return rc;
    if (last.id != block && (rc = vx_touch(t, block))) return rc;
  }
  if ((rc = vx_id_op(t, VS_DROP_ROW, rowid, 0))) return rc;
  last.count = end;
  if (last.count == 0) { /* the block is empty: give its pages back */
    if (!map_put(&t->pending, last.id, 0)) return SQLITE_NOMEM;
    if ((rc = vx_id_op(t, VS_DROP_BLOCK, last.id, 0))) return rc;
    if ((rc = vx_id_op(t, VS_DROP_CODES, last.id, 0))) return rc;
    rc = vx_id_op(t, VS_DROP_GROUPS, last.id, 0);
  } else {
    rc = vx_set_count(t, &last);
    const Layout *l = vx_layout(t, last.dims);
    if (rc == SQLITE_OK && end % l->group == 0) { /* its last group is empty */
      rc = vx_id_op(t, VS_DROP_GROUP, group_id(l, last.id, end), 0);
    }
  }
  if (rc == SQLITE_OK) t->rows--;
  return rc;
}

/* Requirement 1 for a value of a partition or metadata column: NULL or the declared type. */
static int fits(const VxCol *c, sqlite3_value *v) {
  int type = sqlite3_value_type(v);
  return type == SQLITE_NULL || (c->type == VX_TEXT && type == SQLITE_TEXT) ||
         (c->type == VX_INTEGER && type == SQLITE_INTEGER) ||
         (c->type == VX_REAL && (type == SQLITE_FLOAT || type == SQLITE_INTEGER));
}

static int vx_check_value(VxTab *t, const VxCol *c, sqlite3_value *v) {
  if (!fits(c, v)) {
    return vx_fail(t, SQLITE_MISMATCH, "%s: column %s is %s, got %s", t->name, c->name,
                   VX_TYPES[c->type], type_name(v));
  }
  return SQLITE_OK;
}

/* The values of an INSERT or UPDATE, checked before anything is written. */
typedef struct NewRow {
  Vec vec;       /* v NULL when unchanged (UPDATE) */
  int vec_same;  /* the UPDATE leaves the vector as it is */
  sqlite3_value *parts[HS_MAX_FILTERS], *metas[HS_MAX_FILTERS];
  int parts_same, metas_same; /* UPDATE: none of them changes */
} NewRow;

static int vx_new_row(VxTab *t, sqlite3_value **cols, int64_t rowid, NewRow *r) {
  memset(r, 0, sizeof(*r));
  r->parts_same = r->metas_same = 1;
  for (int i = 0; i < t->ncol; i++) {
    const VxCol *c = &t->col[i];
    sqlite3_value *v = cols[i];
    int same = sqlite3_value_nochange(v);
    if (c->role == VX_PARTITION || c->role == VX_METADATA) {
      int rc = same ? SQLITE_OK : vx_check_value(t, c, v);
      if (rc) return rc;
      if (c->role == VX_PARTITION) r->parts[c->shadow] = v, r->parts_same &= same;
      else r->metas[c->shadow] = v, r->metas_same &= same;
    } else if (c->role == VX_VECTOR) {
      r->vec_same = same;
      if (same) continue;
      char what[64];
      sqlite3_snprintf(sizeof(what), what, "the vector of row %lld", rowid);
      char *err = parse_vector(v, t->name, what, &r->vec);
      if (err) return vx_take(t, err);
      if (!r->vec.v) return vx_fail(t, SQLITE_CONSTRAINT_NOTNULL, "%s: %s is NULL", t->name, what);
      if (t->dims && r->vec.d != t->dims) {
        vec_free(&r->vec);
        return vx_fail(t, SQLITE_ERROR, "%s: %s has %lld dimensions, the table has %lld",
                       t->name, what, r->vec.d, t->dims);
      }
    }
  }
  return SQLITE_OK;
}

/* With float[]: the partition's vectors have one D, that of its last block. */
static int vx_check_dims(VxTab *t, sqlite3_value *const *parts, int64_t rowid, int64_t d) {
  if (app_takes(t, parts, d)) return SQLITE_OK; /* the rows held: of its partition and D */
  BlockRow b;
  int found, rc = vx_tail(t, parts, &b, &found);
  if (rc == SQLITE_OK && found && b.dims != d) {
    rc = vx_fail(t, SQLITE_ERROR, "%s: the vector of row %lld has %lld dimensions, the other"
                 " vectors of its partition have %lld", t->name, rowid, d, b.dims);
  }
  return rc;
}

static int vx_insert(VxTab *t, int64_t rowid, NewRow *r) {
  int found, rc;
  int64_t block, slot;
  if ((rc = vx_find(t, rowid, &block, &slot, &found))) return rc;
  if (found) {
    int mode = sqlite3_vtab_on_conflict(t->db);
    if (mode == SQLITE_IGNORE) return SQLITE_OK;
    if (mode != SQLITE_REPLACE) {
      return vx_fail(t, SQLITE_CONSTRAINT_PRIMARYKEY, "UNIQUE constraint failed: %s.rowid",
                     t->name);
    }
    if ((rc = vx_flush(t))) return rc; /* the row replaced, or the one moved, may be held */
  }
  if ((rc = vx_check_dims(t, r->parts, rowid, r->vec.d))) return rc;
  if (found && (rc = vx_remove(t, rowid))) return rc;
  return vx_append(t, rowid, r->vec.v, r->vec.d, r->parts, r->metas, 1);
}

/* A partition value as it is stored in the block row, compared with a new one. */
static int same_value(sqlite3_value *a, sqlite3_value *b) {
  int ta = sqlite3_value_type(a), tb = sqlite3_value_type(b);
  if (ta == SQLITE_INTEGER && tb == SQLITE_FLOAT) return 0; /* real columns store REAL */
  if (ta != tb) return ta == SQLITE_FLOAT && tb == SQLITE_INTEGER &&
                       sqlite3_value_double(a) == (double)sqlite3_value_int64(b);
  switch (ta) {
    case SQLITE_NULL: return 1;
    case SQLITE_INTEGER: return sqlite3_value_int64(a) == sqlite3_value_int64(b);
    case SQLITE_FLOAT: return sqlite3_value_double(a) == sqlite3_value_double(b);
    default: { /* an empty text or blob has no pointer to compare */
      int n = sqlite3_value_bytes(a);
      return n == sqlite3_value_bytes(b) &&
             (n == 0 || memcmp(sqlite3_value_blob(a), sqlite3_value_blob(b), (size_t)n) == 0);
    }
  }
}

/* The metadata values of row `rowid`, copied into out[] (sqlite3_value_free them). */
static int vx_metas(VxTab *t, int64_t rowid, sqlite3_value **out) {
  sqlite3_str *s = sqlite3_str_new(0);
  sqlite3_str_appendall(s, "select rowid");
  append_cols(s, "", 'm', t->nmeta, 1);
  sqlite3_str_appendf(s, " from \"%w\".\"%w_rowids\" where rowid = ?1", t->schema, t->name);
  char *sql = sqlite3_str_finish(s);
  sqlite3_stmt *st = 0;
  int rc = sql ? sqlite3_prepare_v2(t->db, sql, -1, &st, 0) : SQLITE_NOMEM;
  sqlite3_free(sql);
  if (rc == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, rowid);
    rc = sqlite3_step(st);
    for (int i = 0; i < t->nmeta && rc == SQLITE_ROW; i++) {
      out[i] = sqlite3_value_dup(sqlite3_column_value(st, 1 + i));
      if (!out[i]) rc = SQLITE_NOMEM;
    }
    if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return rc == SQLITE_OK || rc == SQLITE_NOMEM ? rc : vx_sql_fail(t, rc);
}

/*
** UPDATE of row `old`, which becomes `rowid`.  A new vector or new metadata
** are written in place; a new partition or rowid moves the row: it is
** removed and appended again, with the values the UPDATE leaves as they are.
*/
static int vx_update(VxTab *t, int64_t old, int64_t rowid, NewRow *r) {
  int64_t block, slot;
  int found, rc;
  if ((rc = vx_find(t, old, &block, &slot, &found)) || !found) return rc;
  sqlite3_value *now[HS_MAX_FILTERS] = {0}, *metas[HS_MAX_FILTERS] = {0};
  float *v = 0;
  BlockRow b;
  rc = vx_block(t, block, &b, now, &found);
  if (rc == SQLITE_OK && !found) {
    rc = vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: row %lld is in block %lld, which is missing",
                 t->name, old, block);
  }
  if (rc == SQLITE_OK) rc = vx_check_slot(t, &b, old, slot);
  int moves = rowid != old;
  for (int i = 0; i < t->npart && rc == SQLITE_OK; i++) {
    if (sqlite3_value_nochange(r->parts[i])) r->parts[i] = now[i];
    else if (!same_value(now[i], r->parts[i])) moves = 1;
  }
  int64_t d = r->vec_same ? b.dims : r->vec.d;
  const float *vec = r->vec.v;
  if (rc == SQLITE_OK && (moves || !r->metas_same)) { /* the values the row keeps */
    rc = vx_metas(t, old, metas);
    for (int i = 0; i < t->nmeta && rc == SQLITE_OK; i++) {
      if (!sqlite3_value_nochange(r->metas[i])) {
        sqlite3_value_free(metas[i]);
        if (!(metas[i] = sqlite3_value_dup(r->metas[i]))) rc = SQLITE_NOMEM;
      }
    }
  }
  if (rc == SQLITE_OK && moves && r->vec_same) {
    sqlite3_blob *h = 0;
    v = sqlite3_malloc64(sizeof(float) * (sqlite3_uint64)d);
    rc = v ? vx_read_vector(t, &h, block, slot, d, v) : SQLITE_NOMEM;
    vx_blob_close(&h);
    vec = v;
  }
  int replace = 0;
  if (rc == SQLITE_OK && rowid != old) {
    int64_t ob, os;
    if ((rc = vx_find(t, rowid, &ob, &os, &replace)) == SQLITE_OK && replace) {
      int mode = sqlite3_vtab_on_conflict(t->db);
      if (mode == SQLITE_IGNORE) goto done;
      if (mode != SQLITE_REPLACE) {
        rc = vx_fail(t, SQLITE_CONSTRAINT_PRIMARYKEY, "UNIQUE constraint failed: %s.rowid",
                     t->name);
      }
    }
  }
  if (rc == SQLITE_OK && moves) {
    rc = vx_check_dims(t, r->parts, rowid, d);
  } else if (rc == SQLITE_OK && d != b.dims) {
    rc = vx_fail(t, SQLITE_ERROR, "%s: the vector of row %lld has %lld dimensions, the other"
                 " vectors of its partition have %lld", t->name, rowid, d, b.dims);
  }
  /* Everything is checked: from here on only SQLite's own errors can stop it. */
  if (rc == SQLITE_OK && moves) {
    rc = vx_remove(t, old);
    if (rc == SQLITE_OK && replace) rc = vx_remove(t, rowid);
    if (rc == SQLITE_OK) rc = vx_append(t, rowid, vec, d, r->parts, metas, 0);
    goto done;
  }
  if (rc == SQLITE_OK && !r->vec_same) {
    rc = vx_put(t, &b, slot, rowid, vec, r->metas_same ? 0 : metas, 0);
    if (rc == SQLITE_OK) rc = vx_touch(t, block);
  }
  if (rc == SQLITE_OK && !r->metas_same) {
    sqlite3_stmt *st = vs(t, VS_SET_META, &rc);
    if (st) {
      sqlite3_bind_int64(st, 1, rowid);
      for (int i = 0; i < t->nmeta; i++) sqlite3_bind_value(st, i + 2, metas[i]);
      rc = vs_run(t, st);
    }
    if (rc == SQLITE_OK && t->nnum && r->vec_same) { /* the block's copy of the numbers */
      uint8_t vals[8 * HS_MAX_FILTERS], nulls[HS_MAX_FILTERS];
      sqlite3_blob *h = 0;
      num_encode(t, metas, vals, nulls);
      rc = vx_blob(t, &h, "codes", block, 1);
      if (rc == SQLITE_OK) rc = put_nums(t, h, &b, slot, vals, nulls);
      vx_blob_close(&h);
      if (rc == SQLITE_OK) rc = vx_touch(t, block);
    }
  }
done:
  free_values(now, t->npart);
  free_values(metas, t->nmeta);
  sqlite3_free(v);
  return rc;
}

/* ---- queries: the plan xBestIndex makes and xFilter follows ---- */

/*
** idxStr: one token of 5 characters per argument xFilter gets, in order: the
** role (M the MATCH vector, K k, L LIMIT, O OFFSET, R the rowid, P a
** partition column, X a metadata column), the column as two hex digits, the
** operator (see op_sql; I is an IN list handed over whole), and the
** collation (b binary, n nocase, r rtrim).
*/
#define VX_TOKEN 5

static char op_char(unsigned char op) {
  switch (op) {
    case SQLITE_INDEX_CONSTRAINT_EQ: return '=';
    case SQLITE_INDEX_CONSTRAINT_GT: return '>';
    case SQLITE_INDEX_CONSTRAINT_LE: return '{';
    case SQLITE_INDEX_CONSTRAINT_LT: return '<';
    case SQLITE_INDEX_CONSTRAINT_GE: return '}';
    case SQLITE_INDEX_CONSTRAINT_NE: return '!';
    case SQLITE_INDEX_CONSTRAINT_IS: return 'i';
    case SQLITE_INDEX_CONSTRAINT_ISNOT: return 'n';
    case SQLITE_INDEX_CONSTRAINT_ISNULL: return '0';
    case SQLITE_INDEX_CONSTRAINT_ISNOTNULL: return '1';
    case SQLITE_INDEX_CONSTRAINT_LIKE: return 'l';
    case SQLITE_INDEX_CONSTRAINT_GLOB: return 'g';
    default: return 0;
  }
}

static const char *op_sql(char op) {
  switch (op) {
    case '=': return "= ?";
    case '>': return "> ?";
    case '{': return "<= ?";
    case '<': return "< ?";
    case '}': return ">= ?";
    case '!': return "!= ?";
    case 'i': return "is ?";
    case 'n': return "is not ?";
    case '0': return "is null";
    case '1': return "is not null";
    case 'l': return "like ?";
    default: return "glob ?";
  }
}

/* Whether this SQLite hands an IN list over whole (sqlite3_vtab_in, 3.38). */
static int vtab_in_ok;

/*
** The plan of a query (Requirement 10).  Without MATCH it is a scan of the
** rows its conditions select.  With MATCH, every condition the table takes
** (argvIndex, then omit) is one xFilter honours exactly, alone and with the
** others: a k-nearest query over the rows they select cannot be split, so an
** IN list is taken whole or not at all, two rowid conditions are both applied,
** and k is one number.  What it does not take SQLite tests on the rows it gets;
** with k, that is allowed only where the test keeps the rows a test before the
** top k would (same_after), and any other usable condition is refused.
** LIMIT stands for k only where nothing is left for SQLite to test and the
** rows come out in the ORDER BY's order (none, or score desc).  SQLite agrees:
** it hands LIMIT over only when every condition of the statement is one of
** this table's, and uses a plan that takes it only if the plan takes every
** other condition too, so an OR or an expression leaves it with SQLite.
** Without k or such a LIMIT, a MATCH query gives every row its conditions
** select, best first, and SQLite applies the ORDER BY and LIMIT.
**
** An OR whose branches each are a condition of this table is not among the
** constraints: SQLite asks about each branch (with the AND terms beside it) to
** cost a MULTI-INDEX OR plan, in calls no different from those of a query
** with that branch as an AND term, and such a plan returns the union of what
** each branch's xFilter gives.  The K nearest of each branch are not the K
** nearest of their union, so no k-nearest plan can answer the OR, and no call
** can tell the table that there is one: such plans cost more than the plan
** without the branch (VX_COND_COST), which SQLite then takes, testing the OR on
** its K rows as Requirement 10 says.
**
** Costs: a k-nearest plan that takes only conditions with values costs least,
** so SQLite neither asks it once per row of another table (a plan that takes
** a condition on another table's column costs 1e6 more a condition), nor
** answers its OR terms by scans: a scan of a table whose vector, score or k
** the statement uses costs 1e12 times more (those are a k-nearest query's
** columns; a scan for a statement that uses them keeps its ranking of scans).
*/
#define VX_SCAN_FACTOR 1e12
#define VX_COND_COST 1e6

/* IN lists are handed over whole for the first 32 constraints only (sqlite3_vtab_in). */
#define VX_MAX_IN 32

/*
** Whether SQLite's test of condition c on a k-nearest query's K rows keeps the
** same rows as the test before the top k would: so for the k column (one value
** for the whole query), the vector IS [NOT] NULL (no row's is NULL), and score
** >, >=, IS [NOT] NULL (the rows are in descending score, so what passes is a
** head of them).
*/
static int same_after(const VxTab *t, const struct sqlite3_index_constraint *c) {
  int op = c->op;
  if (c->iColumn == VX_K(t)) return 1;
  if (op == SQLITE_INDEX_CONSTRAINT_ISNULL || op == SQLITE_INDEX_CONSTRAINT_ISNOTNULL)
    return c->iColumn == VX_SCORE(t) || c->iColumn == t->vec;
  return c->iColumn == VX_SCORE(t) &&
         (op == SQLITE_INDEX_CONSTRAINT_GT || op == SQLITE_INDEX_CONSTRAINT_GE);
}

/* A condition's operator as SQL writes it. */
static const char *op_word(unsigned char op) {
  switch (op) {
    case SQLITE_INDEX_CONSTRAINT_EQ: return "=";
    case SQLITE_INDEX_CONSTRAINT_GT: return ">";
    case SQLITE_INDEX_CONSTRAINT_LE: return "<=";
    case SQLITE_INDEX_CONSTRAINT_LT: return "<";
    case SQLITE_INDEX_CONSTRAINT_GE: return ">=";
    case SQLITE_INDEX_CONSTRAINT_NE: return "!=";
    case SQLITE_INDEX_CONSTRAINT_IS: return "is";
    case SQLITE_INDEX_CONSTRAINT_ISNOT: return "is not";
    case SQLITE_INDEX_CONSTRAINT_ISNULL: return "is null";
    case SQLITE_INDEX_CONSTRAINT_ISNOTNULL: return "is not null";
    case SQLITE_INDEX_CONSTRAINT_LIKE: return "like";
    case SQLITE_INDEX_CONSTRAINT_GLOB: return "glob";
    case SQLITE_INDEX_CONSTRAINT_REGEXP: return "regexp";
    case SQLITE_INDEX_CONSTRAINT_MATCH: return "match";
    default: return "?";
  }
}

/*
** A k-nearest query handed a condition that the table cannot apply before the
** top k (Requirement 10): an error that names it and the two ways to write the
** query, rather than K rows that SQLite then filters down to fewer.
*/
static int refuse_knn(VxTab *t, sqlite3_index_info *info, int i) {
  const struct sqlite3_index_constraint *c = &info->aConstraint[i];
  int col = c->iColumn, unary = c->op == SQLITE_INDEX_CONSTRAINT_ISNULL ||
                                c->op == SQLITE_INDEX_CONSTRAINT_ISNOTNULL;
  const char *name = col < 0 || col == t->alias ? "rowid"
                     : col == VX_SCORE(t)       ? "score"
                                                : t->col[col].name;
  const char *coll = sqlite3_vtab_collation(info, i);
  char collate[80] = "";
  if (coll && sqlite3_stricmp(coll, "BINARY") != 0)
    sqlite3_snprintf(sizeof(collate), collate, " collate %s", coll);
  return vx_fail(t, SQLITE_ERROR, "%s: k = N takes the N nearest of the rows its conditions"
                 " select, and the table cannot apply \"%s %s%s%s\" before the top N: write"
                 " \"order by score desc limit N\" instead of k = N, or put the condition in"
                 " \"rowid in (select rowid from %s where ...)\"", t->name, name,
                 op_word(c->op), unary ? "" : " ...", collate, t->name);
}

static int vx_best_index(sqlite3_vtab *vt, sqlite3_index_info *info) {
  VxTab *t = (VxTab *)vt;
  int match = -1, n = 0, rowid_eq = 0, eq = 0, conds = 0, all_taken = 1, has_k = 0;
  int limit = -1, offset = -1, k_taken = 0, refused = -1;
  for (int i = 0; i < info->nConstraint; i++) {
    const struct sqlite3_index_constraint *c = &info->aConstraint[i];
    if (c->op == SQLITE_INDEX_CONSTRAINT_MATCH && c->iColumn == t->vec) {
      if (!c->usable) return SQLITE_CONSTRAINT; /* only plans where the query vector is known */
      if (match >= 0) {
        return vx_fail(t, SQLITE_ERROR, "%s: a query has one MATCH vector, this one has two",
                       t->name);
      }
      match = i;
    }
  }
  char *plan = sqlite3_malloc64((sqlite3_uint64)info->nConstraint * VX_TOKEN + 1);
  if (!plan) return SQLITE_NOMEM;
  plan[0] = 0;
  for (int pass = 0; pass < 2; pass++) { /* the MATCH vector first */
    for (int i = 0; i < info->nConstraint; i++) {
      const struct sqlite3_index_constraint *c = &info->aConstraint[i];
      if ((pass == 0) != (i == match)) continue;
      if (c->op == SQLITE_INDEX_CONSTRAINT_LIMIT || c->op == SQLITE_INDEX_CONSTRAINT_OFFSET) {
        if (c->usable && c->op == SQLITE_INDEX_CONSTRAINT_LIMIT) limit = i;
        else if (c->usable) offset = i;
        continue; /* decided below, once every other condition is */
      }
      if (c->iColumn == VX_K(t)) has_k = 1;
      if (!c->usable) {
        all_taken = 0;
        continue;
      }
      int col = c->iColumn;
      char role = 0, op = op_char(c->op), coll = 'b';
      if (i == match) {
        role = 'M', op = '=';
      } else if (col == VX_K(t) && op == '=') {
        role = 'K', k_taken = 1;
      } else if (col < 0 || col == t->alias) {
        if (!op || op == 'l' || op == 'g') {
          all_taken = 0;
          if (refused < 0) refused = i;
          continue;
        }
        role = 'R', col = 0;
        if (op == 'i') op = '=';
        if (op == '=') rowid_eq = 1;
      } else if (col < t->ncol && op &&
                 (t->col[col].role == VX_PARTITION || t->col[col].role == VX_METADATA)) {
        const char *name = sqlite3_vtab_collation(info, i);
        if (sqlite3_stricmp(name, "BINARY") == 0) coll = 'b';
        else if (sqlite3_stricmp(name, "NOCASE") == 0) coll = 'n';
        else if (sqlite3_stricmp(name, "RTRIM") == 0) coll = 'r';
        else { /* another collation: SQLite tests it */
          all_taken = 0;
          if (refused < 0) refused = i;
          continue;
        }
        role = t->col[col].role == VX_PARTITION ? 'P' : 'X';
        if (op == '=') eq++;
      } else {
        all_taken = 0;
        if (refused < 0 && !same_after(t, c)) refused = i;
        continue;
      }
      if (match >= 0 && op == '=' && role != 'M') {
        /* An IN list handed over one value at a time would split the k-nearest query.  Before
        ** 3.38 no IN list can be told apart: k = N is taken (k in (...) is no filter anyone
        ** needs), a filter is refused. */
        if (vtab_in_ok && sqlite3_vtab_in(info, i, 1)) {
          op = 'I';
        } else if (!vtab_in_ok && role != 'K') {
          sqlite3_free(plan);
          return vx_fail(t, SQLITE_ERROR, "%s: a MATCH query with = or IN conditions needs"
                         " SQLite 3.38 or later, which hands an IN list over whole; this is %s",
                         t->name, sqlite3_libversion());
        } else if (vtab_in_ok && i >= VX_MAX_IN) {
          sqlite3_free(plan);
          return vx_fail(t, SQLITE_ERROR, "%s: a MATCH query takes = and IN conditions among"
                         " its first %d only (SQLite hands an IN list over whole only there),"
                         " and condition %d is one: write them first", t->name, VX_MAX_IN, i + 1);
        }
      }
      if (role != 'M' && role != 'K') conds++;
      info->aConstraintUsage[i].argvIndex = ++n;
      info->aConstraintUsage[i].omit = 1;
      sqlite3_snprintf(VX_TOKEN + 1, plan + VX_TOKEN * (n - 1), "%c%02x%c%c", role, col, op,
                       coll);
    }
  }
  if (match >= 0 && k_taken && refused >= 0) {
    sqlite3_free(plan);
    return refuse_knn(t, info, refused);
  }
  double rows = t->rows > 0 ? (double)t->rows : 1.0;
  for (int i = 0; i < eq; i++) rows /= 10.0;
  if (match >= 0) {
    int o = info->nOrderBy;
    const struct sqlite3_index_orderby *ob = info->aOrderBy;
    info->orderByConsumed =
        (o >= 1 && ob[0].iColumn == VX_SCORE(t) && ob[0].desc) &&
        (o == 1 || (o == 2 && (ob[1].iColumn < 0 || ob[1].iColumn == t->alias) && !ob[1].desc));
    /* LIMIT (and OFFSET) for k: the first rows SQLite keeps are then the best ones. */
    if (limit >= 0 && !has_k && all_taken && (o == 0 || info->orderByConsumed)) {
      int at[2] = {limit, offset};
      for (int j = 0; j < 2 && at[j] >= 0; j++) {
        info->aConstraintUsage[at[j]].argvIndex = ++n;
        sqlite3_snprintf(VX_TOKEN + 1, plan + VX_TOKEN * (n - 1), "%c00=b", j ? 'O' : 'L');
      }
    }
    info->idxNum = 1;
    info->estimatedCost = 10.0 + VX_COND_COST * conds;
    info->estimatedRows = 10;
  } else {
    double scale = 1.0;
    for (int col = 0; col <= VX_K(t); col++) {
      if ((col == t->vec || col >= VX_SCORE(t)) &&
          (info->colUsed & ((sqlite3_uint64)1 << (col < 63 ? col : 63))))
        scale = VX_SCAN_FACTOR;
    }
    if (rowid_eq) {
      info->estimatedCost = 10.0 * scale;
      info->estimatedRows = 1;
      info->idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
    } else {
      info->estimatedCost = (100.0 + 4.0 * rows) * scale;
      info->estimatedRows = (sqlite3_int64)rows + 1;
    }
  }
  info->idxStr = plan;
  info->needToFreeIdxStr = 1;
  return SQLITE_OK;
}

/*
** match(Q, VECTOR): what `VECTOR match Q` calls where no vector_index plan
** takes it (under OR or NOT, on another column): an error, never an answer.
** SQLite's own stand-in (sqlite3_overload_function) says the same but is not
** INNOCUOUS, so a view holding a k-nearest query failed under pragma
** trusted_schema = 0 ("unsafe use of match()"); this one reads and changes
** nothing, so it is.
*/
#define VX_MATCH_STANDIN "unable to use function MATCH in the requested context"

static void match_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc, (void)argv;
  sqlite3_result_error(ctx, "match(): a vector_index table answers MATCH on its vector column"
                       " only as a condition of the WHERE clause joined by AND (not under OR"
                       " or NOT)", -1);
}

/* Registers match() where the connection has none or SQLite's stand-in, never over another. */
static int register_match(sqlite3 *db) {
  sqlite3_stmt *st = 0;
  int rc = sqlite3_prepare_v2(db, "select 0 match 0", -1, &st, 0), ours = rc != SQLITE_OK;
  if (st) ours = sqlite3_step(st) == SQLITE_ERROR && !strcmp(sqlite3_errmsg(db), VX_MATCH_STANDIN);
  sqlite3_finalize(st);
  if (!ours) return SQLITE_OK;
  return sqlite3_create_function_v2(db, "match", 2, SQLITE_UTF8 | SQLITE_INNOCUOUS, 0, match_func,
                                    0, 0, 0);
}

/* Values to bind, in order; copies, because IN lists' values do not outlive their step. */
typedef struct Binds {
  sqlite3_value **v;
  int n, cap;
} Binds;

static int binds_add(Binds *b, sqlite3_value *v) {
  if (b->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 16;
    sqlite3_value **grown = sqlite3_realloc64(b->v, sizeof(*grown) * (sqlite3_uint64)cap);
    if (!grown) return SQLITE_NOMEM;
    b->v = grown, b->cap = cap;
  }
  if (!(b->v[b->n] = sqlite3_value_dup(v))) return SQLITE_NOMEM;
  b->n++;
  return SQLITE_OK;
}

static void binds_free(Binds *b) {
  free_values(b->v, b->n);
  sqlite3_free(b->v);
  memset(b, 0, sizeof(*b));
}

/* Appends " and <column> <op>" for a token, and its values to b. */
static int add_cond(sqlite3_str *sql, Binds *b, const char *column, char op, char coll,
                    sqlite3_value *arg) {
  static const char *const colls[] = {"", " collate nocase", " collate rtrim"};
  const char *c = coll == 'n' ? colls[1] : coll == 'r' ? colls[2] : colls[0];
  if (op == 'I') {
    sqlite3_str_appendf(sql, " and %s%s in (", column, c);
    sqlite3_value *v;
    int rc = sqlite3_vtab_in_first(arg, &v), first = 1;
    for (; rc == SQLITE_OK && v; rc = sqlite3_vtab_in_next(arg, &v)) {
      sqlite3_str_appendall(sql, first ? "?" : ", ?");
      first = 0;
      if ((rc = binds_add(b, v)) != SQLITE_OK) return rc;
    }
    sqlite3_str_appendall(sql, ")");
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
  }
  sqlite3_str_appendf(sql, " and %s%s %s", column, c, op_sql(op));
  return op == '0' || op == '1' ? SQLITE_OK : binds_add(b, arg);
}

/* Prepares sql (consumed) with the values b; NULL after setting the error. */
static sqlite3_stmt *prepare_bound(VxTab *t, sqlite3_str *sql, Binds *b, int *rc) {
  char *text = sqlite3_str_finish(sql);
  sqlite3_stmt *st = 0;
  *rc = text ? sqlite3_prepare_v2(t->db, text, -1, &st, 0) : SQLITE_NOMEM;
  sqlite3_free(text);
  if (*rc != SQLITE_OK) {
    *rc = vx_sql_fail(t, *rc);
    return 0;
  }
  for (int i = 0; i < b->n; i++) sqlite3_bind_value(st, i + 1, b->v[i]);
  return st;
}

/* The columns of a row as the cursors read them: see row_sql. */
enum { RC_ROWID, RC_BLOCK, RC_SLOT, RC_DIMS, RC_CAPACITY, RC_COUNT, RC_PARTS };

static sqlite3_str *row_sql(VxTab *t) {
  sqlite3_str *s = sqlite3_str_new(0);
  sqlite3_str_appendall(s, "select r.rowid, r.block, r.slot, b.dims, b.capacity, b.count");
  append_cols(s, "b.", 'p', t->npart, 1);
  append_cols(s, "r.", 'm', t->nmeta, 1);
  sqlite3_str_appendf(s, " from \"%w\".\"%w_rowids\" r left join \"%w\".\"%w_blocks\" b"
                         " on b.id = r.block where 1", t->schema, t->name, t->schema, t->name);
  return s;
}

/*
** A row that row_sql's statement st stepped to (rc, sqlite3_step's result) is
** in a block that exists, in one of its count slots: a scan meets a block
** deleted, or a count lowered, as damage instead of skipping or adding rows.
*/
static int row_in_block(VxTab *t, sqlite3_stmt *st, int rc) {
  if (rc != SQLITE_ROW) return rc == SQLITE_DONE ? SQLITE_OK : vx_sql_fail(t, rc);
  int64_t rowid = sqlite3_column_int64(st, RC_ROWID), block = sqlite3_column_int64(st, RC_BLOCK);
  if (sqlite3_column_type(st, RC_DIMS) == SQLITE_NULL) {
    return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: row %lld is in block %lld, which is missing",
                   t->name, rowid, block);
  }
  int64_t slot = sqlite3_column_int64(st, RC_SLOT), count = sqlite3_column_int64(st, RC_COUNT);
  if ((rc = vx_check_block(t, block, st, RC_DIMS, RC_CAPACITY, RC_COUNT))) return rc;
  if (sqlite3_column_type(st, RC_SLOT) == SQLITE_INTEGER && slot >= 0 && slot < count) return SQLITE_OK;
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: row %lld is in its slot"
                 " %lld, not 0 to %lld", t->name, block, rowid, slot, count - 1);
}

typedef struct VxCur {
  sqlite3_vtab_cursor base;
  int knn;
  Hit *hits; /* k-nearest: the rows, best first */
  int64_t nhits, i, k;
  sqlite3_stmt *rows; /* a scan's rows; for k-nearest, the row of hits[at] */
  int64_t at;
  int eof;
} VxCur;

/* A row of a block's records, for the rows selected by rowid or metadata. */
typedef struct Slot {
  int64_t block, slot;
} Slot;

static int cmp_slot(const void *a, const void *b) {
  const Slot *x = a, *y = b;
  if (x->block != y->block) return x->block < y->block ? -1 : 1;
  return (x->slot > y->slot) - (x->slot < y->slot);
}

/* Reads a rowid value with the rowid's integer affinity; 0 when it cannot be a rowid. */
static int as_rowid(sqlite3_value *v, int64_t *out) {
  int type = sqlite3_value_numeric_type(v);
  if (type == SQLITE_INTEGER) {
    *out = sqlite3_value_int64(v);
    return 1;
  }
  if (type == SQLITE_FLOAT) {
    double x = sqlite3_value_double(v);
    if (x >= -9223372036854775808.0 && x < 9223372036854775808.0 && x == (double)(int64_t)x) {
      *out = (int64_t)x;
      return 1;
    }
  }
  return 0;
}

/* Everything a k-nearest query is told, read from xFilter's arguments. */
/*
** A condition on a numeric metadata column (num, its number) or on the rowid
** (num -1) with numbers or NULL, tested on the block's own copy of the values
** (block_bytes) during the scan: a few bytes a row, where asking T_rowids
** would step its index row by row.
*/
typedef struct NumConst {
  int type; /* SQLITE_INTEGER, SQLITE_FLOAT or SQLITE_NULL */
  int64_t i;
  double r;
} NumConst;

typedef struct NumFilter {
  int num, is_int;
  char op; /* as in the plan: '=', '>', ..., '0' IS NULL, '1' IS NOT NULL, 'I' IN */
  int n;
  NumConst *v;
} NumFilter;

/* x compared with y, exactly, as SQLite compares an integer with a real. */
static int int_real_cmp(int64_t x, double y) {
  if (y < -9223372036854775808.0) return 1;
  if (y >= 9223372036854775808.0) return -1;
  int64_t t = (int64_t)y;
  if (x != t) return x < t ? -1 : 1;
  double s = (double)x;
  return (s > y) - (s < y);
}

static int num_cmp(int is_int, int64_t i, double r, const NumConst *c) {
  if (is_int) return c->type == SQLITE_INTEGER ? (i > c->i) - (i < c->i) : int_real_cmp(i, c->r);
  return c->type == SQLITE_FLOAT ? (r > c->r) - (r < c->r) : -int_real_cmp(c->i, r);
}

/* Whether a value (null, or i or r by the column's type) passes the condition, as SQL has it. */
static int num_pass(const NumFilter *f, int null, int64_t i, double r) {
  if (f->op == '0') return null;
  if (f->op == '1') return !null;
  if (f->op == 'I') {
    for (int j = 0; j < f->n && !null; j++) {
      if (f->v[j].type != SQLITE_NULL && num_cmp(f->is_int, i, r, &f->v[j]) == 0) return 1;
    }
    return 0;
  }
  const NumConst *c = &f->v[0];
  if (f->op == 'i') return c->type == SQLITE_NULL ? null : !null && num_cmp(f->is_int, i, r, c) == 0;
  if (f->op == 'n') return c->type == SQLITE_NULL ? !null : null || num_cmp(f->is_int, i, r, c) != 0;
  if (null || c->type == SQLITE_NULL) return 0;
  int cmp = num_cmp(f->is_int, i, r, c);
  switch (f->op) {
    case '=': return cmp == 0;
    case '>': return cmp > 0;
    case '{': return cmp <= 0;
    case '<': return cmp < 0;
    case '}': return cmp >= 0;
    default: return cmp != 0; /* '!' */
  }
}

/*
** ok[s] &= whether value s passes "op c", for the count values at vals, one
** every STEP bytes: loops the compiler can vectorise, for the common case of
** a constant of the column's own type (NULL flags are applied apart).
*/
#define HS_PASS_LOOP(T, STEP, CMP)                  \
  for (int64_t s = 0; s < count; s++) {             \
    T x;                                            \
    memcpy(&x, vals + s * (STEP), sizeof(x));       \
    ok[s] &= (uint8_t)(x CMP c);                    \
  }
#define HS_PASS_OPS(T, STEP)                           \
  switch (op) {                                        \
    case '=': HS_PASS_LOOP(T, STEP, ==) break;         \
    case '>': HS_PASS_LOOP(T, STEP, >) break;          \
    case '{': HS_PASS_LOOP(T, STEP, <=) break;         \
    case '<': HS_PASS_LOOP(T, STEP, <) break;          \
    case '}': HS_PASS_LOOP(T, STEP, >=) break;         \
    default: HS_PASS_LOOP(T, STEP, !=) break;          \
  }

static void pass_i64(uint8_t *ok, const uint8_t *vals, int64_t count, char op, int64_t c) {
  HS_PASS_OPS(int64_t, 8)
}

static void pass_f64(uint8_t *ok, const uint8_t *vals, int64_t count, char op, double c) {
  HS_PASS_OPS(double, 8)
}

/* The same on the records' rowids (one every step bytes). */
static void pass_ids(uint8_t *ok, const uint8_t *vals, int64_t step, int64_t count, char op,
                     int64_t c) {
  HS_PASS_OPS(int64_t, step)
}

/*
** The slots of a block's data (buf, for cap rows of d dimensions, count of them
** in use) that pass every numeric condition, in order, into keep: of the listed
** slots `in` (nin of them), or of all. Returns how many.
*/
static int64_t block_pass(const NumFilter *f, int nf, const uint8_t *buf, int64_t cap,
                          int64_t count, int64_t d, const int64_t *in, int64_t nin,
                          int64_t *keep) {
  uint8_t ok[HS_BLOCK_ROWS];
  memset(ok, 1, (size_t)count);
  for (int j = 0; j < nf; j++) {  /* the values, all at once rather than miss by miss */
    if (f[j].num < 0) continue;
    prefetch(buf + num_offset(cap, d, f[j].num), 8 * count);
    prefetch(buf + num_offset(cap, d, f[j].num) + 8 * cap, count);
  }
  for (int j = 0; j < nf; j++) {
    const NumFilter *g = &f[j];
    const uint8_t *vals = g->num < 0 ? buf : buf + num_offset(cap, d, g->num);
    const uint8_t *nul = g->num < 0 ? 0 : vals + 8 * cap;
    int64_t step = g->num < 0 ? rec_stride(d) : 8;
    const NumConst *c = g->n ? &g->v[0] : 0;
    int simple = strchr("=><{}!", g->op) && c && c->type != SQLITE_NULL;
    if (simple && g->num < 0 && c->type == SQLITE_INTEGER) {
      pass_ids(ok, vals, step, count, g->op, c->i);
    } else if (simple && (g->is_int ? c->type == SQLITE_INTEGER : c->type == SQLITE_FLOAT)) {
      if (g->is_int) pass_i64(ok, vals, count, g->op, c->i);
      else pass_f64(ok, vals, count, g->op, c->r);
      for (int64_t s = 0; s < count; s++) ok[s] &= (uint8_t)!nul[s];
    } else {
      for (int64_t s = 0; s < count; s++) {
        if (!ok[s]) continue;
        int64_t i = 0;
        double r = 0;
        if (g->is_int) memcpy(&i, vals + s * step, 8);
        else memcpy(&r, vals + s * step, 8);
        ok[s] = (uint8_t)num_pass(g, nul && nul[s], i, r);
      }
    }
  }
  int64_t n = 0;
  if (in) {
    for (int64_t i = 0; i < nin; i++) keep[n] = in[i], n += ok[in[i]];
  } else {
    for (int64_t s = 0; s < count; s++) keep[n] = s, n += ok[s];
  }
  return n;
}

typedef struct KnnArgs {
  Vec q;
  int64_t k, limit, offset;
  int64_t given_k; /* k = N's N, the k column's value; 0 without one */
  int all;         /* no k: every row the conditions select, best first */
  int none;        /* no row can pass: LIMIT 0, or k = 3 and k = 4 (as SQL has it) */
  int has_set;  /* rowid = or IN: only the rows in `set`, which every such condition lists */
  I64Map set;
  sqlite3_str *blocks, *rows; /* rows: NULL unless a condition SQL tests on T_rowids */
  Binds bblocks, brows;
  NumFilter nf[2 * HS_MAX_FILTERS];
  int nnf;
} KnnArgs;

/* A number or NULL, which a NumFilter can hold; 0 for text or a blob. */
static int num_const(sqlite3_value *v, NumConst *out) {
  out->type = sqlite3_value_type(v);
  out->i = sqlite3_value_int64(v);
  out->r = sqlite3_value_double(v);
  return out->type == SQLITE_INTEGER || out->type == SQLITE_FLOAT || out->type == SQLITE_NULL;
}

/*
** Makes a NumFilter of the condition "op v" on numeric column num (-1: the
** rowid); 0 when its values are not all numbers or NULL (then SQL tests it).
*/
static int num_filter(KnnArgs *a, int num, int is_int, char op, sqlite3_value *v, int *rc) {
  if (op == 'l' || op == 'g' || a->nnf == 2 * HS_MAX_FILTERS) return 0;
  NumFilter *f = &a->nf[a->nnf];
  memset(f, 0, sizeof(*f));
  f->num = num, f->is_int = is_int, f->op = op;
  int n = 0, cap = 0, ok = 1;
  if (op == 'I') {
    sqlite3_value *x;
    for (*rc = sqlite3_vtab_in_first(v, &x); *rc == SQLITE_OK && x && ok;
         *rc = sqlite3_vtab_in_next(v, &x)) {
      if (n == cap) {
        cap = cap ? 2 * cap : 16;
        NumConst *grown = sqlite3_realloc64(f->v, sizeof(NumConst) * (sqlite3_uint64)cap);
        if (!grown) {
          *rc = SQLITE_NOMEM;
          break;
        }
        f->v = grown;
      }
      ok = num_const(x, &f->v[n++]);
    }
    if (*rc == SQLITE_DONE) *rc = SQLITE_OK;
  } else if (op != '0' && op != '1') {
    f->v = sqlite3_malloc(sizeof(NumConst));
    if (!f->v) *rc = SQLITE_NOMEM;
    else ok = num_const(v, &f->v[n++]);
  }
  f->n = n;
  if (*rc != SQLITE_OK || !ok) {
    sqlite3_free(f->v);
    return 0;
  }
  a->nnf++;
  return 1;
}

static void knn_args_free(KnnArgs *a) {
  for (int i = 0; i < a->nnf; i++) sqlite3_free(a->nf[i].v);
  vec_free(&a->q);
  map_free(&a->set);
  sqlite3_free(sqlite3_str_finish(a->blocks));
  sqlite3_free(sqlite3_str_finish(a->rows));
  binds_free(&a->bblocks);
  binds_free(&a->brows);
}

static int knn_args(VxTab *t, const char *plan, int argc, sqlite3_value **argv, KnnArgs *a) {
  memset(a, 0, sizeof(*a));
  a->limit = a->offset = -1;
  a->blocks = sqlite3_str_new(0);
  sqlite3_str_appendf(a->blocks, "select id, dims, count, nonce, capacity from \"%w\".\"%w_blocks\""
                      " where 1",
                      t->schema, t->name);
  int rc = SQLITE_OK;
  for (int i = 0; i < argc && rc == SQLITE_OK; i++) {
    const char *tok = plan + VX_TOKEN * i;
    char role = tok[0], op = tok[3], coll = tok[4], column[16];
    int col = (int)strtol((char[]){tok[1], tok[2], 0}, 0, 16);
    sqlite3_value *v = argv[i];
    switch (role) {
      case 'M': {
        char *err = parse_vector(v, t->name, "the MATCH vector", &a->q);
        if (err) rc = vx_take(t, err);
        break;
      }
      case 'K':
      case 'L':
      case 'O': {
        int64_t x = sqlite3_value_type(v) == SQLITE_INTEGER ? sqlite3_value_int64(v) : -1;
        if (role == 'K' && op == 'I') {
          rc = vx_fail(t, SQLITE_ERROR, "%s: k is one number (k = N), not a list", t->name);
        } else if (role == 'K' && sqlite3_value_type(v) != SQLITE_INTEGER) {
          rc = vx_fail(t, SQLITE_ERROR, "%s: k must be an integer from 1 to %d, got %s", t->name,
                       HS_MAX_K, type_name(v));
        } else if (role == 'K' && (x < 1 || x > HS_MAX_K)) {
          rc = vx_fail(t, SQLITE_ERROR, "%s: k must be an integer from 1 to %d, got %lld",
                       t->name, HS_MAX_K, x);
        } else if (role == 'K') {
          if (a->given_k && a->given_k != x) a->none = 1; /* the k column cannot be both */
          a->given_k = x;
        } else if (role == 'L') {
          a->limit = x;
        } else {
          a->offset = x;
        }
        break;
      }
      case 'R':
        if (op == '=' || op == 'I') { /* the rows every such condition lists */
          I64Map one = {0};
          int64_t id;
          if (op == '=') {
            if (as_rowid(v, &id) && !map_put(&one, id, 0)) rc = SQLITE_NOMEM;
          } else {
            sqlite3_value *x;
            for (rc = sqlite3_vtab_in_first(v, &x); rc == SQLITE_OK && x;
                 rc = sqlite3_vtab_in_next(v, &x)) {
              if (as_rowid(x, &id) && !map_put(&one, id, 0)) rc = SQLITE_NOMEM;
            }
            if (rc == SQLITE_DONE) rc = SQLITE_OK;
          }
          if (rc == SQLITE_OK && a->has_set) {
            I64Map both = {0};
            for (int64_t j = 0; j < a->set.cap && rc == SQLITE_OK; j++) {
              if (a->set.used[j] && map_find(&one, a->set.keys[j], 0) &&
                  !map_put(&both, a->set.keys[j], 0))
                rc = SQLITE_NOMEM;
            }
            map_free(&one);
            one = both;
          }
          map_free(&a->set);
          a->set = one;
          a->has_set = 1;
          break;
        }
        if (num_filter(a, -1, 1, op, v, &rc) || rc) break; /* tested on the records' ids */
        /* fall through - SQL tests the rest, as it does metadata */
      case 'X':
        if (role == 'X' && t->col[col].num >= 0 &&
            (num_filter(a, t->col[col].num, t->col[col].type == VX_INTEGER, op, v, &rc) || rc))
          break;
        if (!a->rows) {
          a->rows = sqlite3_str_new(0);
          sqlite3_str_appendf(a->rows, "select block, slot from \"%w\".\"%w_rowids\" where 1",
                              t->schema, t->name);
        }
        if (role == 'R') sqlite3_snprintf(sizeof(column), column, "rowid");
        else sqlite3_snprintf(sizeof(column), column, "m%d", t->col[col].shadow);
        rc = add_cond(a->rows, &a->brows, column, op, coll, v);
        break;
      case 'P':
        sqlite3_snprintf(sizeof(column), column, "p%d", t->col[col].shadow);
        rc = add_cond(a->blocks, &a->bblocks, column, op, coll, v);
        break;
    }
  }
  if (rc) return rc;
  /* Without k, LIMIT's rows (and OFFSET's) when the plan took it for k, else every row. */
  int64_t skip = a->offset > 0 ? a->offset : 0;
  if (a->given_k) a->k = a->given_k;
  else if (a->limit == 0) a->none = 1;
  else if (a->limit > 0 && a->limit <= HS_MAX_K && skip <= HS_MAX_K) a->k = a->limit + skip;
  else a->all = 1;
  sqlite3_str_appendall(a->blocks, " order by id");
  return SQLITE_OK;
}

/* Steps a statement of (block, slot) rows into a sorted array. */
static int collect_slots(VxTab *t, sqlite3_stmt *st, Slot **out, int64_t *n) {
  int64_t cap = 0;
  int rc;
  *out = 0, *n = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (*n == cap) {
      cap = cap ? 2 * cap : 256;
      Slot *grown = realloc(*out, sizeof(Slot) * (size_t)cap);
      if (!grown) return SQLITE_NOMEM;
      *out = grown;
    }
    (*out)[*n].block = sqlite3_column_int64(st, 0);
    (*out)[*n].slot = sqlite3_column_int64(st, 1);
    (*n)++;
  }
  if (rc != SQLITE_DONE) return vx_sql_fail(t, rc);
  if (*n > 1) qsort(*out, (size_t)*n, sizeof(Slot), cmp_slot);
  return SQLITE_OK;
}

/* What a query reads of block r: its rows' records, and its numeric metadata if it has any;
** in format 3 the whole row, which its checksum covers. */
static int64_t read_bytes(const VxTab *t, const BlockRef *r) {
  return t->nnum || t->format >= 3 ? block_bytes(t, r->capacity, r->dims)
                                   : r->count * rec_stride(r->dims);
}

/* A block's T_codes row is exactly as long as its capacity and dims make it. */
static int vx_codes_length(VxTab *t, sqlite3_blob *h, const BlockRef *r) {
  int64_t want = block_bytes(t, r->capacity, r->dims);
  if (sqlite3_blob_bytes(h) == want) return SQLITE_OK;
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: its codes row has %d bytes,"
                 " not %lld", t->name, r->id, sqlite3_blob_bytes(h), want);
}

/* Format 3: the `bytes` of block r's T_codes row at buf (all of it) add up to its checksum. */
static int vx_verify(VxTab *t, const BlockRef *r, const uint8_t *buf, int64_t bytes) {
  if (t->format < 3) return SQLITE_OK;
  BlockRef row;
  uint64_t parts;
  int found, rc = vx_block_ref(t, r->id, &row, &parts, &found);
  if (rc) return rc;
  if (found && (uint64_t)r->nonce ==
                   block_head(r->id, r->dims, r->capacity, r->count, parts) + codes_sum(buf, bytes, 0))
    return SQLITE_OK;
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: its records, count or"
                 " partition do not match its checksum", t->name, r->id);
}

/*
** The records of block r: from the cache, or read now.  A block is kept in the
** cache the second time a query reads it at the same nonce (then *fresh is set
** and the caller keeps buf once it has scanned it); the first time, it is read
** into a scratch buffer.  So a connection that asks once, as every command-line
** process does, does not pay to fill a cache (most of that is the page faults
** of new memory), and a block that changes at every write is not cached at all.
*/
static int block_records(VxTab *t, const BlockRef *r, sqlite3_blob **h, uint8_t **buf,
                         int *fresh) {
  Cache *c = &t->cache;
  CBlock *e = cache_find(c, r->id);
  *fresh = 0;
  if (e && e->nonce == r->nonce && e->count == r->count && e->dims == r->dims &&
      e->capacity == r->capacity) {
    e->used = c->clock;
    *buf = e->buf;
    return SQLITE_OK;
  }
  int64_t bytes = read_bytes(t, r), seen;
  int keep = map_find(&c->seen, r->id, &seen) && seen == r->nonce;
  if (keep) {
    *buf = pool_get(&c->pool, (size_t)bytes, r->count == vx_layout(t, r->dims)->rows);
  } else {
    if ((size_t)bytes > c->scratch_cap) {
      free(c->scratch);
      c->scratch_cap = 0;
      if ((c->scratch = malloc((size_t)bytes))) c->scratch_cap = (size_t)bytes;
    }
    *buf = c->scratch;
    if (*buf && !map_put(&c->seen, r->id, r->nonce)) *buf = 0;
  }
  if (!*buf) return SQLITE_NOMEM;
  int rc = vx_blob(t, h, "codes", r->id, 0);
  if (rc == SQLITE_OK) rc = vx_codes_length(t, *h, r);
  if (rc == SQLITE_OK) rc = vx_blob_read(t, *h, *buf, bytes, 0, "codes", r->id);
  if (rc == SQLITE_OK) rc = vx_verify(t, r, *buf, bytes);
  if (rc && keep) pool_put(&c->pool, *buf);
  if (rc) *buf = 0;
  *fresh = rc == SQLITE_OK && keep;
  return rc;
}

/*
** A row about to be scored, c, and its vector v, read from its group: v is
** finite and is the vector its record was made from (rec_build of v and c's
** id gives the record the first pass read, which its block's checksum
** covered): so no score is computed from bytes that are not the row's
** vector.  rec: room for one record.
*/
static int vx_check_vector(VxTab *t, const Cand *c, const float *v, int64_t d, uint8_t *rec) {
  if (hs_first_nonfinite(v, d) >= 0) {
    return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: the vector of row %lld"
                   " is not finite", t->name, c->block, c->id);
  }
  rec_build(rec, c->id, v, d);
  if (codes_sum(rec, rec_stride(d), 0) == c->print) return SQLITE_OK;
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: the record of row %lld"
                 " does not match its vector", t->name, c->block, c->id);
}

/* A row answered, c: T_rowids holds its rowid where c found it, so no rowid is answered that
** the table does not hold. */
static int vx_check_place(VxTab *t, const Cand *c) {
  int64_t block, slot;
  int found, rc = vx_find(t, c->id, &block, &slot, &found);
  if (rc || (found && block == c->block && slot == c->slot)) return rc;
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: row %lld is in its slot"
                 " %lld, its location says otherwise", t->name, c->block, c->id, c->slot);
}

/*
** A query that found no block: none may be found because the partition has
** none, but a table whose rows have locations has blocks (delete from T_blocks).
*/
static int vx_check_blockless(VxTab *t) {
  int64_t lost = 0;
  char *sql = sqlite3_mprintf("select not exists (select 1 from \"%w\".\"%w_blocks\") and"
                              " exists (select 1 from \"%w\".\"%w_rowids\")",
                              t->schema, t->name, t->schema, t->name);
  int rc = vx_int(t->db, sql, &lost);
  sqlite3_free(sql);
  if (rc) return vx_sql_fail(t, rc);
  if (!lost) return SQLITE_OK;
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: its rows have locations, but it has no block",
                 t->name);
}

/*
** The candidates a block's scan added, from `first` on: those below the bar
** now are dropped (it only rises), and each other one gets the fingerprint of
** its record while the block's records are at hand (buf).
*/
static void knn_prints(Knn *s, int64_t first, const uint8_t *buf) {
  double bar = heap_bar(s->lower, s->nlower, s->k);
  int64_t m = first, stride = rec_stride(s->d);
  for (int64_t i = first; i < s->ncand; i++) {
    if (s->cand[i].upper < bar) continue;
    s->cand[m] = s->cand[i];
    s->cand[m++].print = codes_sum(buf + s->cand[i].slot * stride, stride, 0);
  }
  s->ncand = m;
}

/* A k-nearest query: the k rows most like a->q among those the conditions select. */
static int vx_knn(VxTab *t, VxCur *cur, KnnArgs *a) {
  int64_t d = a->q.d;
  if (t->dims && d != t->dims) {
    return vx_fail(t, SQLITE_ERROR, "%s: the MATCH vector has %lld dimensions, the table has %lld",
                   t->name, d, t->dims);
  }
  float *q = sqlite3_malloc64(sizeof(float) * (sqlite3_uint64)d * 2);
  if (!q) return SQLITE_NOMEM;
  memcpy(q, a->q.v, sizeof(float) * (size_t)d);
  float *v = q + d;
  Knn s = {0};
  BlockRef *refs = 0;
  Slot *slots = 0;
  int64_t nrefs = 0, nslots = 0, cap = 0, *list = 0, total = 0;
  sqlite3_blob *h = 0;
  int rc = SQLITE_OK, listed = 0;
  sqlite3_stmt *st = prepare_bound(t, a->blocks, &a->bblocks, &rc);
  a->blocks = 0;
  while (st && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (nrefs == cap) {
      cap = cap ? 2 * cap : 256;
      BlockRef *grown = realloc(refs, sizeof(BlockRef) * (size_t)cap);
      if (!grown) {
        rc = SQLITE_NOMEM;
        break;
      }
      refs = grown;
    }
    BlockRef *r = &refs[nrefs++];
    r->id = sqlite3_column_int64(st, 0);
    r->dims = sqlite3_column_int64(st, 1);
    r->count = sqlite3_column_int64(st, 2);
    r->nonce = sqlite3_column_int64(st, 3);
    r->capacity = sqlite3_column_int64(st, 4);
    if ((rc = vx_check_block(t, r->id, st, 1, 4, 2))) break;
    total += r->count;
  }
  if (rc == SQLITE_DONE) rc = SQLITE_OK;
  else if (rc != SQLITE_OK && rc != SQLITE_NOMEM && !t->base.zErrMsg) rc = vx_sql_fail(t, rc);
  sqlite3_finalize(st);
  st = 0;
  if (rc == SQLITE_OK && nrefs == 0) rc = vx_check_blockless(t);
  if (a->all) a->k = total > 0 ? total : 1;
  if (rc == SQLITE_OK && !knn_init(&s, q, d, a->k)) rc = SQLITE_NOMEM;
  /* Which rows: a metadata or rowid range condition lists them; a short rowid set is looked up. */
  if (rc == SQLITE_OK && a->rows) {
    listed = 1;
    st = prepare_bound(t, a->rows, &a->brows, &rc);
    a->rows = 0;
    if (st) rc = collect_slots(t, st, &slots, &nslots);
    sqlite3_finalize(st);
  } else if (rc == SQLITE_OK && a->has_set && a->set.n * 16 <= total) {
    listed = 1;
    slots = malloc(sizeof(Slot) * (size_t)(a->set.n + 1));
    if (!slots) rc = SQLITE_NOMEM;
    for (int64_t i = 0; i < a->set.cap && rc == SQLITE_OK; i++) {
      int found;
      if (!a->set.used[i]) continue;
      rc = vx_find(t, a->set.keys[i], &slots[nslots].block, &slots[nslots].slot, &found);
      nslots += found;
    }
    if (rc == SQLITE_OK && nslots > 1) qsort(slots, (size_t)nslots, sizeof(Slot), cmp_slot);
    a->has_set = 0; /* the lookups did its work */
  }
  if (rc == SQLITE_OK && listed) {
    list = malloc(sizeof(int64_t) * (size_t)(nslots + 1));
    if (!list) rc = SQLITE_NOMEM;
  }
  /* The first pass, block by block. */
  t->cache.clock++;
  int64_t j = 0; /* the next entry of slots */
  for (int64_t b = 0; b < nrefs && rc == SQLITE_OK; b++) {
    const BlockRef *r = &refs[b];
    int64_t nlist = 0;
    if (listed) {
      while (j < nslots && slots[j].block < r->id) j++;
      for (; j < nslots && slots[j].block == r->id; j++) {
        if (slots[j].slot < 0 || slots[j].slot >= r->count) {
          rc = vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: a row is in its slot"
                       " %lld, not 0 to %lld", t->name, r->id, slots[j].slot, r->count - 1);
          break;
        }
        list[nlist++] = slots[j].slot;
      }
      if (rc || nlist == 0) continue;
    }
    if (r->count == 0) { /* a block that empties is deleted */
      rc = vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: it holds 0 rows in room"
                   " for %lld", t->name, r->id, r->capacity);
      break;
    }
    uint8_t *buf;
    int fresh;
    if ((rc = block_records(t, r, &h, &buf, &fresh))) break; /* damage first, then the query's */
    if (r->dims != d) {
      if (fresh) pool_put(&t->cache.pool, buf); /* read for the cache, which does not take it */
      rc = vx_fail(t, SQLITE_ERROR, "%s: the MATCH vector has %lld dimensions, the vectors it is"
                   " compared with have %lld", t->name, d, r->dims);
      break;
    }
    const int64_t *scan = listed ? list : 0;
    int64_t kept[HS_BLOCK_ROWS], nkept = 0;
    if (a->nnf) { /* the numeric conditions, on the block's own copy of the values */
      nkept = block_pass(a->nf, a->nnf, buf, r->capacity, r->count, d, scan, nlist, kept);
      scan = kept, nlist = nkept;
    }
    int64_t first = s.ncand;
    if (!(scan && nlist == 0) &&
        !knn_scan(&s, buf, r->count, r->id, scan, nlist, a->has_set ? &a->set : 0))
      rc = SQLITE_NOMEM;
    knn_prints(&s, first, buf);
    if (fresh) cache_keep(&t->cache, r, (size_t)read_bytes(t, r), buf);
  }
  vx_blob_close(&h);
  /* Exact rescoring, best upper bound first, until none can reach the k-th best.  Without k
  ** every row is rescored: in the order they are stored, each group's row opened once. */
  if (rc == SQLITE_OK) {
    if (a->all && s.ncand > 1) qsort(s.cand, (size_t)s.ncand, sizeof(Cand), cmp_place);
    else if (!a->all) knn_candidates(&s);
    cur->hits = sqlite3_malloc64(sizeof(Hit) * (sqlite3_uint64)a->k);
    if (!cur->hits) rc = SQLITE_NOMEM;
  }
  Dot2Fn fn = dot2();
  const Layout *l = vx_layout(t, d);
  int64_t open = -1; /* the group h is open on */
  uint8_t *rec = rc == SQLITE_OK ? malloc((size_t)rec_stride(d)) : 0;
  I64Map scored = {0}; /* id -> its candidate, for the hits' locations */
  if (rc == SQLITE_OK && !rec) rc = SQLITE_NOMEM;
  for (int64_t i = 0; i < s.ncand && rc == SQLITE_OK; i++) {
    const Cand *c = &s.cand[i];
    if (c->upper < heap_bar(cur->hits, cur->nhits, a->k)) break;
    int64_t gid = group_id(l, c->block, c->slot);
    if (gid != open && (rc = vx_group(t, &h, gid, d))) break;
    open = gid;
    rc = vx_blob_read(t, h, v, 4 * d, (c->slot % l->group) * 4 * d, "vectors", gid);
    if (rc || (rc = vx_check_vector(t, c, v, d, rec))) break;
    if (!map_put(&scored, c->id, i)) rc = SQLITE_NOMEM;
    double ab, bb;
    fn(q, v, d, &ab, &bb);
    Hit x = {cosine_from(ab, s.qq, bb), c->id};
    heap_push(cur->hits, &cur->nhits, a->k, x);
  }
  vx_blob_close(&h);
  free(rec);
  for (int64_t j = 0; j < cur->nhits && rc == SQLITE_OK; j++) {
    int64_t at = 0;
    map_find(&scored, cur->hits[j].id, &at);
    rc = vx_check_place(t, &s.cand[at]);
  }
  map_free(&scored);
  if (rc == SQLITE_OK) {
    qsort(cur->hits, (size_t)cur->nhits, sizeof(Hit), cmp_hits);
    rc = cache_sweep(t);
  }
  knn_free(&s);
  free(refs);
  free(slots);
  free(list);
  sqlite3_free(q);
  return rc;
}

/* ---- cursors ---- */

static int vx_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out) {
  (void)vt;
  VxCur *c = sqlite3_malloc(sizeof(VxCur));
  if (!c) return SQLITE_NOMEM;
  memset(c, 0, sizeof(*c));
  *out = &c->base;
  return SQLITE_OK;
}

static void cur_reset(VxCur *c) {
  sqlite3_free(c->hits);
  sqlite3_finalize(c->rows);
  c->hits = 0, c->rows = 0;
  c->nhits = c->i = c->k = 0;
  c->at = -1;
  c->eof = 1;
  c->knn = 0;
}

static int vx_close(sqlite3_vtab_cursor *cur) {
  cur_reset((VxCur *)cur);
  sqlite3_free(cur);
  return SQLITE_OK;
}

/* A scan (no MATCH): every row the conditions select, from the shadow tables. */
static int vx_scan(VxTab *t, VxCur *c, const char *plan, int argc, sqlite3_value **argv) {
  sqlite3_str *sql = row_sql(t);
  Binds b = {0};
  int rc = SQLITE_OK;
  for (int i = 0; i < argc && rc == SQLITE_OK; i++) {
    const char *tok = plan + VX_TOKEN * i;
    int col = (int)strtol((char[]){tok[1], tok[2], 0}, 0, 16);
    char column[24];
    if (tok[0] == 'K') {
      rc = vx_fail(t, SQLITE_ERROR, "%s: k = N needs a MATCH vector", t->name);
      break;
    }
    if (tok[0] == 'R') sqlite3_snprintf(sizeof(column), column, "r.rowid");
    else if (tok[0] == 'P') sqlite3_snprintf(sizeof(column), column, "b.p%d", t->col[col].shadow);
    else sqlite3_snprintf(sizeof(column), column, "r.m%d", t->col[col].shadow);
    rc = add_cond(sql, &b, column, tok[3], tok[4], argv[i]);
  }
  if (rc == SQLITE_OK) {
    c->rows = prepare_bound(t, sql, &b, &rc);
    sql = 0;
  }
  sqlite3_free(sqlite3_str_finish(sql));
  binds_free(&b);
  if (rc) return rc;
  rc = sqlite3_step(c->rows);
  c->eof = rc != SQLITE_ROW;
  return row_in_block(t, c->rows, rc);
}

static int vx_filter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr, int argc,
                     sqlite3_value **argv) {
  VxCur *c = (VxCur *)cur;
  VxTab *t = (VxTab *)cur->pVtab;
  cur_reset(c);
  if (t->broken) return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s", t->broken);
  if (t->busy) {
    return vx_fail(t, SQLITE_ERROR, "%s: read again while it is being read or written (a"
                   " trigger or view on its shadow tables?)", t->name);
  }
  t->busy = 1;
  int rc = vx_format(t);
  if (rc == SQLITE_OK) rc = vx_flush(t);
  if (rc == SQLITE_OK && (idxNum & 1)) {
    KnnArgs a;
    rc = knn_args(t, idxStr, argc, argv, &a);
    c->knn = 1;
    c->k = a.given_k;
    if (rc == SQLITE_OK && a.q.v && !a.none) rc = vx_knn(t, c, &a); /* a NULL vector: none */
    knn_args_free(&a);
    c->eof = c->nhits == 0;
  } else if (rc == SQLITE_OK) {
    rc = vx_scan(t, c, idxStr, argc, argv);
  }
  t->busy = 0;
  return rc;
}

static int vx_next(sqlite3_vtab_cursor *cur) {
  VxCur *c = (VxCur *)cur;
  if (c->knn) {
    c->eof = ++c->i >= c->nhits;
    return SQLITE_OK;
  }
  int rc = sqlite3_step(c->rows);
  c->eof = rc != SQLITE_ROW;
  return row_in_block((VxTab *)cur->pVtab, c->rows, rc);
}

static int vx_eof(sqlite3_vtab_cursor *cur) { return ((VxCur *)cur)->eof; }

static int vx_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid) {
  VxCur *c = (VxCur *)cur;
  *rowid = c->knn ? c->hits[c->i].id : sqlite3_column_int64(c->rows, RC_ROWID);
  return SQLITE_OK;
}

/* For a k-nearest row's other columns: positions c->rows on it. */
static int knn_row(VxTab *t, VxCur *c) {
  int rc = SQLITE_OK;
  if (c->at == c->i) return rc;
  if (!c->rows) {
    sqlite3_str *sql = row_sql(t);
    sqlite3_str_appendall(sql, " and r.rowid = ?");
    Binds none = {0};
    if (!(c->rows = prepare_bound(t, sql, &none, &rc))) return rc;
  }
  sqlite3_reset(c->rows);
  sqlite3_bind_int64(c->rows, 1, c->hits[c->i].id);
  rc = sqlite3_step(c->rows);
  if (rc == SQLITE_ROW) {
    c->at = c->i;
    return row_in_block(t, c->rows, rc);
  }
  return rc == SQLITE_DONE ? vx_fail(t, SQLITE_ERROR, "%s: row %lld was deleted while it was read",
                                     t->name, c->hits[c->i].id)
                           : vx_sql_fail(t, rc);
}

static int vx_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  VxCur *c = (VxCur *)cur;
  VxTab *t = (VxTab *)cur->pVtab;
  if (col == VX_SCORE(t)) {
    if (c->knn) sqlite3_result_double(ctx, c->hits[c->i].score);
    return SQLITE_OK;
  }
  if (col == VX_K(t)) { /* k = N's N; NULL without one (LIMIT, or every row) */
    if (c->knn && c->k) sqlite3_result_int64(ctx, c->k);
    return SQLITE_OK;
  }
  if (c->knn && col == t->alias) {
    sqlite3_result_int64(ctx, c->hits[c->i].id);
    return SQLITE_OK;
  }
  if (t->col[col].role == VX_VECTOR && sqlite3_vtab_nochange(ctx)) return SQLITE_OK;
  int rc = c->knn ? knn_row(t, c) : SQLITE_OK;
  if (rc) return rc;
  const VxCol *k = &t->col[col];
  switch (k->role) {
    case VX_ALIAS: sqlite3_result_int64(ctx, sqlite3_column_int64(c->rows, RC_ROWID)); break;
    case VX_PARTITION:
    case VX_METADATA: {
      int at = RC_PARTS + (k->role == VX_PARTITION ? 0 : t->npart) + k->shadow;
      sqlite3_value *v = sqlite3_column_value(c->rows, at);
      if (!fits(k, v)) { /* a shadow row changed behind the table's back */
        return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: %s %lld is damaged: its %s is of type %s,"
                       " not %s", t->name, k->role == VX_PARTITION ? "block" : "row",
                       sqlite3_column_int64(c->rows, k->role == VX_PARTITION ? RC_BLOCK : RC_ROWID),
                       k->name, type_name(v), VX_TYPES[k->type]);
      }
      sqlite3_result_value(ctx, v);
      break;
    }
    default: { /* the vector */
      int64_t dims = sqlite3_column_int64(c->rows, RC_DIMS);
      int64_t block = sqlite3_column_int64(c->rows, RC_BLOCK);
      int64_t slot = sqlite3_column_int64(c->rows, RC_SLOT);
      if ((rc = vx_check_block(t, block, c->rows, RC_DIMS, RC_CAPACITY, RC_COUNT))) return rc;
      BlockRow b = {block, dims, 0, sqlite3_column_int64(c->rows, RC_COUNT)};
      if ((rc = vx_check_slot(t, &b, sqlite3_column_int64(c->rows, RC_ROWID), slot))) return rc;
      float *v = sqlite3_malloc64(sizeof(float) * (sqlite3_uint64)dims);
      sqlite3_blob *h = 0;
      rc = v ? vx_read_vector(t, &h, block, slot, dims, v) : SQLITE_NOMEM;
      vx_blob_close(&h);
      if (rc == SQLITE_OK) {
        sqlite3_result_blob64(ctx, v, sizeof(float) * (sqlite3_uint64)dims, sqlite3_free);
      } else {
        sqlite3_free(v);
      }
      return rc;
    }
  }
  return SQLITE_OK;
}

/* ---- xUpdate ---- */

/*
** Format 1 or 2 becomes 3 in the transaction of the table's first write: every
** block's nonce becomes its checksum (one read of T_codes).  A table with a
** damaged block keeps its format, and its writes random nonces, until it is
** repaired: its queries and integrity_check say what is wrong.
*/
static int vx_upgrade(VxTab *t) {
  char *sql = sqlite3_mprintf("select id, dims, capacity, count from \"%w\".\"%w_blocks\"",
                              t->schema, t->name);
  sqlite3_stmt *st = 0;
  int rc = sql ? sqlite3_prepare_v2(t->db, sql, -1, &st, 0) : SQLITE_NOMEM;
  sqlite3_free(sql);
  BlockRef *refs = 0;
  int64_t n = 0, cap = 0;
  while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    rc = vx_check_block(t, sqlite3_column_int64(st, 0), st, 1, 2, 3);
    if (rc == SQLITE_OK && n == cap) {
      cap = cap ? 2 * cap : 64;
      BlockRef *grown = realloc(refs, sizeof(BlockRef) * (size_t)cap);
      if (grown) refs = grown;
      else rc = SQLITE_NOMEM;
    }
    if (rc == SQLITE_OK) refs[n++].id = sqlite3_column_int64(st, 0);
  }
  if (rc == SQLITE_DONE) rc = SQLITE_OK;
  else if (rc != SQLITE_OK && rc != SQLITE_NOMEM && !t->base.zErrMsg) rc = vx_sql_fail(t, rc);
  sqlite3_finalize(st);
  sqlite3_blob *h = 0;
  uint8_t *buf = 0;
  int64_t bufcap = 0;
  for (int64_t i = 0; i < n && rc == SQLITE_OK; i++) {
    BlockRef *r = &refs[i];
    uint64_t parts;
    int found;
    if ((rc = vx_block_ref(t, r->id, r, &parts, &found))) break;
    int64_t bytes = block_bytes(t, r->capacity, r->dims);
    if (found && (rc = vx_blob(t, &h, "codes", r->id, 0))) break;
    if (!found || sqlite3_blob_bytes(h) != bytes) {
      rc = SQLITE_CORRUPT_VTAB;
      break;
    }
    if (bytes > bufcap) {
      free(buf);
      bufcap = 0;
      if (!(buf = malloc((size_t)bytes))) {
        rc = SQLITE_NOMEM;
        break;
      }
      bufcap = bytes;
    }
    if ((rc = vx_blob_read(t, h, buf, bytes, 0, "codes", r->id))) break;
    r->nonce = (sqlite3_int64)(block_head(r->id, r->dims, r->capacity, r->count, parts) +
                               codes_sum(buf, bytes, 0));
  }
  vx_blob_close(&h);
  free(buf);
  for (int64_t i = 0; i < n && rc == SQLITE_OK; i++) rc = vx_set_nonce(t, refs[i].id, refs[i].nonce);
  free(refs);
  if (rc == SQLITE_OK) {
    rc = vx_exec(t->db, 0, "insert or replace into \"%w\".\"%w_info\"(key, value) values"
                 " ('format', %d)", t->schema, t->name, HS_FORMAT);
    if (rc == SQLITE_OK) t->format = HS_FORMAT;
    else rc = vx_sql_fail(t, rc);
  } else if ((rc & 0xff) == SQLITE_CORRUPT) { /* left as it is */
    sqlite3_free(t->base.zErrMsg);
    t->base.zErrMsg = 0;
    rc = SQLITE_OK;
  }
  return rc;
}

/* A write transaction begins: another connection may have changed the format since. */
static int vx_begin(sqlite3_vtab *vt) {
  VxTab *t = (VxTab *)vt;
  t->format = -1;
  t->upgrade = 1;
  app_clear(t);
  return SQLITE_OK;
}

/* The commit: the rows held are written first. */
static int vx_sync(sqlite3_vtab *vt) {
  return vx_flush((VxTab *)vt);
}

/* SQLite rolls a statement back through xRollbackTo only in tables that have an xSavepoint.
** The rows held are written before a savepoint begins, so that those held after it are
** all its own: what a rollback to it forgets. */
static int vx_savepoint(sqlite3_vtab *vt, int n) {
  (void)n;
  return vx_flush((VxTab *)vt);
}

/* A savepoint ends (a statement's, at the statement's end): its rows are written. */
static int vx_release(sqlite3_vtab *vt, int n) {
  (void)n;
  return vx_flush((VxTab *)vt);
}

/* What was rolled back may have been an upgrade: the format is read again when next needed.
** The rows held are forgotten (their T_rowids rows are rolled back with the rest). */
static int vx_rollback(sqlite3_vtab *vt) {
  VxTab *t = (VxTab *)vt;
  t->format = -1;
  app_clear(t);
  return SQLITE_OK;
}

static int vx_rollback_to(sqlite3_vtab *vt, int n) {
  (void)n;
  return vx_rollback(vt);
}


static int vx_xupdate(sqlite3_vtab *vt, int argc, sqlite3_value **argv, sqlite3_int64 *out) {
  VxTab *t = (VxTab *)vt;
  if (t->broken) return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s", t->broken);
  if (t->busy) {
    return vx_fail(t, SQLITE_ERROR, "%s: written while it is being read or written (a trigger"
                   " or view on its shadow tables?)", t->name);
  }
  t->busy = 1;
  sqlite3_int64 last = sqlite3_last_insert_rowid(t->db); /* block inserts must not change it */
  map_free(&t->pending);
  int rc = vx_format(t);
  if (rc == SQLITE_OK && t->upgrade && t->format < HS_FORMAT) rc = vx_upgrade(t);
  t->upgrade = 0;
  if (rc == SQLITE_OK && (argc == 1 || sqlite3_value_type(argv[0]) != SQLITE_NULL)) {
    rc = vx_flush(t); /* a delete or an update reads rows that may be held */
  }
  if (rc == SQLITE_OK && argc == 1) {
    rc = vx_remove(t, sqlite3_value_int64(argv[0]));
  } else if (rc == SQLITE_OK) {
    sqlite3_value **cols = argv + 2;
    int insert = sqlite3_value_type(argv[0]) == SQLITE_NULL;
    int64_t old = insert ? 0 : sqlite3_value_int64(argv[0]), rowid = 0;
    int given = sqlite3_value_type(argv[1]) != SQLITE_NULL;
    sqlite3_value *alias = t->alias >= 0 ? cols[t->alias] : 0;
    int by_alias = alias && !sqlite3_value_nochange(alias) &&
                   sqlite3_value_type(alias) != SQLITE_NULL &&
                   (insert || sqlite3_value_int64(alias) != old);
    sqlite3_value *id = by_alias ? alias : argv[1];
    if ((given || by_alias) && sqlite3_value_numeric_type(id) != SQLITE_INTEGER) {
      rc = vx_fail(t, SQLITE_MISMATCH, "%s: the rowid must be an integer, got %s", t->name,
                   type_name(id));
    } else if (insert && given && by_alias &&
               sqlite3_value_int64(argv[1]) != sqlite3_value_int64(alias)) {
      rc = vx_fail(t, SQLITE_ERROR, "%s: rowid and %s differ", t->name, t->col[t->alias].name);
    } else if (given || by_alias) {
      rowid = sqlite3_value_int64(id);
    } else if (insert) { /* a new rowid, one past the largest */
      sqlite3_stmt *st = vs(t, VS_MAX_ROWID, &rc);
      if (st && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        sqlite3_int64 max = sqlite3_column_int64(st, 0);
        rc = max == INT64_MAX ? vx_fail(t, SQLITE_FULL, "%s: no rowid is left", t->name)
                              : SQLITE_OK;
        rowid = max + 1;
      } else if (st) {
        rc = vx_sql_fail(t, rc);
      }
      if (st) sqlite3_reset(st);
    }
    for (int i = VX_SCORE(t); i <= VX_K(t) && rc == SQLITE_OK; i++) {
      if (!sqlite3_value_nochange(cols[i]) && sqlite3_value_type(cols[i]) != SQLITE_NULL) {
        rc = vx_fail(t, SQLITE_ERROR, "%s: %s is computed by a MATCH query, not stored", t->name,
                     i == VX_SCORE(t) ? "score" : "k");
      }
    }
    NewRow r;
    memset(&r, 0, sizeof(r));
    if (rc == SQLITE_OK) rc = vx_new_row(t, cols, rowid, &r);
    if (rc == SQLITE_OK) rc = insert ? vx_insert(t, rowid, &r) : vx_update(t, old, rowid, &r);
    vec_free(&r.vec);
    *out = rowid;
  }
  sqlite3_set_last_insert_rowid(t->db, last);
  t->busy = 0;
  return rc;
}

/* ---- create, connect, and the rest of the module ---- */

static int vx_finish(VxTab *t) {
  for (int i = 0; i < VS_COUNT; i++) {
    sqlite3_finalize(t->st[i]);
    t->st[i] = 0;
  }
  return SQLITE_OK;
}

static void vx_free(VxTab *t) {
  if (!t) return;
  vx_finish(t);
  cache_clear(&t->cache);
  map_free(&t->pending);
  app_free(t);
  vx_free_cols(t);
  sqlite3_free(t->schema);
  sqlite3_free(t->name);
  sqlite3_free(t->broken);
  sqlite3_free(t->base.zErrMsg);
  sqlite3_free(t);
}

static int vx_disconnect(sqlite3_vtab *vt) {
  vx_free((VxTab *)vt);
  return SQLITE_OK;
}

static const char *const VX_SHADOWS[] = {"info", "blocks", "codes", "vectors", "rowids"};

/* The indexes of the shadow tables, named after the table. */
static int vx_indexes(VxTab *t, const char *name, char **err) {
  int rc = SQLITE_OK;
  if (t->npart > 0) {
    sqlite3_str *cols = sqlite3_str_new(0);
    append_cols(cols, "", 'p', t->npart, 0);
    char *list = sqlite3_str_finish(cols);
    rc = list ? vx_exec(t->db, err, "create index \"%w\".\"%w_blocks_partition\" on"
                        " \"%w_blocks\"(%s, id)", t->schema, name, name, list)
              : SQLITE_NOMEM;
    sqlite3_free(list);
  }
  for (int i = 0; i < t->nmeta && rc == SQLITE_OK; i++) {
    rc = vx_exec(t->db, err, "create index \"%w\".\"%w_rowids_m%d\" on \"%w_rowids\"(m%d, block,"
                 " slot)", t->schema, name, i, name, i);
  }
  return rc;
}

/* One integer that a query gives, into *out. */
static int vx_int(sqlite3 *db, const char *sql, int64_t *out) {
  sqlite3_stmt *st = 0;
  int rc = sql ? sqlite3_prepare_v2(db, sql, -1, &st, 0) : SQLITE_NOMEM;
  if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) *out = sqlite3_column_int64(st, 0);
  if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
  sqlite3_finalize(st);
  return rc;
}

static int vx_init(sqlite3 *db, int argc, const char *const *argv, sqlite3_vtab **out, char **err,
                   int create) {
  VxTab *t = sqlite3_malloc(sizeof(VxTab));
  if (!t) return SQLITE_NOMEM;
  memset(t, 0, sizeof(*t));
  t->db = db;
  t->schema = sqlite3_mprintf("%s", argv[1]);
  t->name = sqlite3_mprintf("%s", argv[2]);
  int rc = t->schema && t->name ? vx_parse(t, argc, argv, err) : SQLITE_NOMEM;
  if (rc == SQLITE_OK && create) {
    char *sql = sqlite3_mprintf("pragma \"%w\".page_size", t->schema);
    rc = vx_int(db, sql, &t->page);
    sqlite3_free(sql);
    if (rc != SQLITE_OK && rc != SQLITE_NOMEM) {
      *err = sqlite3_mprintf("vector_index: %s: %s", t->name, sqlite3_errmsg(db));
    }
    if (rc == SQLITE_OK && (t->page < 512 || t->page > 65536)) t->page = 4096;
  }
  if (rc == SQLITE_OK && create) {
    sqlite3_str *blocks = sqlite3_str_new(0), *rows = sqlite3_str_new(0);
    for (int i = 0; i < t->ncol; i++) {
      const VxCol *c = &t->col[i];
      if (c->role == VX_PARTITION) sqlite3_str_appendf(blocks, ", p%d %s", c->shadow, VX_TYPES[c->type]);
      if (c->role == VX_METADATA) sqlite3_str_appendf(rows, ", m%d %s", c->shadow, VX_TYPES[c->type]);
    }
    char *bcols = str_finish(blocks), *rcols = str_finish(rows);
    const char *s = t->schema, *n = t->name;
    rc = bcols && rcols ? SQLITE_OK : SQLITE_NOMEM;
    if (rc == SQLITE_OK) {
      rc = vx_exec(db, err,
                   "create table \"%w\".\"%w_info\"(key text primary key, value) without rowid;"
                   "insert into \"%w\".\"%w_info\" values ('format', %d), ('page_size', %lld);"
                   "create table \"%w\".\"%w_blocks\"(id integer primary key, dims integer not null,"
                   " capacity integer not null, count integer not null, nonce integer not null%s);"
                   "create table \"%w\".\"%w_codes\"(id integer primary key, data blob not null);"
                   "create table \"%w\".\"%w_vectors\"(id integer primary key, data blob not null);"
                   "create table \"%w\".\"%w_rowids\"(id integer primary key, block integer not"
                   " null, slot integer not null%s);",
                   s, n, s, n, HS_FORMAT, t->page, s, n, bcols, s, n, s, n, s, n, rcols);
    }
    if (rc == SQLITE_OK && t->dims) {
      const Layout *l = vx_layout(t, t->dims);
      rc = vx_exec(db, err, "insert into \"%w\".\"%w_info\" values ('block_rows', %lld),"
                   " ('group_rows', %lld)", s, n, l->rows, l->group);
    }
    sqlite3_free(bcols);
    sqlite3_free(rcols);
    if (rc == SQLITE_OK) rc = vx_indexes(t, n, err);
  }
  if (rc == SQLITE_OK) {
    char *sql = sqlite3_mprintf("select (select value from \"%w\".\"%w_info\" where key = 'format'),"
                                " (select coalesce(sum(count), 0) from \"%w\".\"%w_blocks\"),"
                                " (select value from \"%w\".\"%w_info\" where key = 'page_size'),"
                                " (select value from \"%w\".\"%w_info\" where key = 'block_rows'),"
                                " (select value from \"%w\".\"%w_info\" where key = 'group_rows')",
                                t->schema, t->name, t->schema, t->name, t->schema, t->name,
                                t->schema, t->name, t->schema, t->name);
    sqlite3_stmt *st = 0;
    rc = sql ? sqlite3_prepare_v2(db, sql, -1, &st, 0) : SQLITE_NOMEM;
    sqlite3_free(sql);
    int step = rc == SQLITE_OK ? sqlite3_step(st) : rc;
    if (step == SQLITE_ROW) {
      /* Format 1 (or no format): its fixed layout; format 2: the one its T_info gives. */
      int64_t format = sqlite3_column_int64(st, 0), page = sqlite3_column_int64(st, 2);
      int64_t rows = sqlite3_column_int64(st, 3), group = sqlite3_column_int64(st, 4);
      int ftype = sqlite3_column_type(st, 0), ptype = sqlite3_column_type(st, 2);
      int layout_ok = sqlite3_column_type(st, 3) == SQLITE_INTEGER &&
                      sqlite3_column_type(st, 4) == SQLITE_INTEGER && rows >= HS_BLOCK_MIN &&
                      rows <= HS_BLOCK_ROWS && group >= 1 && group <= rows;
      /* Format 1 has no page size, nor has format 3 of a table made in format 1. */
      int v1 = ftype == SQLITE_NULL ||
               (ftype == SQLITE_INTEGER && (format == 1 || (format == 3 && ptype == SQLITE_NULL)));
      int whole = v1 ? ptype == SQLITE_NULL
                     : ftype == SQLITE_INTEGER && format >= 2 && ptype == SQLITE_INTEGER &&
                           page >= 512 && page <= 65536 && (!t->dims || layout_ok);
      t->rows = sqlite3_column_int64(st, 1);
      t->page = v1 ? 0 : page;
      t->format = ftype == SQLITE_NULL ? 1 : format;
      t->nlayouts = 0;
      if (ftype == SQLITE_INTEGER && format > HS_FORMAT) {
        *err = sqlite3_mprintf("vector_index: %s was made by a newer hybridsql (storage format"
                               " %lld; this one reads %d)", t->name, format, HS_FORMAT);
        rc = SQLITE_ERROR;
      } else if (!whole) {
        *err = sqlite3_mprintf("vector_index: the layout of %s in %s_info is corrupt", t->name,
                               t->name);
        rc = SQLITE_CORRUPT_VTAB;
      } else if (!v1 && t->dims) {
        t->layouts[0] = (Layout){t->dims, rows, group};
        t->nlayouts = 1;
      }
    } else if (step == SQLITE_ERROR || step == SQLITE_DONE || (step & 0xff) == SQLITE_CORRUPT) {
      *err = sqlite3_mprintf("vector_index: the shadow tables of %s cannot be read: %s", t->name,
                             sqlite3_errmsg(db));
      rc = SQLITE_CORRUPT_VTAB;
    } else if (step != SQLITE_NOMEM) { /* interrupted, busy, an I/O error: as itself */
      *err = sqlite3_mprintf("vector_index: %s: %s", t->name, sqlite3_errmsg(db));
      rc = step;
    } else {
      rc = step;
    }
    sqlite3_finalize(st);
    /*
    ** Damaged shadow tables still connect, so that DROP TABLE (which connects
    ** first) removes the table; every other use fails with what is wrong.
    */
    if (!create && rc == SQLITE_CORRUPT_VTAB && *err) {
      t->broken = *err;
      *err = 0;
      rc = SQLITE_OK;
    }
  }
  if (rc == SQLITE_OK) rc = vx_declare(t);
  if (rc == SQLITE_OK) {
    sqlite3_vtab_config(db, SQLITE_VTAB_CONSTRAINT_SUPPORT, 1);
    sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
    *out = &t->base;
    return SQLITE_OK;
  }
  if (rc == SQLITE_NOMEM && !*err) *err = sqlite3_mprintf("out of memory");
  vx_free(t);
  return rc;
}

static int vx_create(sqlite3 *db, void *aux, int argc, const char *const *argv,
                     sqlite3_vtab **out, char **err) {
  (void)aux;
  return vx_init(db, argc, argv, out, err, 1);
}

static int vx_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                      sqlite3_vtab **out, char **err) {
  (void)aux;
  return vx_init(db, argc, argv, out, err, 0);
}

/*
** DROP TABLE: drops what stands under each shadow table's name, a table or (as
** damage leaves it) a view; a name that is missing or another kind of object
** (an index or trigger of another table) is left alone.  So a table whose
** shadow tables were dropped, renamed or replaced can always be removed.
** (SQLite shows only the code of an error here, not its text.)
*/
static int vx_destroy(sqlite3_vtab *vt) {
  VxTab *t = (VxTab *)vt;
  vx_finish(t);
  int rc = SQLITE_OK;
  for (size_t i = 0; i < sizeof(VX_SHADOWS) / sizeof(VX_SHADOWS[0]) && rc == SQLITE_OK; i++) {
    char *name = sqlite3_mprintf("%s_%s", t->name, VX_SHADOWS[i]);
    char *sql = sqlite3_mprintf("select type from \"%w\".sqlite_master where type in ('table',"
                                " 'view') and name = ?1 collate nocase", t->schema);
    sqlite3_stmt *st = 0;
    rc = name && sql ? sqlite3_prepare_v2(t->db, sql, -1, &st, 0) : SQLITE_NOMEM;
    sqlite3_free(sql);
    if (rc == SQLITE_OK) {
      sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
      rc = sqlite3_step(st);
      const char *type = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : 0;
      int found = rc == SQLITE_ROW, view = type && strcmp(type, "view") == 0;
      rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
      sqlite3_finalize(st);
      if (rc == SQLITE_OK && found) {
        rc = vx_exec(t->db, 0, "drop %s \"%w\".\"%w\"", view ? "view" : "table", t->schema,
                     name);
      }
    }
    sqlite3_free(name);
  }
  if (rc == SQLITE_OK) vx_free(t);
  return rc;
}

static int vx_rename(sqlite3_vtab *vt, const char *to) {
  VxTab *t = (VxTab *)vt;
  if (t->broken) return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s", t->broken);
  int flushed = vx_flush(t);
  if (flushed) return flushed;
  vx_finish(t); /* they name the old tables */
  char *err = 0;
  int rc = SQLITE_OK;
  for (int i = 0; i < t->nmeta && rc == SQLITE_OK; i++) {
    rc = vx_exec(t->db, &err, "drop index \"%w\".\"%w_rowids_m%d\"", t->schema, t->name, i);
  }
  if (rc == SQLITE_OK && t->npart > 0) {
    rc = vx_exec(t->db, &err, "drop index \"%w\".\"%w_blocks_partition\"", t->schema, t->name);
  }
  for (size_t i = 0; i < sizeof(VX_SHADOWS) / sizeof(VX_SHADOWS[0]) && rc == SQLITE_OK; i++) {
    rc = vx_exec(t->db, &err, "alter table \"%w\".\"%w_%s\" rename to \"%w_%s\"", t->schema,
                 t->name, VX_SHADOWS[i], to, VX_SHADOWS[i]);
  }
  if (rc == SQLITE_OK) rc = vx_indexes(t, to, &err);
  if (rc == SQLITE_OK) {
    char *name = sqlite3_mprintf("%s", to);
    if (!name) {
      rc = SQLITE_NOMEM;
    } else {
      sqlite3_free(t->name);
      t->name = name;
    }
  }
  if (err) {
    sqlite3_free(t->base.zErrMsg);
    t->base.zErrMsg = err;
  }
  return rc;
}

static int vx_shadow_name(const char *suffix) {
  for (size_t i = 0; i < sizeof(VX_SHADOWS) / sizeof(VX_SHADOWS[0]); i++) {
    if (sqlite3_stricmp(suffix, VX_SHADOWS[i]) == 0) return 1;
  }
  return 0;
}

/* Whether an error from reading the shadow tables means they are damaged (a table gone or
** replaced, a row missing or of the wrong size): not an interrupt, a lock, I/O or memory. */
static int is_damage(int rc) { return rc == SQLITE_ERROR || (rc & 0xff) == SQLITE_CORRUPT; }

/* The error met while checking, a shadow table gone or a row missing, as integrity's report. */
static int integrity_report(VxTab *t, const char *name, char **err) {
  *err = t->base.zErrMsg ? sqlite3_mprintf("%s", t->base.zErrMsg)
                         : sqlite3_mprintf("%s: %s", name, sqlite3_errmsg(t->db));
  return *err ? SQLITE_OK : SQLITE_NOMEM;
}

/*
** PRAGMA integrity_check (SQLite 3.44 and later): every block is as the
** writes leave it (in format 3, its checksum too), and (not for quick_check)
** every row's record, float32 vector and location agree.  The first problem found is reported, as text
** naming the table and block; an interrupt, a lock or an I/O error while
** checking is returned as itself, not reported as damage.
*/
static int vx_integrity(sqlite3_vtab *vt, const char *schema, const char *name, int flags,
                        char **err) {
  VxTab *t = (VxTab *)vt;
  (void)schema;
  if (t->broken) {
    *err = sqlite3_mprintf("%s", t->broken);
    return *err ? SQLITE_OK : SQLITE_NOMEM;
  }
  sqlite3_free(t->base.zErrMsg);
  t->base.zErrMsg = 0;
  int rc = vx_format(t);
  if (rc == SQLITE_OK) rc = vx_flush(t);
  if (rc) return is_damage(rc) ? integrity_report(t, name, err) : rc;
  sqlite3_str *sql = sqlite3_str_new(0);
  sqlite3_str_appendall(sql, "select id, dims, capacity, count");
  append_cols(sql, "", 'p', t->npart, 1);
  sqlite3_str_appendf(sql, ", nonce from \"%w\".\"%w_blocks\" order by ", t->schema, t->name);
  append_cols(sql, "", 'p', t->npart, 0);
  sqlite3_str_appendall(sql, t->npart ? ", id" : "id");
  Binds none = {0};
  sqlite3_stmt *st = prepare_bound(t, sql, &none, &rc);
  sqlite3_value *prev[HS_MAX_FILTERS] = {0};
  int64_t prev_id = -1, prev_full = 1, prev_dims = 0, total = 0;
  uint8_t *buf = 0, *rec = 0;
  float *v = 0;
  sqlite3_blob *hc = 0, *hv = 0;
  char *problem = 0;
  while (st && !problem && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0), dims = sqlite3_column_int64(st, 1);
    int64_t capacity = sqlite3_column_int64(st, 2), count = sqlite3_column_int64(st, 3);
    int same = prev_id >= 0;
    for (int i = 0; i < t->npart && same; i++) same = same_value(prev[i], sqlite3_column_value(st, 4 + i));
    problem = block_problem(t, id, sqlite3_column_value(st, 1), sqlite3_column_value(st, 2),
                            sqlite3_column_value(st, 3), 1);
    for (int i = 0; i < t->ncol && !problem; i++) {
      const VxCol *c = &t->col[i];
      sqlite3_value *pv = c->role == VX_PARTITION ? sqlite3_column_value(st, 4 + c->shadow) : 0;
      if (pv && !fits(c, pv)) {
        problem = sqlite3_mprintf("%s: block %lld is damaged: its %s is of type %s, not %s", name,
                                  id, c->name, type_name(pv), VX_TYPES[c->type]);
        if (!problem) problem = NOMEM;
      }
    }
    if (!problem && same && (!prev_full || dims != prev_dims)) {
      problem = sqlite3_mprintf("%s: block %lld is damaged: it follows a block of its partition"
                                " that is not full or has other dimensions", name, id);
      if (!problem) problem = NOMEM;
    }
    total += count;
    prev_id = id, prev_full = count == capacity, prev_dims = dims;
    free_values(prev, t->npart);
    for (int i = 0; i < t->npart; i++) prev[i] = sqlite3_value_dup(sqlite3_column_value(st, 4 + i));
    if (problem) break;
    int64_t stride = rec_stride(dims);
    if ((rc = vx_blob(t, &hc, "codes", id, 0))) break;
    int64_t whole = block_bytes(t, capacity, dims);
    if (sqlite3_blob_bytes(hc) != whole) {
      problem = sqlite3_mprintf("%s: block %lld is damaged: its codes row has %d bytes, not %lld",
                                name, id, sqlite3_blob_bytes(hc), whole);
      if (!problem) problem = NOMEM;
      break;
    }
    if ((flags & 1) && t->format < 3) continue; /* quick_check, with no checksum to check */
    free(buf);
    buf = malloc((size_t)(whole + stride + 9 * HS_MAX_FILTERS));
    v = realloc(v, sizeof(float) * (size_t)dims);
    if (!buf || !v) {
      rc = SQLITE_NOMEM;
      break;
    }
    rec = buf + whole;
    if ((rc = vx_blob_read(t, hc, buf, whole, 0, "codes", id))) break;
    if (t->format >= 3) {
      sqlite3_value *parts[HS_MAX_FILTERS];
      for (int i = 0; i < t->npart; i++) parts[i] = sqlite3_column_value(st, 4 + i);
      uint64_t sum = block_head(id, dims, capacity, count, hash_values(parts, t->npart)) +
                     codes_sum(buf, whole, 0);
      if (sum != (uint64_t)sqlite3_column_int64(st, 4 + t->npart)) {
        problem = sqlite3_mprintf("%s: block %lld is damaged: its records, count or partition do"
                                  " not match its checksum", name, id);
        if (!problem) problem = NOMEM;
        break;
      }
    }
    if (flags & 1) continue; /* quick_check */
    for (int64_t s = 0; s < count && !problem && rc == SQLITE_OK; s++) {
      int64_t rowid = rec_id(buf + s * stride), b, sl;
      int found;
      if ((rc = vx_find(t, rowid, &b, &sl, &found))) break;
      if (!found || b != id || sl != s) {
        problem = sqlite3_mprintf("%s: block %lld is damaged: row %lld is in its slot %lld, its"
                                  " location says otherwise", name, id, rowid, s);
      } else if ((rc = vx_read_vector(t, &hv, id, s, dims, v)) == SQLITE_OK) {
        if (hs_first_nonfinite(v, dims) >= 0) {
          problem = sqlite3_mprintf("%s: block %lld is damaged: the vector of row %lld is not"
                                    " finite", name, id, rowid);
        } else {
          rec_build(rec, rowid, v, dims);
          if (memcmp(rec, buf + s * stride, (size_t)stride) != 0) {
            problem = sqlite3_mprintf("%s: block %lld is damaged: the record of row %lld does not"
                                      " match its vector", name, id, rowid);
          }
        }
      }
      if (rc == SQLITE_OK && !problem && t->nmeta) { /* its metadata, and the block's copy */
        sqlite3_value *metas[HS_MAX_FILTERS] = {0};
        uint8_t *vals = rec + stride, *nulls = vals + 8 * HS_MAX_FILTERS;
        if ((rc = vx_metas(t, rowid, metas)) == SQLITE_OK) num_encode(t, metas, vals, nulls);
        for (int i = 0; i < t->ncol && rc == SQLITE_OK && !problem; i++) {
          const VxCol *c = &t->col[i];
          if (c->role == VX_METADATA && metas[c->shadow] && !fits(c, metas[c->shadow])) {
            problem = sqlite3_mprintf("%s: row %lld is damaged: its %s is of type %s, not %s",
                                      name, rowid, c->name, type_name(metas[c->shadow]),
                                      VX_TYPES[c->type]);
          }
        }
        free_values(metas, t->nmeta);
        for (int j = 0; j < t->nnum && rc == SQLITE_OK && !problem; j++) {
          const uint8_t *at = buf + num_offset(capacity, dims, j);
          if (memcmp(at + 8 * s, vals + 8 * j, 8) != 0 || at[8 * capacity + s] != nulls[j]) {
            problem = sqlite3_mprintf("%s: block %lld is damaged: the metadata of row %lld"
                                      " differs from its location's", name, id, rowid);
          }
        }
      }
    }
    if (rc != SQLITE_OK) break;
  }
  if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
  sqlite3_finalize(st);
  st = 0;
  if (rc == SQLITE_OK && !problem) {
    char *q = sqlite3_mprintf("select count(*) from \"%w\".\"%w_rowids\"", t->schema, t->name);
    rc = q ? sqlite3_prepare_v2(t->db, q, -1, &st, 0) : SQLITE_NOMEM;
    sqlite3_free(q);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
      if (sqlite3_column_int64(st, 0) != total) {
        problem = sqlite3_mprintf("%s: %lld rows have a location, the blocks hold %lld", name,
                                  sqlite3_column_int64(st, 0), total);
        if (!problem) problem = NOMEM;
      }
      rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK && rc != SQLITE_NOMEM) rc = vx_sql_fail(t, rc);
    sqlite3_finalize(st);
  }
  free_values(prev, t->npart);
  vx_blob_close(&hc);
  vx_blob_close(&hv);
  free(buf);
  free(v);
  /* a shadow table gone, a row missing or too short */
  if (!problem && is_damage(rc)) return integrity_report(t, name, err);
  if (problem == NOMEM) return SQLITE_NOMEM;
  if (problem) {
    *err = problem;
    return SQLITE_OK;
  }
  return rc; /* SQLITE_OK, or an interrupt, a lock, an I/O error: as itself */
}

static sqlite3_module vx_module = {
    .iVersion = 4,
    .xCreate = vx_create,
    .xConnect = vx_connect,
    .xBestIndex = vx_best_index,
    .xDisconnect = vx_disconnect,
    .xDestroy = vx_destroy,
    .xOpen = vx_open,
    .xClose = vx_close,
    .xFilter = vx_filter,
    .xNext = vx_next,
    .xEof = vx_eof,
    .xColumn = vx_column,
    .xRowid = vx_rowid,
    .xUpdate = vx_xupdate,
    .xRename = vx_rename,
    .xBegin = vx_begin,
    .xSync = vx_sync,
    .xRollback = vx_rollback,
    .xSavepoint = vx_savepoint,
    .xRelease = vx_release,
    .xRollbackTo = vx_rollback_to,
    .xShadowName = vx_shadow_name,
    .xIntegrity = vx_integrity,
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
    {"hybridsql_simd", 0, HS_PURE, simd_func, 0, 0}, /* chosen once per process */
};

/* Sets *pzErrMsg to "hybridsql: cannot register NAME: why" and returns rc. */
static int init_error(sqlite3 *db, char **pzErrMsg, const char *name, int rc) {
  if (pzErrMsg) {
    *pzErrMsg = sqlite3_mprintf("hybridsql: cannot register %s: %s", name,
                                rc == SQLITE_NOMEM ? "out of memory" : sqlite3_errmsg(db));
  }
  return rc;
}

/*
** The library exports this entry point and the kernels of hybridsql.h (HS_EXPORT), nothing else:
** every build uses -fvisibility=hidden.
*/
HS_EXPORT int sqlite3_hybridsql_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  /* sqlite3_api is one pointer for the whole process. A second SQLite library in it (apsw and
  ** Python's sqlite3 each may bring their own) would send the first one's calls into its own
  ** code, with its own mutexes and structures: the heap was corrupted under Datasette. */
#ifndef SQLITE_CORE /* compiled into SQLite itself (the fuzzers), there is no pointer */
  if (sqlite3_api && sqlite3_api != pApi) {
    if (pzErrMsg) {
      *pzErrMsg = pApi->mprintf(
          "hybridsql: already loaded into another SQLite library in this process (SQLite %s):"
          " one process can give the extension to one SQLite library only",
          sqlite3_api->libversion());
    }
    return SQLITE_ERROR;
  }
#endif
  SQLITE_EXTENSION_INIT2(pApi);
  dot2();
  vtab_in_ok = sqlite3_libversion_number() >= 3038000;
  int rc = sqlite3_create_module_v2(db, "vector_index", &vx_module, 0, 0);
  if (rc != SQLITE_OK) return init_error(db, pzErrMsg, "vector_index", rc);
  rc = register_match(db); /* so that `embedding MATCH ?` parses, in a view too */
  if (rc != SQLITE_OK) return init_error(db, pzErrMsg, "match", rc);
  for (size_t i = 0; i < sizeof(FUNCTIONS) / sizeof(FUNCTIONS[0]); i++) {
    rc = sqlite3_create_function_v2(db, FUNCTIONS[i].name, FUNCTIONS[i].nArg,
                                        FUNCTIONS[i].flags, 0, FUNCTIONS[i].xFunc,
                                        FUNCTIONS[i].xStep, FUNCTIONS[i].xFinal, 0);
    if (rc != SQLITE_OK) return init_error(db, pzErrMsg, FUNCTIONS[i].name, rc);
  }
  rc = hs_embed_register(db);
  if (rc != SQLITE_OK) return init_error(db, pzErrMsg, "embed", rc);
  rc = register_fts5(db);
  return rc == SQLITE_OK ? rc : init_error(db, pzErrMsg, "bm25_candidate", rc);
}
