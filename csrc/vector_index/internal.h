/*
** What the files of vector_index/ share, and nothing outside them includes (as SQLite's
** btreeInt.h is to btree.c): the table's state (VxTab), its storage's constants and layout, and
** the functions one file of the module calls in another.  The files, lowest first (each calls
** only those before it):
**
**   storage.c    the storage format: the shadow tables, a block's layout, checksums (format 3),
**                errors, the shadow statements and reading rows
**   blocks.c     a block's rows: where a row is, a partition's last block, writing one row
**   held.c       rows appended one after another, held and written together (Appended)
**   cache.c      the per-connection cache of blocks' records
**   plan.c       xBestIndex: the plan of a query, and match()
**   knn.c        a query with MATCH: k = N, or every row best first (KnnRows)
**   scan.c       xFilter and the cursors: a scan, or a query with MATCH
**   write.c      xUpdate, and the transaction methods
**   table.c      the declaration, xCreate and xConnect, xDestroy, xRename
**   integrity.c  xIntegrity
**   vector_index.c  Requirement 10, the module's methods, and its registration
*/
#ifndef HYBRIDSQL_VECTOR_INDEX_INTERNAL_H
#define HYBRIDSQL_VECTOR_INDEX_INTERNAL_H
#include "common.h"
#include "functions/args.h"
#include "kernels/topk.h"
#include "sqlite3ext.h"

#define HS_BLOCK_ROWS 256
#define HS_BLOCK_MIN 16
#define HS_GROUP_BYTES 16384
#define HS_MAX_FILTERS 24        /* partition and metadata columns together */
#define HS_CACHE_BYTES ((size_t)4 << 30) /* per table and connection */
#define HS_SWEEP_EVERY 256       /* queries between sweeps of dropped blocks */
#define HS_FORMAT 3
#define HS_TAILS 64 /* partitions whose last block a table remembers */
#define HS_LAYOUTS 4 /* layouts (one per number of dimensions) a table remembers */

/*
** The layout of a block: rows in a full block, and rows in one T_vectors group
** (a block's groups are ceil(rows / group) rows each, the last one too).
*/
typedef struct Layout {
  int64_t dims, rows, group;
} Layout;

enum { VX_VECTOR = 1, VX_ALIAS, VX_PARTITION, VX_METADATA };
enum { VX_TEXT = 1, VX_INTEGER, VX_REAL };
extern const char *const VX_TYPES[]; /* by type: its name in SQL */

typedef struct VxCol {
  char *name;
  int role;   /* VX_VECTOR, VX_ALIAS, VX_PARTITION or VX_METADATA */
  int type;   /* VX_TEXT, VX_INTEGER or VX_REAL: partition and metadata columns */
  int shadow; /* its number among the partition columns (p0...) or metadata (m0...) */
  int num;    /* a numeric metadata column: its number among them (block_bytes), else -1 */
} VxCol;

/* A block's records as a connection last read them. */
typedef struct CBlock {
  int64_t id, nonce, count, dims, capacity;
  size_t bytes;
  uint8_t *buf;
  uint64_t used; /* the query that last used it */
} CBlock;

/* A block as a query's block list gives it; parts: the hash of its partition values
** (hash_values), which its checksum covers. */
typedef struct BlockRef {
  int64_t id, dims, capacity, count, nonce;
  uint64_t parts;
} BlockRef;

/*
** The buffers of cached full blocks (the most, by far), as slots of 2 MiB-aligned
** regions advised for transparent huge pages: a cache filled in 4 KiB pages pays
** a page fault per 4 KiB, most of a fill's time.  Other sizes come from malloc.
** Regions are given back when the cache goes.
*/
typedef struct Pool {
  size_t slot, region; /* the bytes of a full block's records, and of a region; 0 at first */
  uint8_t **regions, **free;
  int64_t nregions, nfree, capfree;
} Pool;

typedef struct Cache {
  CBlock *b;
  int64_t n, cap;
  I64Map at;         /* block id -> index in b */
  I64Map seen;       /* block id -> the nonce it had when last read and not kept */
  Pool pool;         /* where the records of cached full blocks are */
  uint8_t *scratch;  /* where a block not kept is read */
  size_t scratch_cap, bytes;
  uint64_t clock, sweep;
} Cache;

/* The prepared statements on the shadow tables, made when first needed. */
enum {
  VS_TAIL,
  VS_BLOCK,
  VS_NEW_BLOCK,
  VS_NEW_CODES,
  VS_GROW,
  VS_SET_COUNT,
  VS_TOUCH,
  VS_DROP_BLOCK,
  VS_DROP_CODES,
  VS_DROP_GROUPS,
  VS_NEW_GROUP,
  VS_DROP_GROUP,
  VS_FIND,
  VS_ADD_ROW,
  VS_MOVE_ROW,
  VS_DROP_ROW,
  VS_SET_META,
  VS_MAX_ROWID,
  VS_COUNT
};

/*
** Rows that a write transaction appends one after another to a partition's
** last block, kept here and written together (their records and numeric
** metadata in one write of the block's T_codes row, their vectors a group at a
** time, the block's count and checksum once) rather than each by itself:
** vx_flush.  Their T_rowids rows go in at once, so every check of a later row
** sees them.  They are written before
** anything else reads or changes the table through this connection (xFilter, a
** delete or update, integrity_check, a rename), when a savepoint begins or ends
** (a statement's too: xSavepoint, xRelease) and at the commit (xSync); a rollback
** forgets them.  Only this connection's reads of the shadow tables themselves,
** within the transaction and outside any savepoint, could miss them: the numpy
** reader (vectors.py) reads in a savepoint of its own.
*/
typedef struct Appended {
  int64_t block, dims, capacity, count; /* the block as T_blocks has it; block 0: none */
  sqlite3_value *parts[HS_MAX_FILTERS]; /* its partition's values */
  int64_t n, cap;                       /* rows held, and room for them */
  uint8_t *recs;  /* their records, rec_stride(dims) bytes each */
  float *vecs;    /* their vectors, dims floats each */
  uint8_t *nums;  /* their numeric metadata, 9 * nnum bytes each: values, then NULL flags */
  uint8_t *scratch; /* a group of vectors, or a numeric column, as it is written */
  int64_t scratch_cap;
} Appended;

typedef struct VxTab {
  sqlite3_vtab base;
  sqlite3 *db;
  char *schema, *name;
  int ncol, vec, alias, npart, nmeta, nnum;
  VxCol *col;
  int64_t dims; /* D of float[D]; 0 for float[], one D per partition */
  int busy;     /* inside a method that reads or writes the shadow tables */
  int64_t rows; /* for xBestIndex's costs */
  int64_t page; /* format 2: the page size its layout is made for; 0: format 1 */
  int64_t format; /* T_info's format: 3 keeps checksums as nonces; -1: to be read again */
  int upgrade;    /* a transaction began: its first write makes an older format 3 */
  I64Map pending; /* format 3, within one xUpdate: block -> what its writes added to its sum */
  Layout layouts[HS_LAYOUTS];
  int nlayouts;
  int64_t tails[HS_TAILS]; /* by a hash of partition values: a block that was its last */
  Cache cache;
  sqlite3_stmt *st[VS_COUNT];
  char *broken; /* xConnect found the shadow tables damaged: what every use of it says */
  Appended app; /* rows appended and not yet written */
  uint64_t writes; /* changes by every write through this connection, and every rollback */
} VxTab;

#define VX_SCORE(t) ((t)->ncol)
#define VX_K(t) ((t)->ncol + 1)

/* A block as T_blocks has it. */
typedef struct BlockRow {
  int64_t id, dims, capacity, count;
} BlockRow;

/*
** idxStr: one token of 5 characters per argument xFilter gets, in order: the
** role (M the MATCH vector, K k, L LIMIT, O OFFSET, R the rowid, P a
** partition column, X a metadata column), the column as two hex digits, the
** operator (see op_sql; I is an IN list handed over whole), and the
** collation (b binary, n nocase, r rtrim).
*/
#define VX_TOKEN 5

/* Values to bind, in order; copies, because IN lists' values do not outlive their step. */
typedef struct Binds {
  sqlite3_value **v;
  int n, cap;
} Binds;

/* The functions one file calls in another, by the file that defines them; each one's comment is
** at its definition. */

/* ---- storage.c ---- */
int add_pending(VxTab *t, int64_t id, uint64_t x);
void append_cols(sqlite3_str *s, const char *prefix, char letter, int n, int lead_comma);
int binds_add(Binds *b, sqlite3_value *v);
void binds_free(Binds *b);
int64_t block_bytes(const VxTab *t, int64_t cap, int64_t d);
uint64_t block_head(int64_t id, int64_t dims, int64_t capacity, int64_t count,
                    uint64_t parts);
int64_t block_of(const char *suffix, int64_t id);
char *block_problem(VxTab *t, int64_t id, sqlite3_value *dims, sqlite3_value *cap,
                    sqlite3_value *count, int64_t min_count);
int fits(const VxCol *c, sqlite3_value *v);
void free_values(sqlite3_value **v, int n);
sqlite3_int64 fresh_nonce(void);
int64_t group_id(const Layout *l, int64_t block, int64_t slot);
uint64_t hash_values(sqlite3_value *const *v, int n);
int64_t num_offset(int64_t cap, int64_t d, int num);
sqlite3_stmt *prepare_bound(VxTab *t, sqlite3_str *sql, Binds *b, int *rc);
int same_value(sqlite3_value *a, sqlite3_value *b);
sqlite3_stmt *vs(VxTab *t, int which, int *rc);
int vs_run(VxTab *t, sqlite3_stmt *st);
int vx_blob(VxTab *t, sqlite3_blob **h, const char *suffix, int64_t id, int write);
void vx_blob_close(sqlite3_blob **h);
int vx_blob_read(VxTab *t, sqlite3_blob *h, void *out, int64_t bytes, int64_t offset,
                 const char *what, int64_t id);
int vx_block_ref(VxTab *t, int64_t id, BlockRef *r, uint64_t *parts, int *found);
int vx_check_block(VxTab *t, int64_t id, sqlite3_stmt *st, int dims, int cap, int count);
int vx_codes_length(VxTab *t, sqlite3_blob *h, const BlockRef *r);
int vx_exec(sqlite3 *db, char **err, const char *fmt, ...);
int vx_fail(VxTab *t, int rc, const char *fmt, ...);
int vx_format(VxTab *t);
int vx_group(VxTab *t, sqlite3_blob **h, int64_t gid, int64_t d);
int vx_int(sqlite3 *db, const char *sql, int64_t *out);
const Layout *vx_layout(VxTab *t, int64_t d);
int vx_new_nonce(VxTab *t, int64_t id, const BlockRow *b, sqlite3_int64 *nonce);
int vx_read_vector(VxTab *t, sqlite3_blob **h, int64_t block, int64_t slot, int64_t dims,
                   float *out);
int vx_seal_new(VxTab *t, int64_t id);
int vx_set_nonce(VxTab *t, int64_t block, sqlite3_int64 nonce);
int vx_sql_fail(VxTab *t, int rc);
int vx_take(VxTab *t, char *msg);
int vx_verify(VxTab *t, const BlockRef *r, const uint8_t *buf, int64_t bytes);

/* ---- blocks.c ---- */
int blob_put(VxTab *t, sqlite3_blob *h, const void *data, int64_t n, int64_t offset,
             const char *what, int64_t id);
void num_encode(const VxTab *t, sqlite3_value *const *metas, uint8_t *vals,
                uint8_t *nulls);
int put_nums(VxTab *t, sqlite3_blob *h, const BlockRow *b, int64_t slot,
             const uint8_t *vals, const uint8_t *nulls);
int vx_block(VxTab *t, int64_t id, BlockRow *out, sqlite3_value **parts, int *found);
int vx_check_slot(VxTab *t, const BlockRow *b, int64_t rowid, int64_t slot);
int vx_check_location(VxTab *t, int64_t rowid, sqlite3_stmt *st, int b, int s);
int vx_find(VxTab *t, int64_t rowid, int64_t *block, int64_t *slot, int *found);
int vx_grow(VxTab *t, BlockRow *b);
int vx_id_op(VxTab *t, int which, int64_t a, int64_t b);
int vx_metas(VxTab *t, int64_t rowid, sqlite3_value **out);
int vx_put(VxTab *t, const BlockRow *b, int64_t slot, int64_t rowid, const float *v,
           sqlite3_value *const *metas, int append);
int vx_set_count(VxTab *t, const BlockRow *b);
int vx_tail(VxTab *t, sqlite3_value *const *parts, BlockRow *out, int *found);
int vx_touch(VxTab *t, int64_t block);
int vx_write(VxTab *t, const char *suffix, int64_t id, const void *data, int64_t bytes,
             int64_t offset);

/* ---- held.c ---- */
void app_clear(VxTab *t);
void app_free(VxTab *t);
int app_takes(VxTab *t, sqlite3_value *const *parts, int64_t d);
int vx_append(VxTab *t, int64_t rowid, const float *v, int64_t d,
              sqlite3_value *const *parts, sqlite3_value *const *metas, int hold);
int vx_flush(VxTab *t);

/* ---- cache.c ---- */
int block_records(VxTab *t, const BlockRef *r, sqlite3_blob **h, uint8_t **buf,
                  int *fresh, int *read);
void cache_clear(Cache *c);
void cache_keep(Cache *c, const BlockRef *r, size_t bytes, uint8_t *buf);
int cache_sweep(VxTab *t);
void pool_put(Pool *p, uint8_t *buf);
int64_t read_bytes(const VxTab *t, const BlockRef *r);

/* ---- plan.c ---- */
extern int vtab_in_ok;
int add_cond(sqlite3_str *sql, Binds *b, const char *column, char op, char coll,
             sqlite3_value *arg);
const char *op_sql(char op);
int register_match(sqlite3 *db);
int vx_best_index(sqlite3_vtab *vt, sqlite3_index_info *info);

/* ---- knn.c ---- */
typedef struct KnnRows KnnRows;
void knn_close(KnnRows *z);
int knn_eof(const KnnRows *z);
int64_t knn_given_k(const KnnRows *z);
Hit knn_hit(const KnnRows *z);
int knn_next(VxTab *t, KnnRows *z);
int knn_open(VxTab *t, int lazy, const char *plan, int argc, sqlite3_value **argv,
             KnnRows **out);

/* ---- the module's methods (vector_index.c's table of them) ---- */
int vx_close(sqlite3_vtab_cursor *cur);
int vx_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col);
int vx_eof(sqlite3_vtab_cursor *cur);
int vx_filter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr, int argc,
              sqlite3_value **argv);
int vx_next(sqlite3_vtab_cursor *cur);
int vx_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out);
int vx_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid);
int vx_begin(sqlite3_vtab *vt);
int vx_release(sqlite3_vtab *vt, int n);
int vx_rollback(sqlite3_vtab *vt);
int vx_rollback_to(sqlite3_vtab *vt, int n);
int vx_savepoint(sqlite3_vtab *vt, int n);
int vx_sync(sqlite3_vtab *vt);
int vx_xupdate(sqlite3_vtab *vt, int argc, sqlite3_value **argv, sqlite3_int64 *out);
int vx_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
               sqlite3_vtab **out, char **err);
int vx_create(sqlite3 *db, void *aux, int argc, const char *const *argv,
              sqlite3_vtab **out, char **err);
int vx_destroy(sqlite3_vtab *vt);
int vx_disconnect(sqlite3_vtab *vt);
int vx_rename(sqlite3_vtab *vt, const char *to);
int vx_shadow_name(const char *suffix);
int vx_integrity(sqlite3_vtab *vt, const char *schema, const char *name, int flags,
                 char **err);

#endif
