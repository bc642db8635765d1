/*
** PRAGMA integrity_check and quick_check on a vector_index table (xIntegrity, SQLite 3.44 and
** later).
*/
#include "vector_index/internal.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/simd.h"

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
int vx_integrity(sqlite3_vtab *vt, const char *schema, const char *name, int flags,
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
