/*
** xFilter and the cursors: a scan of the rows a query's conditions select (vx_scan), and a
** k-nearest query (vx_knn): its arguments read from the plan (knn_args), numeric conditions
** tested on a block's own copy of the values (block_pass), the first pass over each block's
** records (knn_scan, below), then the candidates rescored exactly from their float32 vectors,
** each checked against its record and its location.
*/
#include "vector_index/internal.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/simd.h"

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

int vx_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out) {
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

int vx_close(sqlite3_vtab_cursor *cur) {
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

int vx_filter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr, int argc,
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

int vx_next(sqlite3_vtab_cursor *cur) {
  VxCur *c = (VxCur *)cur;
  if (c->knn) {
    c->eof = ++c->i >= c->nhits;
    return SQLITE_OK;
  }
  int rc = sqlite3_step(c->rows);
  c->eof = rc != SQLITE_ROW;
  return row_in_block((VxTab *)cur->pVtab, c->rows, rc);
}

int vx_eof(sqlite3_vtab_cursor *cur) { return ((VxCur *)cur)->eof; }

int vx_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid) {
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

int vx_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
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
