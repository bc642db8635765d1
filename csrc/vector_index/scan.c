/*
** xFilter and the cursors: a scan of the rows a query's conditions select (vx_scan), and a query
** with MATCH, whose rows knn.c gives (KnnRows) and whose other columns are read here.
*/
#include "vector_index/internal.h"

#include <stdlib.h>
#include <string.h>

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
  if ((rc = vx_check_location(t, rowid, st, RC_BLOCK, RC_SLOT))) return rc;
  if (sqlite3_column_type(st, RC_DIMS) == SQLITE_NULL) {
    return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: row %lld is in block %lld, which is missing",
                   t->name, rowid, block);
  }
  int64_t slot = sqlite3_column_int64(st, RC_SLOT), count = sqlite3_column_int64(st, RC_COUNT);
  if ((rc = vx_check_block(t, block, st, RC_DIMS, RC_CAPACITY, RC_COUNT))) return rc;
  if (slot >= 0 && slot < count) return SQLITE_OK;
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: row %lld is in its slot"
                 " %lld, not 0 to %lld", t->name, block, rowid, slot, count - 1);
}

typedef struct VxCur {
  sqlite3_vtab_cursor base;
  KnnRows *knn;       /* a query with MATCH: its rows */
  int64_t i;          /* the how-manieth row of it this is */
  sqlite3_stmt *rows; /* a scan's rows; with MATCH, the row of number `at` */
  int64_t at;
  int eof;
} VxCur;

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
  knn_close(c->knn);
  sqlite3_finalize(c->rows);
  c->knn = 0, c->rows = 0;
  c->i = 0;
  c->at = -1;
  c->eof = 1;
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
    rc = knn_open(t, idxNum & 2, idxStr, argc, argv, &c->knn);
    c->eof = knn_eof(c->knn);
  } else if (rc == SQLITE_OK) {
    rc = vx_scan(t, c, idxStr, argc, argv);
  }
  t->busy = 0;
  return rc;
}

int vx_next(sqlite3_vtab_cursor *cur) {
  VxCur *c = (VxCur *)cur;
  VxTab *t = (VxTab *)cur->pVtab;
  if (c->knn) { /* best first, the next row may be a round's work: as xFilter, not re-entered */
    if (t->busy) {
      return vx_fail(t, SQLITE_ERROR, "%s: read again while it is being read or written (a"
                     " trigger or view on its shadow tables?)", t->name);
    }
    t->busy = 1;
    int rc = knn_next(t, c->knn);
    t->busy = 0;
    c->i++;
    c->eof = knn_eof(c->knn);
    return rc;
  }
  int rc = sqlite3_step(c->rows);
  c->eof = rc != SQLITE_ROW;
  return row_in_block((VxTab *)cur->pVtab, c->rows, rc);
}

int vx_eof(sqlite3_vtab_cursor *cur) { return ((VxCur *)cur)->eof; }

int vx_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid) {
  VxCur *c = (VxCur *)cur;
  *rowid = c->knn ? knn_hit(c->knn).id : sqlite3_column_int64(c->rows, RC_ROWID);
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
  int64_t id = knn_hit(c->knn).id;
  sqlite3_reset(c->rows);
  sqlite3_bind_int64(c->rows, 1, id);
  rc = sqlite3_step(c->rows);
  if (rc == SQLITE_ROW) {
    c->at = c->i;
    return row_in_block(t, c->rows, rc);
  }
  return rc == SQLITE_DONE ? vx_fail(t, SQLITE_ERROR, "%s: row %lld was deleted while it was read",
                                     t->name, id)
                           : vx_sql_fail(t, rc);
}

int vx_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  VxCur *c = (VxCur *)cur;
  VxTab *t = (VxTab *)cur->pVtab;
  if (col == VX_SCORE(t)) {
    if (c->knn) sqlite3_result_double(ctx, knn_hit(c->knn).score);
    return SQLITE_OK;
  }
  if (col == VX_K(t)) { /* k = N's N; NULL without one (LIMIT, or every row) */
    if (knn_given_k(c->knn)) sqlite3_result_int64(ctx, knn_given_k(c->knn));
    return SQLITE_OK;
  }
  if (c->knn && col == t->alias) {
    sqlite3_result_int64(ctx, knn_hit(c->knn).id);
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
