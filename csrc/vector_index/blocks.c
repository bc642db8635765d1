/*
** A block's rows (vector_index/storage.c has the format): where a row is (vx_find), a
** partition's last block (vx_tail), and one row written into a block's slot (vx_put), with the
** block's count and checksum (vx_set_count) and its growth (vx_grow).  xUpdate (write.c) and
** the rows held (held.c) write through these.
*/
#include "vector_index/internal.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/simd.h"

/*
** The last block of the partition whose values are parts[] (found = 0 when it
** has none).  The partition's last block is remembered: a block that is still
** of that partition and not full is its last, since only a partition's last
** block has free slots.  So most inserts read one block row by its id, and
** only a full block sends them to the partition's index.
*/
int vx_tail(VxTab *t, sqlite3_value *const *parts, BlockRow *out, int *found) {
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
/* A location (T_rowids' block and slot, columns b and s of st) is two integers: SQLite reads a
** blob or text as a number (x'32' as 2, 'm%' as 0), which would put the row in another's place. */
int vx_check_location(VxTab *t, int64_t rowid, sqlite3_stmt *st, int b, int s) {
  static const char *const names[] = {"block", "slot"};
  int at[] = {b, s};
  for (int i = 0; i < 2; i++) {
    sqlite3_value *v = sqlite3_column_value(st, at[i]);
    if (sqlite3_value_type(v) != SQLITE_INTEGER) {
      return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: row %lld is damaged: its %s is of type %s,"
                     " not integer", t->name, rowid, names[i], type_name(v));
    }
  }
  return SQLITE_OK;
}

int vx_find(VxTab *t, int64_t rowid, int64_t *block, int64_t *slot, int *found) {
  int rc;
  sqlite3_stmt *st = vs(t, VS_FIND, &rc);
  if (!st) return rc;
  sqlite3_bind_int64(st, 1, rowid);
  rc = sqlite3_step(st);
  *found = rc == SQLITE_ROW;
  int located = SQLITE_OK;
  if (*found) {
    located = vx_check_location(t, rowid, st, 0, 1);
    *block = sqlite3_column_int64(st, 0);
    *slot = sqlite3_column_int64(st, 1);
  }
  sqlite3_reset(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? located : vx_sql_fail(t, rc);
}

/* Sets a block's count and capacity, with a new nonce. */
int vx_set_count(VxTab *t, const BlockRow *b) {
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

int vx_touch(VxTab *t, int64_t block) {
  sqlite3_int64 nonce = 0;
  int rc = vx_new_nonce(t, block, 0, &nonce);
  return rc ? rc : vx_set_nonce(t, block, nonce);
}

int vx_id_op(VxTab *t, int which, int64_t a, int64_t b) {
  int rc;
  sqlite3_stmt *st = vs(t, which, &rc);
  if (!st) return rc;
  sqlite3_bind_int64(st, 1, a);
  sqlite3_bind_int64(st, 2, b);
  return vs_run(t, st);
}

/* The numeric metadata of one row, as block_bytes keeps it: 8 bytes and a NULL flag a column. */
void num_encode(const VxTab *t, sqlite3_value *const *metas, uint8_t *vals,
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
int blob_put(VxTab *t, sqlite3_blob *h, const void *data, int64_t n, int64_t offset,
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
int put_nums(VxTab *t, sqlite3_blob *h, const BlockRow *b, int64_t slot,
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
int vx_write(VxTab *t, const char *suffix, int64_t id, const void *data, int64_t bytes,
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
int vx_put(VxTab *t, const BlockRow *b, int64_t slot, int64_t rowid, const float *v,
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
int vx_grow(VxTab *t, BlockRow *b) {
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

/* The block row of block `id`, with its partition values bound to VS_TAIL's parameters. */
int vx_block(VxTab *t, int64_t id, BlockRow *out, sqlite3_value **parts, int *found) {
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
int vx_check_slot(VxTab *t, const BlockRow *b, int64_t rowid, int64_t slot) {
  if (slot >= 0 && slot < b->count) return SQLITE_OK;
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: row %lld is in its slot"
                 " %lld, not 0 to %lld", t->name, b->id, rowid, slot, b->count - 1);
}

/* The metadata values of row `rowid`, copied into out[] (sqlite3_value_free them). */
int vx_metas(VxTab *t, int64_t rowid, sqlite3_value **out) {
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
