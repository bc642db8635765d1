/*
** xUpdate (INSERT, UPDATE, DELETE, with ON CONFLICT REPLACE and IGNORE for the rowid) and the
** transaction methods: a delete moves its partition's last row into the hole (vx_remove), an
** insert appends (held.c's vx_append), an update writes in place or moves the row; and a table
** of format 1 or 2 becomes format 3 in its first write transaction (vx_upgrade).
*/
#include "vector_index/internal.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/simd.h"

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
int vx_begin(sqlite3_vtab *vt) {
  VxTab *t = (VxTab *)vt;
  t->format = -1;
  t->upgrade = 1;
  app_clear(t);
  return SQLITE_OK;
}

/* The commit: the rows held are written first. */
int vx_sync(sqlite3_vtab *vt) {
  return vx_flush((VxTab *)vt);
}

/* SQLite rolls a statement back through xRollbackTo only in tables that have an xSavepoint.
** The rows held are written before a savepoint begins, so that those held after it are
** all its own: what a rollback to it forgets. */
int vx_savepoint(sqlite3_vtab *vt, int n) {
  (void)n;
  return vx_flush((VxTab *)vt);
}

/* A savepoint ends (a statement's, at the statement's end): its rows are written. */
int vx_release(sqlite3_vtab *vt, int n) {
  (void)n;
  return vx_flush((VxTab *)vt);
}

/* What was rolled back may have been an upgrade: the format is read again when next needed.
** The rows held are forgotten (their T_rowids rows are rolled back with the rest). */
int vx_rollback(sqlite3_vtab *vt) {
  VxTab *t = (VxTab *)vt;
  t->format = -1;
  t->writes++;
  app_clear(t);
  return SQLITE_OK;
}

int vx_rollback_to(sqlite3_vtab *vt, int n) {
  (void)n;
  return vx_rollback(vt);
}


int vx_xupdate(sqlite3_vtab *vt, int argc, sqlite3_value **argv, sqlite3_int64 *out) {
  VxTab *t = (VxTab *)vt;
  if (t->broken) return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s", t->broken);
  if (t->busy) {
    return vx_fail(t, SQLITE_ERROR, "%s: written while it is being read or written (a trigger"
                   " or view on its shadow tables?)", t->name);
  }
  t->busy = 1;
  t->writes++; /* a query handing rows best first goes on from the table as it is now */
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
