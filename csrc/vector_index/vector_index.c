/*
** vector_index, a virtual table module that owns its vectors:
**
**   create virtual table T using vector_index(COLUMN float[D], ...)
**       a table that owns its vectors; its k-nearest query is the fast form
**       of cosine_topk.  select rowid, score from T where COLUMN match :q
**       and k = 10 and project = 'x'
**
** Requirement 10 (the numbers are the extension's: 1 to 9, which this one cites, are
** functions/scalar.c's):
**
** 10. vector_index is a virtual table module.  Its declaration names one
**    vector column, NAME float[D] (every row has D dimensions) or NAME float[]
**    (the rows of one partition share theirs); at most one NAME integer primary
**    key, another name for the rowid; and up to 24 columns NAME TYPE, TYPE text,
**    integer or real, each a partition column with "partition key" after it,
**    else a metadata column.  A row's vector is read as Requirement 1 and must
**    not be NULL; a partition or metadata value is NULL or of its column's type
**    (an integer is taken for a real).  score and k are hidden columns.  A query
**    "VECTOR match Q and k = K" gives the K rows most like Q among those its
**    other conditions select, with score the cosine of Requirement 4: the
**    same rows and scores as cosine_topk(Q, K, rowid, VECTOR) over those rows,
**    best first, ties by rowid.  The conditions applied before the top k are
**    those SQLite hands the table: comparisons (=, <, <=, >, >=, !=, IS, IS
**    NOT, IS NULL, IS NOT NULL, LIKE, GLOB, IN) of the rowid, a partition
**    column or a metadata column with a value, every one of them, and the ORs
**    SQLite reads as one of them (x = 1 or x = 2 as an IN list).  SQLite hands
**    no virtual table another OR, NOT IN, an expression of a column or another
**    table's column: it applies those to the K rows, and "rowid in (select
**    rowid from T where ...)" applies them first.  With k, a condition SQLite
**    hands over that the table cannot apply first (LIKE or GLOB on the rowid,
**    another collation, score other than >, >= and IS [NOT] NULL, the vector
**    compared with a value) is an error, never fewer rows.  Without k, the
**    query gives every row its conditions select, best first (k NULL), and
**    SQLite applies the rest, the ORDER BY and the LIMIT: "order by score desc
**    limit N" is the N best of the rows every condition selects (scored alone
**    where SQLite hands the LIMIT over, which it does only with every
**    condition, vx_best_index; otherwise, where SQLite takes the rows in that
**    order, they are made best first as it asks for them, knn.c, so it stops
**    after N that pass its own conditions).  A NULL Q gives no rows.  The
**    first pass bounds each row's cosine from its int8 record (rec_build) and
**    the rows that could be in the top k are rescored exactly, so the answer
**    is exact whatever the data.  Without MATCH, the table is an ordinary
**    table of its columns.  INSERT, UPDATE (of any column, the rowid too) and
**    DELETE work as on a table, with ON CONFLICT REPLACE and IGNORE for the
**    rowid; a table's rows live in its shadow tables, written in the
**    statement's transaction, so any connection reads them straight from the
**    file.
**
** The module's files are listed in vector_index/internal.h, lowest first; this one holds the
** table of the module's methods and registers it.
*/
#include "vector_index/vector_index.h"

#include "vector_index/internal.h"

static sqlite3_module vx_module = {
    .iVersion = 4,
    .xCreate = vx_create,
    .xConnect = vx_connect,
    .xBestIndex = vx_best_index,
    .xDisconnect = vx_disconnect,
    .xDestroy = vx_destroy,
    .xOpen = vx_open,
    .xClose = vx_close,
    .xFilter = vx_filter,
    .xNext = vx_next,
    .xEof = vx_eof,
    .xColumn = vx_column,
    .xRowid = vx_rowid,
    .xUpdate = vx_xupdate,
    .xRename = vx_rename,
    .xBegin = vx_begin,
    .xSync = vx_sync,
    .xRollback = vx_rollback,
    .xSavepoint = vx_savepoint,
    .xRelease = vx_release,
    .xRollbackTo = vx_rollback_to,
    .xShadowName = vx_shadow_name,
    .xIntegrity = vx_integrity,
};

int hs_vector_index_register(sqlite3 *db, const char **failed) {
  vtab_in_ok = sqlite3_libversion_number() >= 3038000;
  int rc = sqlite3_create_module_v2(db, "vector_index", &vx_module, 0, 0);
  if (rc != SQLITE_OK) {
    *failed = "vector_index";
    return rc;
  }
  rc = register_match(db); /* so that `embedding MATCH ?` parses, in a view too */
  if (rc != SQLITE_OK) *failed = "match";
  return rc;
}
