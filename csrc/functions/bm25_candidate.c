/*
** bm25_candidate, an FTS5 auxiliary function:
**
**   bm25_candidate(fts_table, n)             -> REAL or NULL
**       the row's bm25() rank, or NULL when it cannot be among the n best:
**       order by it with LIMIT n instead of by bm25(), for a fraction of the work.
**       select rowid from (select rowid, bm25_candidate(chunks_fts, 3) as rank from chunks_fts
**       where chunks_fts match 'tabs OR spaces') where rank is not null order by rank limit 3
**
** Requirement 11 (Requirements 1 to 9 are functions/scalar.c's; the numbers are the extension's):
**
** 11. bm25_candidate(fts_table, n), an FTS5 auxiliary function, is NULL for
**    a row whose bm25() rank cannot be among the n best of the rows it has
**    returned a rank for so far in this query, and otherwise that rank, equal
**    to bm25(fts_table) bit for bit (n an INTEGER from 1 to HS_MAX_K; asked
**    again about the same row, it answers the same).  So its n lowest non-NULL
**    values are the rows and ranks of `ORDER BY bm25(t) LIMIT n` (ties at the
**    n-th rank aside).  Other WHERE terms must be tested before it (in a
**    CASE), or it counts rows they reject.  Registered when SQLite has FTS5.
**
** bm25() without its costliest step for
** rows that cannot make the top n.  bm25() reads every matching row's length
** from the %_docsize table, a lookup that is about 70% of its time
** (bench/run.py, 100k chunks).  A row's bm25 score is highest when its
** length is 0, and that bound needs no lookup: when it is below the n-th best
** score seen so far, the row is out.  The phrase counts come from
** xPhraseFirst/xPhraseNext, which read each phrase's positions once, where
** xInst first merges all phrases' positions into one sorted list.
*/
#include "functions/bm25_candidate.h"

#include <math.h>
#include <string.h>

#include "functions/args.h"
#include "kernels/topk.h"

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

int hs_bm25_candidate_register(sqlite3 *db) {
  fts5_api *fts5 = 0;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, "select fts5(?1)", -1, &st, 0) != SQLITE_OK) return SQLITE_OK;
  sqlite3_bind_pointer(st, 1, (void *)&fts5, "fts5_api_ptr", 0);
  sqlite3_step(st);
  sqlite3_finalize(st);
  if (!fts5 || fts5->iVersion < 2) return SQLITE_OK;
  return fts5->xCreateFunction(fts5, "bm25_candidate", 0, bm25_candidate_func, 0);
}
