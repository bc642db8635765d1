/*
** A query with MATCH (Requirement 10 in vector_index.c): the rows its conditions select, read
** from the plan (knn_args) as a block list and listed slots (knn_select), numeric conditions
** tested on a block's own copy of the values (block_pass), the first pass over each block's int8
** records (knn_scan), then rows rescored exactly from their float32 vectors, each checked
** against its record and its location.  Three ways to hand the rows to SQLite (KnnRows):
**
**   k = N        the N best (knn_top), all found before the first is handed;
**   best first   without k, where the rows are to come best first (no ORDER BY, or ORDER BY
**                score desc): in rounds, each a first pass that keeps the candidates of the
**                next K rows and rescores them only as SQLite asks for rows (knn_next), so a
**                query that SQLite stops after N rows costs about what k = N does;
**   every row    where SQLite sorts them itself: all rescored, in the order they are stored.
*/
#include "vector_index/internal.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/simd.h"

/* ------------------------------------------------------------------------
** The first pass and the rescoring (Requirement 10).
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
  uint64_t print; /* codes_sum of its record: what its float32 vector must give (rescore) */
} Cand;

typedef struct Knn {
  const float *q;
  int64_t d, k; /* k 0: no bar, every row a candidate */
  double qq, qerr;
  float qmul;
  int8_t *q8;
  Hit *lower; /* heap of the k best lower bounds (ids unused) */
  int64_t nlower;
  Cand *cand;
  int64_t ncand, capcand;
  int64_t scanned; /* rows the pass tested (after the conditions on the block's own values) */
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
  s->lower = malloc(sizeof(Hit) * (size_t)(k > 0 ? k : 1));
  if (!s->q8 || !s->lower) return 0;
  memset(s->q8, 0, (size_t)rec_stride(d));
  s->qerr = quantize(q, d, s->q8, &s->qmul) / 2.0 + (double)d / 4.0;
  return 1;
}

static double knn_bar(const Knn *s) {
  return s->k ? heap_bar(s->lower, s->nlower, s->k) : -INFINITY;
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
** Rows that could be in the top k become candidates.  With `after` (a round
** of the best-first order), a row whose lower bound is above the last row
** handed was handed before it and is passed over.  `near`: buf was just read
** from the file (and checked), so its bytes are in the CPU's cache already and
** prefetching them would only cost instructions.  0 when out of memory.
*/
static int knn_scan(Knn *s, const uint8_t *buf, int64_t count, int64_t block,
                    const int64_t *slots, int64_t nslots, const I64Map *only, const Hit *after,
                    int near) {
  const int64_t d = s->d, stride = rec_stride(d), ahead = near ? 0 : 8;
  const int64_t n = slots ? nslots : count;
  const double slack = 1e-6;
  double bar = knn_bar(s);
  s->scanned += n;
  for (int64_t i = 0; i < ahead && i < n; i++) prefetch(buf + (slots ? slots[i] : i) * stride, stride);
  for (int64_t i = 0; i < n; i++) {
    int64_t r = slots ? slots[i] : i;
    if (ahead && i + ahead < n) {
      prefetch(buf + (slots ? slots[i + ahead] : i + ahead) * stride, stride);
    }
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
    if (after && approx - err > after->score) continue;
    if (s->k) {
      Hit lo = {approx - err, 0};
      heap_push(s->lower, &s->nlower, s->k, lo);
      bar = heap_bar(s->lower, s->nlower, s->k);
    }
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
  double bar = knn_bar(s);
  int64_t m = 0;
  for (int64_t i = 0; i < s->ncand; i++) {
    if (s->cand[i].upper >= bar) s->cand[m++] = s->cand[i];
  }
  s->ncand = m;
  if (m > 1) qsort(s->cand, (size_t)m, sizeof(Cand), cmp_cand);
}

/*
** The candidates a block's scan added, from `first` on: those below the bar
** now are dropped (it only rises), and each other one gets the fingerprint of
** its record while the block's records are at hand (buf).
*/
static void knn_prints(Knn *s, int64_t first, const uint8_t *buf) {
  double bar = knn_bar(s);
  int64_t m = first, stride = rec_stride(s->d);
  for (int64_t i = first; i < s->ncand; i++) {
    if (s->cand[i].upper < bar) continue;
    s->cand[m] = s->cand[i];
    s->cand[m++].print = codes_sum(buf + s->cand[i].slot * stride, stride, 0);
  }
  s->ncand = m;
}

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

/* Everything a query with MATCH is told, read from xFilter's arguments. */
typedef struct KnnArgs {
  Vec q;
  int64_t k, limit, offset;
  int64_t given_k; /* k = N's N, the k column's value; 0 without one */
  int all;         /* no k: every row the conditions select, all rescored (SQLite sorts them) */
  int best_first;  /* no k: every row, best first, rescored as SQLite asks for rows */
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

/* The query's arguments; lazy: the rows may come best first as SQLite asks for them (the plan
** found no ORDER BY, or score desc). */
static int knn_args(VxTab *t, const char *plan, int argc, sqlite3_value **argv, int lazy,
                    KnnArgs *a) {
  memset(a, 0, sizeof(*a));
  a->limit = a->offset = -1;
  a->blocks = sqlite3_str_new(0);
  sqlite3_str_appendall(a->blocks, "select id, dims, count, nonce, capacity");
  append_cols(a->blocks, "", 'p', t->npart, 1); /* for the checksum (BlockRef.parts) */
  sqlite3_str_appendf(a->blocks, " from \"%w\".\"%w_blocks\" where 1", t->schema, t->name);
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
          sqlite3_str_appendf(a->rows, "select block, slot, rowid from \"%w\".\"%w_rowids\""
                              " where 1",
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
  else if (lazy) a->best_first = 1;
  else a->all = 1;
  sqlite3_str_appendall(a->blocks, " order by id");
  return SQLITE_OK;
}

/* Steps a statement of (block, slot, rowid) rows into a sorted array of locations. */
static int collect_slots(VxTab *t, sqlite3_stmt *st, Slot **out, int64_t *n) {
  int64_t cap = 0;
  int rc;
  *out = 0, *n = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    rc = vx_check_location(t, sqlite3_column_int64(st, 2), st, 0, 1);
    if (rc) return rc;
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

/* ------------------------------------------------------------------------
** The rows a query's conditions select: the block list of its partitions, and the slots that a
** condition SQL tests on T_rowids (or a short rowid set) lists.  Read when the query starts,
** and again in a best-first query when the table was written since (by this connection,
** between two rows handed: no other can write while the statement reads).
*/
typedef struct Sel {
  sqlite3_stmt *blocks, *rows; /* the block list; the slots a condition lists (or none) */
  BlockRef *refs;
  int64_t nrefs, caprefs, total; /* total: the rows of those blocks */
  Slot *slots;
  int64_t nslots;
  int listed;    /* only the slots listed */
  int use_set;   /* each row's id is tested against the rowid set as it is scanned */
  int64_t *list; /* room for one block's listed slots */
} Sel;

static void sel_free(Sel *sel) {
  sqlite3_finalize(sel->blocks);
  sqlite3_finalize(sel->rows);
  free(sel->refs);
  free(sel->slots);
  free(sel->list);
  memset(sel, 0, sizeof(*sel));
}

static int knn_select(VxTab *t, KnnArgs *a, Sel *sel) {
  int rc = SQLITE_OK;
  if (!sel->blocks) {
    sel->blocks = prepare_bound(t, a->blocks, &a->bblocks, &rc);
    a->blocks = 0;
    if (rc == SQLITE_OK && a->rows) sel->rows = prepare_bound(t, a->rows, &a->brows, &rc);
    a->rows = 0;
    if (rc) return rc;
  }
  sqlite3_stmt *st = sel->blocks;
  sel->nrefs = sel->total = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (sel->nrefs == sel->caprefs) {
      int64_t cap = sel->caprefs ? 2 * sel->caprefs : 256;
      BlockRef *grown = realloc(sel->refs, sizeof(BlockRef) * (size_t)cap);
      if (!grown) {
        rc = SQLITE_NOMEM;
        break;
      }
      sel->refs = grown, sel->caprefs = cap;
    }
    BlockRef *r = &sel->refs[sel->nrefs++];
    r->id = sqlite3_column_int64(st, 0);
    r->dims = sqlite3_column_int64(st, 1);
    r->count = sqlite3_column_int64(st, 2);
    r->nonce = sqlite3_column_int64(st, 3);
    r->capacity = sqlite3_column_int64(st, 4);
    sqlite3_value *parts[HS_MAX_FILTERS];
    for (int i = 0; i < t->npart; i++) parts[i] = sqlite3_column_value(st, 5 + i);
    r->parts = hash_values(parts, t->npart);
    if ((rc = vx_check_block(t, r->id, st, 1, 4, 2))) break;
    sel->total += r->count;
  }
  if (rc == SQLITE_DONE) rc = SQLITE_OK;
  else if (rc != SQLITE_OK && rc != SQLITE_NOMEM && !t->base.zErrMsg) rc = vx_sql_fail(t, rc);
  sqlite3_reset(st);
  if (rc == SQLITE_OK && sel->nrefs == 0) rc = vx_check_blockless(t);
  free(sel->slots);
  sel->slots = 0, sel->nslots = 0, sel->listed = 0, sel->use_set = a->has_set;
  if (rc == SQLITE_OK && sel->rows) {
    sel->listed = 1;
    rc = collect_slots(t, sel->rows, &sel->slots, &sel->nslots);
    sqlite3_reset(sel->rows);
  } else if (rc == SQLITE_OK && a->has_set && a->set.n * 16 <= sel->total) {
    sel->listed = 1, sel->use_set = 0; /* the lookups do the set's work */
    sel->slots = malloc(sizeof(Slot) * (size_t)(a->set.n + 1));
    if (!sel->slots) rc = SQLITE_NOMEM;
    for (int64_t i = 0; i < a->set.cap && rc == SQLITE_OK; i++) {
      int found;
      if (!a->set.used[i]) continue;
      Slot *s = &sel->slots[sel->nslots];
      rc = vx_find(t, a->set.keys[i], &s->block, &s->slot, &found);
      sel->nslots += found;
    }
    if (rc == SQLITE_OK && sel->nslots > 1) {
      qsort(sel->slots, (size_t)sel->nslots, sizeof(Slot), cmp_slot);
    }
  }
  if (rc == SQLITE_OK && sel->listed) {
    free(sel->list);
    sel->list = malloc(sizeof(int64_t) * (size_t)(sel->nslots + 1));
    if (!sel->list) rc = SQLITE_NOMEM;
  }
  return rc;
}

/* The first pass over the selected rows, block by block, into s; after: see knn_scan. */
static int knn_pass(VxTab *t, KnnArgs *a, Sel *sel, Knn *s, const Hit *after) {
  sqlite3_blob *h = 0;
  int rc = SQLITE_OK;
  int64_t j = 0, d = s->d; /* j: the next entry of sel->slots */
  t->cache.clock++;
  for (int64_t b = 0; b < sel->nrefs && rc == SQLITE_OK; b++) {
    const BlockRef *r = &sel->refs[b];
    int64_t nlist = 0;
    if (sel->listed) {
      while (j < sel->nslots && sel->slots[j].block < r->id) j++;
      for (; j < sel->nslots && sel->slots[j].block == r->id; j++) {
        if (sel->slots[j].slot < 0 || sel->slots[j].slot >= r->count) {
          rc = vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: a row is in its slot"
                       " %lld, not 0 to %lld", t->name, r->id, sel->slots[j].slot, r->count - 1);
          break;
        }
        sel->list[nlist++] = sel->slots[j].slot;
      }
      if (rc || nlist == 0) continue;
    }
    if (r->count == 0) { /* a block that empties is deleted */
      rc = vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: it holds 0 rows in room"
                   " for %lld", t->name, r->id, r->capacity);
      break;
    }
    uint8_t *buf;
    int fresh, near;
    /* damage first, then the query's */
    if ((rc = block_records(t, r, &h, &buf, &fresh, &near))) break;
    if (r->dims != d) {
      if (fresh) pool_put(&t->cache.pool, buf); /* read for the cache, which does not take it */
      rc = vx_fail(t, SQLITE_ERROR, "%s: the MATCH vector has %lld dimensions, the vectors it is"
                   " compared with have %lld", t->name, d, r->dims);
      break;
    }
    const int64_t *scan = sel->listed ? sel->list : 0;
    int64_t kept[HS_BLOCK_ROWS], nkept = 0;
    if (a->nnf) { /* the numeric conditions, on the block's own copy of the values */
      nkept = block_pass(a->nf, a->nnf, buf, r->capacity, r->count, d, scan, nlist, kept);
      scan = kept, nlist = nkept;
    }
    int64_t first = s->ncand;
    if (!(scan && nlist == 0) &&
        !knn_scan(s, buf, r->count, r->id, scan, nlist, sel->use_set ? &a->set : 0, after,
                  near))
      rc = SQLITE_NOMEM;
    knn_prints(s, first, buf);
    if (fresh) cache_keep(&t->cache, r, (size_t)read_bytes(t, r), buf);
  }
  vx_blob_close(&h);
  return rc;
}

/*
** Rescoring: a candidate's float32 vector read from its group (the handle kept on the last group
** read), checked against its record, and its exact cosine (Requirement 4).
*/
typedef struct Rescore {
  const float *q;
  int64_t d;
  double qq;
  Layout l;
  Dot2Fn fn;
  sqlite3_blob *h;
  int64_t open; /* the group h is on; -1: none */
  float *v;
  uint8_t *rec;
} Rescore;

static int rescore_init(VxTab *t, Rescore *r, const float *q, int64_t d, double qq) {
  memset(r, 0, sizeof(*r));
  r->q = q, r->d = d, r->qq = qq, r->l = *vx_layout(t, d), r->fn = dot2(), r->open = -1;
  r->v = malloc(sizeof(float) * (size_t)d);
  r->rec = malloc((size_t)rec_stride(d));
  return r->v && r->rec ? SQLITE_OK : SQLITE_NOMEM;
}

static void rescore_close(Rescore *r) {
  vx_blob_close(&r->h);
  r->open = -1;
}

static void rescore_free(Rescore *r) {
  rescore_close(r);
  free(r->v);
  free(r->rec);
  memset(r, 0, sizeof(*r));
}

static int rescore(VxTab *t, Rescore *r, const Cand *c, double *score) {
  int64_t gid = group_id(&r->l, c->block, c->slot);
  int rc;
  if (gid != r->open) {
    r->open = -1;
    if ((rc = vx_group(t, &r->h, gid, r->d))) return rc;
    r->open = gid;
  }
  rc = vx_blob_read(t, r->h, r->v, 4 * r->d, (c->slot % r->l.group) * 4 * r->d, "vectors", gid);
  if (rc || (rc = vx_check_vector(t, c, r->v, r->d, r->rec))) return rc;
  double ab, bb;
  r->fn(r->q, r->v, r->d, &ab, &bb);
  *score = cosine_from(ab, r->qq, bb);
  return SQLITE_OK;
}

/* A row rescored: its score and rowid, and its candidate (at, in the Knn's cand). */
typedef struct Ready {
  double score;
  int64_t id, at;
} Ready;

/* Whether x comes before y: a higher score, then a lower rowid (Requirement 5). */
static int ready_before(const Ready *x, const Ready *y) {
  return x->score > y->score || (x->score == y->score && x->id < y->id);
}

static int cmp_ready(const void *a, const void *b) {
  const Ready *x = a, *y = b;
  return ready_before(x, y) ? -1 : ready_before(y, x);
}

/* ------------------------------------------------------------------------
** The rows a query with MATCH hands to SQLite (the cursor, scan.c, holds one).
*/
struct KnnRows {
  KnnArgs a;
  float *q; /* the MATCH vector, copied */
  int64_t d;
  Sel sel;
  Knn s; /* the candidates: of the whole query, or of this round of a best-first one */
  Rescore r;
  Ready *ready; /* the rows rescored: all of them, best first (sorted); or, best first, a heap */
  int64_t nready, capready, i;
  int sorted;
  Hit row; /* the row handed now */
  int eof;
  /* best first */
  int64_t round;   /* the rows this round is for (K); 0: this round has every row left */
  int64_t next;    /* the next candidate to rescore */
  double bar;      /* a row that scores below it waits for the next round */
  int64_t handed;  /* rows handed so far; the last one is `row` */
  int64_t scanned; /* rows the last round's pass tested */
  uint64_t writes; /* t->writes when sel was read */
};

static int ready_add(KnnRows *z, Ready x) {
  if (z->nready == z->capready) {
    int64_t cap = z->capready ? 2 * z->capready : 64;
    Ready *grown = realloc(z->ready, sizeof(Ready) * (size_t)cap);
    if (!grown) return SQLITE_NOMEM;
    z->ready = grown, z->capready = cap;
  }
  z->ready[z->nready++] = x;
  return SQLITE_OK;
}

/* The heap of rows rescored and not handed, the first of them on top. */
static int ready_push(KnnRows *z, Ready x) {
  int rc = ready_add(z, x);
  for (int64_t i = z->nready - 1; rc == SQLITE_OK && i > 0;) {
    int64_t up = (i - 1) / 2;
    if (!ready_before(&z->ready[i], &z->ready[up])) break;
    Ready tmp = z->ready[i];
    z->ready[i] = z->ready[up], z->ready[up] = tmp, i = up;
  }
  return rc;
}

static Ready ready_pop(KnnRows *z) {
  Ready top = z->ready[0];
  z->ready[0] = z->ready[--z->nready];
  for (int64_t i = 0;;) {
    int64_t l = 2 * i + 1, r = l + 1, w = i;
    if (l < z->nready && ready_before(&z->ready[l], &z->ready[w])) w = l;
    if (r < z->nready && ready_before(&z->ready[r], &z->ready[w])) w = r;
    if (w == i) break;
    Ready tmp = z->ready[i];
    z->ready[i] = z->ready[w], z->ready[w] = tmp, i = w;
  }
  return top;
}

/* Hands row x: it is now the cursor's, and T_rowids must hold it where it was found. */
static int knn_hand(VxTab *t, KnnRows *z, Ready x) {
  z->row.score = x.score, z->row.id = x.id;
  z->handed++;
  return vx_check_place(t, &z->s.cand[x.at]);
}

/*
** The k = N query, or every row (a->all): the first pass, then the candidates rescored (with k,
** best upper bound first until none can reach the k-th best; every row in the order they are
** stored, each group of vectors opened once), sorted best first, each answered row's location
** checked.
*/
static int knn_whole(VxTab *t, KnnRows *z) {
  KnnArgs *a = &z->a;
  Knn *s = &z->s;
  int rc = knn_select(t, a, &z->sel);
  if (rc == SQLITE_OK && !knn_init(s, z->q, z->d, a->all ? 0 : a->k)) rc = SQLITE_NOMEM;
  if (rc == SQLITE_OK) rc = knn_pass(t, a, &z->sel, s, 0);
  if (rc == SQLITE_OK) rc = rescore_init(t, &z->r, z->q, z->d, s->qq);
  if (rc) return rc;
  if (a->all && s->ncand > 1) qsort(s->cand, (size_t)s->ncand, sizeof(Cand), cmp_place);
  else if (!a->all) knn_candidates(s);
  Hit *best = a->all ? 0 : malloc(sizeof(Hit) * (size_t)a->k); /* with k: the k best, a heap */
  int64_t nbest = 0;
  I64Map scored = {0}; /* with k: rowid -> its candidate */
  if (!a->all && !best) rc = SQLITE_NOMEM;
  for (int64_t i = 0; i < s->ncand && rc == SQLITE_OK; i++) {
    const Cand *c = &s->cand[i];
    if (!a->all && c->upper < heap_bar(best, nbest, a->k)) break;
    Ready x = {0, c->id, i};
    if ((rc = rescore(t, &z->r, c, &x.score))) break;
    if (a->all) {
      rc = ready_add(z, x);
    } else if (!map_put(&scored, c->id, i)) {
      rc = SQLITE_NOMEM;
    } else {
      Hit h = {x.score, c->id};
      heap_push(best, &nbest, a->k, h);
    }
  }
  rescore_close(&z->r);
  for (int64_t i = 0; i < nbest && rc == SQLITE_OK; i++) {
    Ready x = {best[i].score, best[i].id, 0};
    map_find(&scored, x.id, &x.at);
    rc = ready_add(z, x);
  }
  map_free(&scored);
  free(best);
  if (rc) return rc;
  if (z->nready > 1) qsort(z->ready, (size_t)z->nready, sizeof(Ready), cmp_ready);
  for (int64_t i = 0; i < z->nready && rc == SQLITE_OK; i++) {
    rc = vx_check_place(t, &s->cand[z->ready[i].at]);
  }
  z->sorted = 1;
  return rc;
}

/* ------------------------------------------------------------------------
** Best first, without k (Requirement 10): SQLite takes rows until its LIMIT is met or the
** statement ends, and tests on each the conditions it kept (an OR, an expression, another
** table's column), so how many it takes is known to no one in advance.  The rows come in rounds.
** A round is a first pass over the rows the table's conditions select, except those handed
** already, whose candidates are the rows that could be among the next K (K grows at each round):
** with `bar` the K-th best lower bound, every row that scores at least bar is a candidate, so
** the candidates, rescored best upper bound first as SQLite asks for rows, give every row down
** to bar in the exact order (a rescored row is handed once no candidate left could score as much,
** or as much with a lower rowid).  Below bar the next round takes over, from the last row
** handed: a row whose lower bound is above its score was handed, a row that scores it exactly
** was handed if its rowid is lower.  A round that would take most of the rows left takes all of
** them, rescored in the order they are stored, as a query that SQLite sorts itself does.
**
** The rows handed are the table's as it was at their round.  This connection may write to the
** table between two of them (a loop over the rows that updates each): the next row is then the
** one after the last handed in the table as it is now (a new round), as a cursor over an index
** goes on from where it stands.
*/
#define HS_ROUND_MIN 16    /* the first round's K at least, and at most HS_ROUND_MAX; */
#define HS_ROUND_MAX 1024  /* between them a 64th of the rows */
#define HS_ROUND_GROWTH 8  /* each round's K, that of the round before it times this */

/* Whether a row rescored comes after the last one handed. */
static int after_handed(const KnnRows *z, double score, int64_t id) {
  return !z->handed || score < z->row.score || (score == z->row.score && id > z->row.id);
}

/* A new round of z->round rows after the last one handed (every row left when 0), from the
** table as it is now. */
static int best_round(VxTab *t, KnnRows *z) {
  KnnArgs *a = &z->a;
  int rc = SQLITE_OK;
  rescore_close(&z->r);
  if (!z->sel.blocks || z->writes != t->writes) {
    z->writes = t->writes;
    rc = vx_flush(t); /* the rows held since, as at every read (held.c) */
    if (rc == SQLITE_OK) rc = knn_select(t, a, &z->sel);
    if (rc) return rc;
  }
  /* how many rows the conditions may select: rows listed, in the rowid set, or last scanned */
  int64_t rows = z->sel.listed ? z->sel.nslots : z->sel.total;
  if (z->sel.use_set && a->set.n < rows) rows = a->set.n;
  if (z->scanned && z->scanned < rows) rows = z->scanned;
  if (z->round < 0) { /* the first round */
    z->round = rows / 64 < HS_ROUND_MIN ? HS_ROUND_MIN : rows / 64 > HS_ROUND_MAX ? HS_ROUND_MAX
                                                                                : rows / 64;
  }
  if (2 * z->round >= rows - z->handed) z->round = 0;
  knn_free(&z->s);
  z->nready = z->i = z->next = 0;
  z->sorted = 0;
  if (!knn_init(&z->s, z->q, z->d, z->round)) return SQLITE_NOMEM;
  rc = knn_pass(t, a, &z->sel, &z->s, z->handed ? &z->row : 0);
  if (rc) return rc;
  z->scanned = z->s.scanned;
  z->bar = knn_bar(&z->s);
  if (z->bar == -INFINITY) z->round = 0; /* fewer rows than K: every row left is a candidate */
  if (z->round) {
    knn_candidates(&z->s);
    return SQLITE_OK;
  }
  Knn *s = &z->s; /* every row left: all rescored, in the order they are stored, and sorted */
  if (s->ncand > 1) qsort(s->cand, (size_t)s->ncand, sizeof(Cand), cmp_place);
  for (int64_t i = 0; i < s->ncand && rc == SQLITE_OK; i++) {
    Ready x = {0, s->cand[i].id, i};
    rc = rescore(t, &z->r, &s->cand[i], &x.score);
    if (rc == SQLITE_OK && after_handed(z, x.score, x.id)) rc = ready_add(z, x);
  }
  rescore_close(&z->r);
  if (rc == SQLITE_OK && z->nready > 1) {
    qsort(z->ready, (size_t)z->nready, sizeof(Ready), cmp_ready);
  }
  z->sorted = 1;
  return rc;
}

/* Hands the next row best first, or sets eof. */
static int best_next(VxTab *t, KnnRows *z) {
  int rc = SQLITE_OK;
  if (z->writes != t->writes) rc = best_round(t, z);
  while (rc == SQLITE_OK) {
    if (z->sorted) {
      if (z->i < z->nready) return knn_hand(t, z, z->ready[z->i++]);
      z->eof = 1;
      return SQLITE_OK;
    }
    /* the candidates that could come before the best rescored row, rescored */
    while (z->next < z->s.ncand &&
           (z->nready == 0 || z->s.cand[z->next].upper >= z->ready[0].score)) {
      const Cand *c = &z->s.cand[z->next];
      Ready x = {0, c->id, z->next++};
      if ((rc = rescore(t, &z->r, c, &x.score))) return rc;
      if (after_handed(z, x.score, x.id) && (rc = ready_push(z, x))) return rc;
    }
    if (z->nready > 0 && z->ready[0].score >= z->bar) return knn_hand(t, z, ready_pop(z));
    if (z->round == 0) {
      z->eof = 1;
      return SQLITE_OK;
    }
    z->round *= HS_ROUND_GROWTH;
    rc = best_round(t, z);
  }
  return rc;
}

/* ---- what the cursor calls ---- */

void knn_close(KnnRows *z) {
  if (!z) return;
  knn_args_free(&z->a);
  sel_free(&z->sel);
  knn_free(&z->s);
  rescore_free(&z->r);
  free(z->ready);
  sqlite3_free(z->q);
  sqlite3_free(z);
}

int knn_open(VxTab *t, int lazy, const char *plan, int argc, sqlite3_value **argv,
             KnnRows **out) {
  KnnRows *z = sqlite3_malloc(sizeof(KnnRows));
  *out = z;
  if (!z) return SQLITE_NOMEM;
  memset(z, 0, sizeof(*z));
  z->eof = 1, z->round = -1;
  KnnArgs *a = &z->a;
  int rc = knn_args(t, plan, argc, argv, lazy, a);
  if (rc || !a->q.v || a->none) return rc; /* a NULL vector: no rows */
  z->d = a->q.d;
  if (t->dims && z->d != t->dims) {
    return vx_fail(t, SQLITE_ERROR, "%s: the MATCH vector has %lld dimensions, the table has %lld",
                   t->name, z->d, t->dims);
  }
  z->q = sqlite3_malloc64(sizeof(float) * (sqlite3_uint64)z->d);
  if (!z->q) return SQLITE_NOMEM;
  memcpy(z->q, a->q.v, sizeof(float) * (size_t)z->d);
  z->eof = 0;
  if (a->best_first) {
    rc = rescore_init(t, &z->r, z->q, z->d, squared_norm(z->q, z->d, dot2()));
    if (rc == SQLITE_OK) rc = best_round(t, z);
    if (rc == SQLITE_OK) rc = best_next(t, z);
  } else {
    rc = knn_whole(t, z);
    if (rc == SQLITE_OK && z->nready > 0) z->row.score = z->ready[0].score, z->row.id = z->ready[0].id;
    z->eof = z->nready == 0;
  }
  if (rc == SQLITE_OK) rc = cache_sweep(t);
  return rc;
}

int knn_next(VxTab *t, KnnRows *z) {
  if (z->eof) return SQLITE_OK;
  if (z->a.best_first) return best_next(t, z);
  if (++z->i < z->nready) z->row.score = z->ready[z->i].score, z->row.id = z->ready[z->i].id;
  else z->eof = 1;
  return SQLITE_OK;
}

int knn_eof(const KnnRows *z) { return !z || z->eof; }

Hit knn_hit(const KnnRows *z) { return z->row; }

int64_t knn_given_k(const KnnRows *z) { return z ? z->a.given_k : 0; }
