/*
** vector_index's storage format (Requirement 10 is in vector_index.c): a table's rows live in
** shadow tables of the same database:
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
**
** Here: a block's layout (layout_v1, layout_v2), its checksum (block_head and codes_sum,
** vx_new_nonce, vx_verify), the errors every part reports (vx_fail; damage is block_problem's),
** the prepared statements on the shadow tables (vs) and the reads of a row's bytes (vx_blob).
*/
#include "vector_index/internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/simd.h"

/*
** A block's data (T_codes.data) for `cap` rows of d dimensions: the records,
** then for each numeric (integer or real) metadata column its values, 8 bytes
** each (int64 or double), and a NULL flag per row (1 byte; the flags padded
** to 8 bytes), so that a filter on one reads a few bytes a row.
*/
static int64_t num_area(int64_t cap) { return cap * 8 + ((cap + 7) & ~(int64_t)7); }

int64_t num_offset(int64_t cap, int64_t d, int num) {
  return cap * rec_stride(d) + num * num_area(cap);
}

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

const char *const VX_TYPES[] = {"", "text", "integer", "real"};

int64_t group_id(const Layout *l, int64_t block, int64_t slot) {
  return block * 256 + slot / l->group;
}

sqlite3_int64 fresh_nonce(void) {
  sqlite3_int64 x;
  sqlite3_randomness(sizeof(x), &x);
  return x;
}


/* The bytes of a block's data for `cap` rows of d dimensions (num_offset). */
int64_t block_bytes(const VxTab *t, int64_t cap, int64_t d) {
  return num_offset(cap, d, t->nnum);
}

/* The layout of blocks of vectors of d dimensions. */
const Layout *vx_layout(VxTab *t, int64_t d) {
  for (int i = 0; i < t->nlayouts; i++) {
    if (t->layouts[i].dims == d) return &t->layouts[i];
  }
  int i = t->nlayouts < HS_LAYOUTS ? t->nlayouts++ : (int)(d % HS_LAYOUTS);
  t->layouts[i] = t->page ? layout_v2(t->page, d, t->nnum) : layout_v1(d);
  return &t->layouts[i];
}

/* ---- errors ---- */

int vx_fail(VxTab *t, int rc, const char *fmt, ...) {
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
int vx_sql_fail(VxTab *t, int rc) {
  if (rc == SQLITE_NOMEM) return rc;
  const char *msg = sqlite3_errmsg(t->db);
  size_t n = strlen(t->name);
  if (strncmp(msg, t->name, n) == 0 && msg[n] == ':') return vx_fail(t, rc, "%s", msg); /* ours */
  return vx_fail(t, rc, "%s: %s", t->name, msg);
}

/* Takes a message from parse_vector() (or NOMEM). */
int vx_take(VxTab *t, char *msg) {
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
char *block_problem(VxTab *t, int64_t id, sqlite3_value *dims, sqlite3_value *cap,
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
int vx_check_block(VxTab *t, int64_t id, sqlite3_stmt *st, int dims, int cap, int count) {
  char *msg = block_problem(t, id, sqlite3_column_value(st, dims), sqlite3_column_value(st, cap),
                            sqlite3_column_value(st, count), 0);
  if (!msg) return SQLITE_OK;
  if (msg == NOMEM) return SQLITE_NOMEM;
  sqlite3_free(t->base.zErrMsg);
  t->base.zErrMsg = msg;
  return SQLITE_CORRUPT_VTAB;
}

/* ---- the shadow statements ---- */

/* "p0, p1" or "b.p0, b.p1" (prefix) for the partition columns; likewise m for metadata. */
void append_cols(sqlite3_str *s, const char *prefix, char letter, int n, int lead_comma) {
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
sqlite3_stmt *vs(VxTab *t, int which, int *rc) {
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
int vs_run(VxTab *t, sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : vx_sql_fail(t, rc);
}

/* Runs SQL that returns no rows, built with sqlite3_mprintf; for xCreate, xDestroy, xRename. */
int vx_exec(sqlite3 *db, char **err, const char *fmt, ...) {
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

int binds_add(Binds *b, sqlite3_value *v) {
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

void binds_free(Binds *b) {
  free_values(b->v, b->n);
  sqlite3_free(b->v);
  memset(b, 0, sizeof(*b));
}

/* Prepares sql (consumed) with the values b; NULL after setting the error. */
sqlite3_stmt *prepare_bound(VxTab *t, sqlite3_str *sql, Binds *b, int *rc) {
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

/* ---- reading rows ---- */

/* The block a row of T_codes (its id) or T_vectors (a group: block * 256 + n) belongs to. */
int64_t block_of(const char *suffix, int64_t id) {
  return strcmp(suffix, "codes") == 0 ? id : id / 256;
}

/*
** Opens (or moves) a read or write handle on a shadow table's data column.  A
** row that is missing or not a BLOB, or a shadow table that is gone or is a
** view, is SQLITE_ERROR from SQLite, and damage here; every other error
** (interrupted, busy, locked, I/O, out of memory) is reported as itself.
*/
int vx_blob(VxTab *t, sqlite3_blob **h, const char *suffix, int64_t id, int write) {
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

void vx_blob_close(sqlite3_blob **h) {
  if (*h) sqlite3_blob_close(*h);
  *h = 0;
}

/* Reads `bytes` at `offset` of an open handle, checking that they are there. */
int vx_blob_read(VxTab *t, sqlite3_blob *h, void *out, int64_t bytes, int64_t offset,
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
int vx_group(VxTab *t, sqlite3_blob **h, int64_t gid, int64_t d) {
  int rc = vx_blob(t, h, "vectors", gid, 0);
  int64_t want = 4 * d * vx_layout(t, d)->group;
  if (rc || sqlite3_blob_bytes(*h) == want) return rc;
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: its vectors row %lld has %d"
                 " bytes, not %lld", t->name, gid / 256, gid, sqlite3_blob_bytes(*h), want);
}

/* The float32 vector of (block, slot) into out (dims floats), through handle *h. */
int vx_read_vector(VxTab *t, sqlite3_blob **h, int64_t block, int64_t slot, int64_t dims,
                   float *out) {
  const Layout *l = vx_layout(t, dims);
  int64_t gid = group_id(l, block, slot), off = (slot % l->group) * 4 * dims;
  int rc = vx_group(t, h, gid, dims);
  return rc ? rc : vx_blob_read(t, *h, out, 4 * dims, off, "vectors", gid);
}


uint64_t hash_values(sqlite3_value *const *v, int n) {
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

/* ---- format 3's checksums ---- */


/* What a block's row adds to the sum of its T_codes row to make its checksum. */
uint64_t block_head(int64_t id, int64_t dims, int64_t capacity, int64_t count,
                    uint64_t parts) {
  return mix64((uint64_t)id ^ 0x243f6a8885a308d3ULL) + mix64((uint64_t)dims ^ 0x13198a2e03707344ULL) +
         mix64((uint64_t)capacity ^ 0xa4093822299f31d0ULL) +
         mix64((uint64_t)count ^ 0x082efa98ec4e6c89ULL) + parts;
}

/* T_info's format into t->format: 1 when it has none (format 1 wrote none). */
int vx_format(VxTab *t) {
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
int vx_block_ref(VxTab *t, int64_t id, BlockRef *r, uint64_t *parts, int *found) {
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

int vx_set_nonce(VxTab *t, int64_t block, sqlite3_int64 nonce) {
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
int vx_new_nonce(VxTab *t, int64_t id, const BlockRow *b, sqlite3_int64 *nonce) {
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
int add_pending(VxTab *t, int64_t id, uint64_t x) {
  int64_t was = 0;
  map_find(&t->pending, id, &was);
  return map_put(&t->pending, id, (int64_t)((uint64_t)was + x)) ? SQLITE_OK : SQLITE_NOMEM;
}

/* A new block's checksum: its row's, with a T_codes row of zeros. */
int vx_seal_new(VxTab *t, int64_t id) {
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

void free_values(sqlite3_value **v, int n) {
  for (int i = 0; i < n; i++) {
    sqlite3_value_free(v[i]);
    v[i] = 0;
  }
}

/* Requirement 1 for a value of a partition or metadata column: NULL or the declared type. */
int fits(const VxCol *c, sqlite3_value *v) {
  int type = sqlite3_value_type(v);
  return type == SQLITE_NULL || (c->type == VX_TEXT && type == SQLITE_TEXT) ||
         (c->type == VX_INTEGER && type == SQLITE_INTEGER) ||
         (c->type == VX_REAL && (type == SQLITE_FLOAT || type == SQLITE_INTEGER));
}

/* A partition value as it is stored in the block row, compared with a new one. */
int same_value(sqlite3_value *a, sqlite3_value *b) {
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

/* A block's T_codes row is exactly as long as its capacity and dims make it. */
int vx_codes_length(VxTab *t, sqlite3_blob *h, const BlockRef *r) {
  int64_t want = block_bytes(t, r->capacity, r->dims);
  if (sqlite3_blob_bytes(h) == want) return SQLITE_OK;
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: its codes row has %d bytes,"
                 " not %lld", t->name, r->id, sqlite3_blob_bytes(h), want);
}

/* Format 3: the `bytes` of block r's T_codes row at buf (all of it) add up to its checksum. */
int vx_verify(VxTab *t, const BlockRef *r, const uint8_t *buf, int64_t bytes) {
  if (t->format < 3) return SQLITE_OK;
  if ((uint64_t)r->nonce ==
      block_head(r->id, r->dims, r->capacity, r->count, r->parts) + codes_sum(buf, bytes, 0))
    return SQLITE_OK;
  return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s: block %lld is damaged: its records, count or"
                 " partition do not match its checksum", t->name, r->id);
}

/* One integer that a query gives, into *out. */
int vx_int(sqlite3 *db, const char *sql, int64_t *out) {
  sqlite3_stmt *st = 0;
  int rc = sql ? sqlite3_prepare_v2(db, sql, -1, &st, 0) : SQLITE_NOMEM;
  if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) *out = sqlite3_column_int64(st, 0);
  if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
  sqlite3_finalize(st);
  return rc;
}
