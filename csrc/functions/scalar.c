/*
** The scalar SQL functions, thin wrappers that check their arguments and call the kernels:
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
**   hybridsql_version()                      -> TEXT, e.g. 0.1.0
**   hybridsql_debug()                        -> TEXT, version, SIMD path and SQLite versions
**   hybridsql_simd()                         -> TEXT, the SIMD path the kernels run:
**       avx2+fma or sse2 (x86_64, by cpuid), neon (aarch64) or generic.
**       select hybridsql_simd() -> avx2+fma
**
** The extension's other SQL functions have their requirements in their own files: vector_index
** (Requirement 10) in vector_index/vector_index.c, bm25_candidate (11) in
** functions/bm25_candidate.c, embed() and hybridsql_model() (12 to 16) in model/embedsql.c.
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
*/
#include "functions/scalar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "functions/args.h"
#include "kernels/topk.h"
#include "kernels/scores.h"
#include "kernels/simd.h"
#include "kernels/vectext.h"

/* The version is written once, in hybridsql/__init__.py; every build passes it (setup.py,
** scripts/platforms.py, fuzz/build.sh), so a library cannot report another one. */
#ifndef HYBRIDSQL_VERSION
#error "build with -DHYBRIDSQL_VERSION='\"X.Y.Z\"'; setup.py passes hybridsql.__version__"
#endif
#define HS_VERSION HYBRIDSQL_VERSION
#define HS_SATURATION 10.0
#define HS_HALF_LIFE 30.0

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

int hs_functions_register(sqlite3 *db, const char **failed) {
  for (size_t i = 0; i < sizeof(FUNCTIONS) / sizeof(FUNCTIONS[0]); i++) {
    int rc = sqlite3_create_function_v2(db, FUNCTIONS[i].name, FUNCTIONS[i].nArg,
                                        FUNCTIONS[i].flags, 0, FUNCTIONS[i].xFunc,
                                        FUNCTIONS[i].xStep, FUNCTIONS[i].xFinal, 0);
    if (rc != SQLITE_OK) {
      *failed = FUNCTIONS[i].name;
      return rc;
    }
  }
  return SQLITE_OK;
}
