/*
** Rows appended one after another, held and written together (Appended in internal.h): the
** rows a write transaction appends to a partition's last block are kept in memory and written
** as one (vx_flush) before anything reads or changes the table, at a savepoint's start and end
** and at the commit.  vx_append is every append's way in: it holds the row when it can.
*/
#include "vector_index/internal.h"

#include <stdlib.h>
#include <string.h>

/* Forgets the rows held (a rollback), keeping the memory for the next ones. */
void app_clear(VxTab *t) {
  Appended *a = &t->app;
  for (int i = 0; i < HS_MAX_FILTERS; i++) {
    sqlite3_value_free(a->parts[i]);
    a->parts[i] = 0;
  }
  a->block = a->n = 0;
}

void app_free(VxTab *t) {
  Appended *a = &t->app;
  app_clear(t);
  sqlite3_free(a->recs);
  sqlite3_free(a->vecs);
  sqlite3_free(a->nums);
  sqlite3_free(a->scratch);
  memset(a, 0, sizeof(*a));
}

/* Whether a row of these partition values and dimensions goes to the rows held. */
int app_takes(VxTab *t, sqlite3_value *const *parts, int64_t d) {
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
int vx_flush(VxTab *t) {
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
int vx_append(VxTab *t, int64_t rowid, const float *v, int64_t d,
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
