/*
** A table's life: its declaration (vector_index(embedding float[384], project text partition
** key, ...), read by vx_parse), xCreate and xConnect (the shadow tables made, or read and
** checked), xDisconnect, xDestroy, xRename and xShadowName.
*/
#include "vector_index/internal.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/vectext.h"

static int ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         (unsigned char)c >= 0x80;
}

/* Reads a column name at *s (bare or quoted with "", `` or []); NULL for none or out of memory. */
static char *read_name(const char **s) {
  const char *p = *s;
  while (is_ws(*p)) p++;
  char open = *p, close = open == '[' ? ']' : open;
  if (open == '"' || open == '`' || open == '[') {
    sqlite3_str *out = sqlite3_str_new(0);
    for (p++; *p; p++) {
      if (*p == close) {
        if (close != ']' && p[1] == close) {
          sqlite3_str_appendchar(out, 1, close);
          p++;
          continue;
        }
        break;
      }
      sqlite3_str_appendchar(out, 1, *p);
    }
    if (*p != close || sqlite3_str_length(out) == 0) {
      sqlite3_free(sqlite3_str_finish(out));
      return 0;
    }
    *s = p + 1;
    return sqlite3_str_finish(out);
  }
  const char *start = p;
  while (ident_char(*p)) p++;
  if (p == start) return 0;
  *s = p;
  return sqlite3_mprintf("%.*s", (int)(p - start), start);
}

/* sqlite3_str_finish(), but "" (not NULL) for an empty string; NULL when out of memory. */
static char *str_finish(sqlite3_str *s) {
  int err = sqlite3_str_errcode(s);
  char *out = sqlite3_str_finish(s);
  if (err != SQLITE_OK) {
    sqlite3_free(out);
    return 0;
  }
  return out ? out : sqlite3_mprintf("");
}

/* The words after the name, lower case, one space between them. */
static char *read_words(const char *s) {
  sqlite3_str *out = sqlite3_str_new(0);
  int space = 0;
  for (; *s; s++) {
    if (is_ws(*s)) {
      space = sqlite3_str_length(out) > 0;
      continue;
    }
    if (space) sqlite3_str_appendchar(out, 1, ' ');
    space = 0;
    char c = *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s;
    sqlite3_str_appendchar(out, 1, c);
  }
  return str_finish(out);
}

/* float[N] or float[] (*dims 0); 0 when the words are not a vector type. */
static int vector_type(const char *w, int64_t *dims) {
  if (strncmp(w, "float[", 6) != 0) return 0;
  const char *p = w + 6;
  int64_t n = 0;
  while (*p >= '0' && *p <= '9' && n <= HS_MAX_DIMS) n = n * 10 + (*p++ - '0');
  if (strcmp(p, "]") != 0) return 0;
  *dims = p == w + 6 ? 0 : (n >= 1 && n <= HS_MAX_DIMS ? n : -1);
  return 1;
}

static void vx_free_cols(VxTab *t) {
  for (int i = 0; i < t->ncol; i++) sqlite3_free(t->col[i].name);
  sqlite3_free(t->col);
  t->col = 0;
  t->ncol = 0;
}

static int vx_parse(VxTab *t, int argc, const char *const *argv, char **err) {
  int n = argc - 3;
  t->vec = t->alias = -1;
  t->col = sqlite3_malloc64(sizeof(VxCol) * (sqlite3_uint64)(n > 0 ? n : 1));
  if (!t->col) return SQLITE_NOMEM;
  memset(t->col, 0, sizeof(VxCol) * (size_t)(n > 0 ? n : 1));
  for (int i = 0; i < n; i++) {
    const char *arg = argv[i + 3], *rest = arg;
    VxCol *c = &t->col[i];
    t->ncol = i + 1;
    c->name = read_name(&rest);
    char *words = c->name ? read_words(rest) : 0;
    int64_t dims = 0;
    if (!c->name || !words) {
      sqlite3_free(words);
      *err = sqlite3_mprintf("vector_index: column %d (%s) has no name", i + 1, arg);
      return SQLITE_ERROR;
    }
    if (vector_type(words, &dims)) {
      c->role = VX_VECTOR;
      if (t->vec >= 0 || dims < 0) {
        *err = dims < 0 ? sqlite3_mprintf("vector_index: column %s: the dimensions of float[N]"
                                          " must be 1 to %d", c->name, HS_MAX_DIMS)
                        : sqlite3_mprintf("vector_index: more than one vector column (%s and %s)",
                                          t->col[t->vec].name, c->name);
        sqlite3_free(words);
        return SQLITE_ERROR;
      }
      t->vec = i;
      t->dims = dims;
    } else if (strcmp(words, "integer primary key") == 0) {
      c->role = VX_ALIAS;
      if (t->alias >= 0) {
        *err = sqlite3_mprintf("vector_index: more than one integer primary key (%s and %s)",
                               t->col[t->alias].name, c->name);
        sqlite3_free(words);
        return SQLITE_ERROR;
      }
      t->alias = i;
    } else {
      int partition = 0;
      size_t len = strlen(words);
      if (len > 14 && strcmp(words + len - 14, " partition key") == 0) {
        partition = 1;
        words[len - 14] = 0;
      }
      for (int ty = VX_TEXT; ty <= VX_REAL; ty++) {
        if (strcmp(words, VX_TYPES[ty]) == 0) c->type = ty;
      }
      if (!c->type) {
        while (is_ws(*rest)) rest++;
        *err = sqlite3_mprintf("vector_index: column %s: the type must be float[N], float[],"
                               " integer primary key, or text, integer or real with an optional"
                               " 'partition key'; got '%s'", c->name, rest);
        sqlite3_free(words);
        return SQLITE_ERROR;
      }
      c->role = partition ? VX_PARTITION : VX_METADATA;
      c->shadow = partition ? t->npart++ : t->nmeta++;
      c->num = !partition && c->type != VX_TEXT ? t->nnum++ : -1;
    }
    sqlite3_free(words);
    static const char *const reserved[] = {"score", "k", "rowid", "oid", "_rowid_"};
    for (size_t r = 0; r < sizeof(reserved) / sizeof(reserved[0]); r++) {
      if (sqlite3_stricmp(c->name, reserved[r]) == 0) {
        *err = sqlite3_mprintf("vector_index: the column name %s is reserved", c->name);
        return SQLITE_ERROR;
      }
    }
    for (int j = 0; j < i; j++) {
      if (sqlite3_stricmp(c->name, t->col[j].name) == 0) {
        *err = sqlite3_mprintf("vector_index: two columns are named %s", c->name);
        return SQLITE_ERROR;
      }
    }
  }
  if (t->vec < 0) {
    *err = sqlite3_mprintf("vector_index: a vector column is needed, e.g. embedding float[384]");
    return SQLITE_ERROR;
  }
  if (t->npart + t->nmeta > HS_MAX_FILTERS) {
    *err = sqlite3_mprintf("vector_index: at most %d partition and metadata columns",
                           HS_MAX_FILTERS);
    return SQLITE_ERROR;
  }
  return SQLITE_OK;
}

static int vx_declare(VxTab *t) {
  sqlite3_str *s = sqlite3_str_new(0);
  sqlite3_str_appendall(s, "create table x(");
  for (int i = 0; i < t->ncol; i++) {
    const VxCol *c = &t->col[i];
    const char *type = c->role == VX_VECTOR ? "blob"
                       : c->role == VX_ALIAS ? "integer"
                                             : VX_TYPES[c->type];
    sqlite3_str_appendf(s, "\"%w\" %s, ", c->name, type);
  }
  sqlite3_str_appendall(s, "score hidden real, k hidden integer)");
  char *sql = sqlite3_str_finish(s);
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_declare_vtab(t->db, sql);
  sqlite3_free(sql);
  return rc;
}

/* ---- create, connect, and the rest of the module ---- */

static int vx_finish(VxTab *t) {
  for (int i = 0; i < VS_COUNT; i++) {
    sqlite3_finalize(t->st[i]);
    t->st[i] = 0;
  }
  return SQLITE_OK;
}

static void vx_free(VxTab *t) {
  if (!t) return;
  vx_finish(t);
  cache_clear(&t->cache);
  map_free(&t->pending);
  app_free(t);
  vx_free_cols(t);
  sqlite3_free(t->schema);
  sqlite3_free(t->name);
  sqlite3_free(t->broken);
  sqlite3_free(t->base.zErrMsg);
  sqlite3_free(t);
}

int vx_disconnect(sqlite3_vtab *vt) {
  vx_free((VxTab *)vt);
  return SQLITE_OK;
}

static const char *const VX_SHADOWS[] = {"info", "blocks", "codes", "vectors", "rowids"};

/* The indexes of the shadow tables, named after the table. */
static int vx_indexes(VxTab *t, const char *name, char **err) {
  int rc = SQLITE_OK;
  if (t->npart > 0) {
    sqlite3_str *cols = sqlite3_str_new(0);
    append_cols(cols, "", 'p', t->npart, 0);
    char *list = sqlite3_str_finish(cols);
    rc = list ? vx_exec(t->db, err, "create index \"%w\".\"%w_blocks_partition\" on"
                        " \"%w_blocks\"(%s, id)", t->schema, name, name, list)
              : SQLITE_NOMEM;
    sqlite3_free(list);
  }
  for (int i = 0; i < t->nmeta && rc == SQLITE_OK; i++) {
    rc = vx_exec(t->db, err, "create index \"%w\".\"%w_rowids_m%d\" on \"%w_rowids\"(m%d, block,"
                 " slot)", t->schema, name, i, name, i);
  }
  return rc;
}

static int vx_init(sqlite3 *db, int argc, const char *const *argv, sqlite3_vtab **out, char **err,
                   int create) {
  VxTab *t = sqlite3_malloc(sizeof(VxTab));
  if (!t) return SQLITE_NOMEM;
  memset(t, 0, sizeof(*t));
  t->db = db;
  t->schema = sqlite3_mprintf("%s", argv[1]);
  t->name = sqlite3_mprintf("%s", argv[2]);
  int rc = t->schema && t->name ? vx_parse(t, argc, argv, err) : SQLITE_NOMEM;
  if (rc == SQLITE_OK && create) {
    char *sql = sqlite3_mprintf("pragma \"%w\".page_size", t->schema);
    rc = vx_int(db, sql, &t->page);
    sqlite3_free(sql);
    if (rc != SQLITE_OK && rc != SQLITE_NOMEM) {
      *err = sqlite3_mprintf("vector_index: %s: %s", t->name, sqlite3_errmsg(db));
    }
    if (rc == SQLITE_OK && (t->page < 512 || t->page > 65536)) t->page = 4096;
  }
  if (rc == SQLITE_OK && create) {
    sqlite3_str *blocks = sqlite3_str_new(0), *rows = sqlite3_str_new(0);
    for (int i = 0; i < t->ncol; i++) {
      const VxCol *c = &t->col[i];
      if (c->role == VX_PARTITION) sqlite3_str_appendf(blocks, ", p%d %s", c->shadow, VX_TYPES[c->type]);
      if (c->role == VX_METADATA) sqlite3_str_appendf(rows, ", m%d %s", c->shadow, VX_TYPES[c->type]);
    }
    char *bcols = str_finish(blocks), *rcols = str_finish(rows);
    const char *s = t->schema, *n = t->name;
    rc = bcols && rcols ? SQLITE_OK : SQLITE_NOMEM;
    if (rc == SQLITE_OK) {
      rc = vx_exec(db, err,
                   "create table \"%w\".\"%w_info\"(key text primary key, value) without rowid;"
                   "insert into \"%w\".\"%w_info\" values ('format', %d), ('page_size', %lld);"
                   "create table \"%w\".\"%w_blocks\"(id integer primary key, dims integer not null,"
                   " capacity integer not null, count integer not null, nonce integer not null%s);"
                   "create table \"%w\".\"%w_codes\"(id integer primary key, data blob not null);"
                   "create table \"%w\".\"%w_vectors\"(id integer primary key, data blob not null);"
                   "create table \"%w\".\"%w_rowids\"(id integer primary key, block integer not"
                   " null, slot integer not null%s);",
                   s, n, s, n, HS_FORMAT, t->page, s, n, bcols, s, n, s, n, s, n, rcols);
    }
    if (rc == SQLITE_OK && t->dims) {
      const Layout *l = vx_layout(t, t->dims);
      rc = vx_exec(db, err, "insert into \"%w\".\"%w_info\" values ('block_rows', %lld),"
                   " ('group_rows', %lld)", s, n, l->rows, l->group);
    }
    sqlite3_free(bcols);
    sqlite3_free(rcols);
    if (rc == SQLITE_OK) rc = vx_indexes(t, n, err);
  }
  if (rc == SQLITE_OK) {
    char *sql = sqlite3_mprintf("select (select value from \"%w\".\"%w_info\" where key = 'format'),"
                                " (select coalesce(sum(count), 0) from \"%w\".\"%w_blocks\"),"
                                " (select value from \"%w\".\"%w_info\" where key = 'page_size'),"
                                " (select value from \"%w\".\"%w_info\" where key = 'block_rows'),"
                                " (select value from \"%w\".\"%w_info\" where key = 'group_rows')",
                                t->schema, t->name, t->schema, t->name, t->schema, t->name,
                                t->schema, t->name, t->schema, t->name);
    sqlite3_stmt *st = 0;
    rc = sql ? sqlite3_prepare_v2(db, sql, -1, &st, 0) : SQLITE_NOMEM;
    sqlite3_free(sql);
    int step = rc == SQLITE_OK ? sqlite3_step(st) : rc;
    if (step == SQLITE_ROW) {
      /* Format 1 (or no format): its fixed layout; format 2: the one its T_info gives. */
      int64_t format = sqlite3_column_int64(st, 0), page = sqlite3_column_int64(st, 2);
      int64_t rows = sqlite3_column_int64(st, 3), group = sqlite3_column_int64(st, 4);
      int ftype = sqlite3_column_type(st, 0), ptype = sqlite3_column_type(st, 2);
      int layout_ok = sqlite3_column_type(st, 3) == SQLITE_INTEGER &&
                      sqlite3_column_type(st, 4) == SQLITE_INTEGER && rows >= HS_BLOCK_MIN &&
                      rows <= HS_BLOCK_ROWS && group >= 1 && group <= rows;
      /* Format 1 has no page size, nor has format 3 of a table made in format 1. */
      int v1 = ftype == SQLITE_NULL ||
               (ftype == SQLITE_INTEGER && (format == 1 || (format == 3 && ptype == SQLITE_NULL)));
      int whole = v1 ? ptype == SQLITE_NULL
                     : ftype == SQLITE_INTEGER && format >= 2 && ptype == SQLITE_INTEGER &&
                           page >= 512 && page <= 65536 && (!t->dims || layout_ok);
      t->rows = sqlite3_column_int64(st, 1);
      t->page = v1 ? 0 : page;
      t->format = ftype == SQLITE_NULL ? 1 : format;
      t->nlayouts = 0;
      if (ftype == SQLITE_INTEGER && format > HS_FORMAT) {
        *err = sqlite3_mprintf("vector_index: %s was made by a newer hybridsql (storage format"
                               " %lld; this one reads %d)", t->name, format, HS_FORMAT);
        rc = SQLITE_ERROR;
      } else if (!whole) {
        *err = sqlite3_mprintf("vector_index: the layout of %s in %s_info is corrupt", t->name,
                               t->name);
        rc = SQLITE_CORRUPT_VTAB;
      } else if (!v1 && t->dims) {
        t->layouts[0] = (Layout){t->dims, rows, group};
        t->nlayouts = 1;
      }
    } else if (step == SQLITE_ERROR || step == SQLITE_DONE || (step & 0xff) == SQLITE_CORRUPT) {
      *err = sqlite3_mprintf("vector_index: the shadow tables of %s cannot be read: %s", t->name,
                             sqlite3_errmsg(db));
      rc = SQLITE_CORRUPT_VTAB;
    } else if (step != SQLITE_NOMEM) { /* interrupted, busy, an I/O error: as itself */
      *err = sqlite3_mprintf("vector_index: %s: %s", t->name, sqlite3_errmsg(db));
      rc = step;
    } else {
      rc = step;
    }
    sqlite3_finalize(st);
    /*
    ** Damaged shadow tables still connect, so that DROP TABLE (which connects
    ** first) removes the table; every other use fails with what is wrong.
    */
    if (!create && rc == SQLITE_CORRUPT_VTAB && *err) {
      t->broken = *err;
      *err = 0;
      rc = SQLITE_OK;
    }
  }
  if (rc == SQLITE_OK) rc = vx_declare(t);
  if (rc == SQLITE_OK) {
    sqlite3_vtab_config(db, SQLITE_VTAB_CONSTRAINT_SUPPORT, 1);
    sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
    *out = &t->base;
    return SQLITE_OK;
  }
  if (rc == SQLITE_NOMEM && !*err) *err = sqlite3_mprintf("out of memory");
  vx_free(t);
  return rc;
}

int vx_create(sqlite3 *db, void *aux, int argc, const char *const *argv,
              sqlite3_vtab **out, char **err) {
  (void)aux;
  return vx_init(db, argc, argv, out, err, 1);
}

int vx_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
               sqlite3_vtab **out, char **err) {
  (void)aux;
  return vx_init(db, argc, argv, out, err, 0);
}

/*
** DROP TABLE: drops what stands under each shadow table's name, a table or (as
** damage leaves it) a view; a name that is missing or another kind of object
** (an index or trigger of another table) is left alone.  So a table whose
** shadow tables were dropped, renamed or replaced can always be removed.
** (SQLite shows only the code of an error here, not its text.)
*/
int vx_destroy(sqlite3_vtab *vt) {
  VxTab *t = (VxTab *)vt;
  vx_finish(t);
  int rc = SQLITE_OK;
  for (size_t i = 0; i < sizeof(VX_SHADOWS) / sizeof(VX_SHADOWS[0]) && rc == SQLITE_OK; i++) {
    char *name = sqlite3_mprintf("%s_%s", t->name, VX_SHADOWS[i]);
    char *sql = sqlite3_mprintf("select type from \"%w\".sqlite_master where type in ('table',"
                                " 'view') and name = ?1 collate nocase", t->schema);
    sqlite3_stmt *st = 0;
    rc = name && sql ? sqlite3_prepare_v2(t->db, sql, -1, &st, 0) : SQLITE_NOMEM;
    sqlite3_free(sql);
    if (rc == SQLITE_OK) {
      sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
      rc = sqlite3_step(st);
      const char *type = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : 0;
      int found = rc == SQLITE_ROW, view = type && strcmp(type, "view") == 0;
      rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
      sqlite3_finalize(st);
      if (rc == SQLITE_OK && found) {
        rc = vx_exec(t->db, 0, "drop %s \"%w\".\"%w\"", view ? "view" : "table", t->schema,
                     name);
      }
    }
    sqlite3_free(name);
  }
  if (rc == SQLITE_OK) vx_free(t);
  return rc;
}

int vx_rename(sqlite3_vtab *vt, const char *to) {
  VxTab *t = (VxTab *)vt;
  if (t->broken) return vx_fail(t, SQLITE_CORRUPT_VTAB, "%s", t->broken);
  int flushed = vx_flush(t);
  if (flushed) return flushed;
  vx_finish(t); /* they name the old tables */
  char *err = 0;
  int rc = SQLITE_OK;
  for (int i = 0; i < t->nmeta && rc == SQLITE_OK; i++) {
    rc = vx_exec(t->db, &err, "drop index \"%w\".\"%w_rowids_m%d\"", t->schema, t->name, i);
  }
  if (rc == SQLITE_OK && t->npart > 0) {
    rc = vx_exec(t->db, &err, "drop index \"%w\".\"%w_blocks_partition\"", t->schema, t->name);
  }
  for (size_t i = 0; i < sizeof(VX_SHADOWS) / sizeof(VX_SHADOWS[0]) && rc == SQLITE_OK; i++) {
    rc = vx_exec(t->db, &err, "alter table \"%w\".\"%w_%s\" rename to \"%w_%s\"", t->schema,
                 t->name, VX_SHADOWS[i], to, VX_SHADOWS[i]);
  }
  if (rc == SQLITE_OK) rc = vx_indexes(t, to, &err);
  if (rc == SQLITE_OK) {
    char *name = sqlite3_mprintf("%s", to);
    if (!name) {
      rc = SQLITE_NOMEM;
    } else {
      sqlite3_free(t->name);
      t->name = name;
    }
  }
  if (err) {
    sqlite3_free(t->base.zErrMsg);
    t->base.zErrMsg = err;
  }
  return rc;
}

int vx_shadow_name(const char *suffix) {
  for (size_t i = 0; i < sizeof(VX_SHADOWS) / sizeof(VX_SHADOWS[0]); i++) {
    if (sqlite3_stricmp(suffix, VX_SHADOWS[i]) == 0) return 1;
  }
  return 0;
}
