/*
** A libFuzzer harness for the lookup of a database's own model and of its index's model
** (Requirements 16 and 17 of csrc/model/embedsql.c): a database the input makes (tables, views,
** triggers, virtual tables, indexes, generated columns, WITHOUT ROWID and STRICT tables, BLOBs
** huge, empty, of every type, a model's header changed, index_model rows of any value,
** sqlite_master edited under writable_schema), a connection that adds temp objects and attached
** databases, then embed() on that connection, twice.
**
** The input:
**   byte 0    control: bit 0, the rest is a database file's image (deserialized as main), not
**             SQL; bit 1, the embedding connection reads with writable_schema on (SQLite then
**             no longer checks that sqlite_master's names match their SQL); bit 2, the
**             authorizer calls embed() and hybridsql_model() while the lookup's first
**             statement is prepared (an application's callback inside the lookup); bit 3,
**             $HYBRIDSQL_MODEL names the tiny model's file; bit 4, hybridsql_model() is given
**             the tiny model's bytes first (with either, the database may not be read at all).
**   the rest  SQL run on a new database before the extension is registered anywhere, so that a
**             view or trigger calling embed() is made as a shared file would hold it; the
**             functions tiny_model() (the tiny model's bytes: fuzz/corpus/model/tiny-as-written)
**             and sealed(blob) (its checksum written again, as model_file.py seals a file) make
**             models and damaged ones.  After a line "-- on the connection", SQL run on the
**             connection that embeds (temp objects, ATTACH ':memory:'), before the extension is
**             registered on it.  ATTACH of a file and VACUUM are refused: no input writes files.
**
** The model where no database has one: the tiny model, as the file in the cache folder
** ($HYBRIDSQL_CACHE_DIR, a folder of the harness's own); there too as tiny-fuzz-seed.hsmodel,
** the file an index_model row naming 'tiny-fuzz-seed' (its id) finds.
**
** Beyond "no crash" (ASan and UBSan abort on any memory error or undefined behaviour):
**   - nothing of the database's runs: while embed() looks, SQLite's authorizer sees reads of the
**     schema tables, hybridsql_model and index_model alone, the pragmas table_xinfo, table_info
**     and index_info, and typeof(); and the lookup runs at most LOOKUP_STEPS virtual machine
**     instructions (a view over an endless query would run forever);
**   - with $HYBRIDSQL_MODEL or hybridsql_model() first, the authorizer sees nothing at all;
**   - each answer is a vector or one line that starts with "embed(): "; the second embed() says
**     the same as the first (a refusal is kept); a call from inside the lookup is the one line
**     of re-entry, never a second lookup;
**   - where the connection reads without writable_schema, the answer is the one that SQLite's
**     own view of the schema (pragma table_list and table_xinfo, which the lookup may not use:
**     they prepare views and connect virtual tables) and the first row read whole call for: the
**     refusal's kind, or the vector hs_model_embed gives for the model the row holds; where
**     hybridsql_model has no table or no row, index_model's the same way (Requirement 17: the
**     tiny model for a local row naming tiny-fuzz-seed or all-MiniLM-L6-v2, else the line of its
**     refusal or of a file not found); the tiny model in the cache folder where neither has a
**     row.
**
** Build and run: see fuzz/README.md.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "model/model.h"
#include "sqlite3.h"

int sqlite3_hybridsql_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

#define TINY_SEED "fuzz/corpus/model/tiny-as-written" /* its control byte, then the model */
#define TEXT "how do I roll back a deploy freeze"
#define MARK "\n-- on the connection\n"
#define SETUP_STEPS 2000000  /* the input's own SQL, each statement at most */
#define LOOKUP_STEPS 10000000 /* one embed(), lookup and all */
#define STORED_MAX (256u << 20) /* embedsql.c's HS_STORED_MAX */
#define OTHER_MODELS 64 /* other models accepted: each stays in the process (Requirement 14) */
#define LINE 8192

static uint8_t *tiny;
static size_t tiny_n;
static int tiny_dims;
static float *tiny_vector;
static char folder[64], tiny_path[128], tiny_named[128];
static unsigned other_models;

/* What one input is being checked for, for the authorizer and the progress handler. */
static struct {
  sqlite3 *db;
  int looking;       /* inside the checked embed() calls */
  int read_nothing;  /* the user's model is named: nothing may be prepared */
  long steps;        /* progress handler calls in this embed() */
  int reenter;       /* bit 2 */
  int reentered;     /* the calls from inside were made for this embed() */
  sqlite3_stmt *inner_embed, *inner_model;
  char answer[2][LINE]; /* what the inner calls said (empty: nothing yet) */
} now;

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_lookup: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

/* model_file.py's seal(): the header's checksum (the 8-byte words w[i] * (2i + 1) summed
** modulo 2^64, w[4] as 0, the last word zero-padded) computed again over what it covers: the
** whole file in format 1, the bytes before the word table (its offset at byte 40) in format 2. */
static void seal(uint8_t *p, size_t n) {
  uint64_t sum = 0, w, end = n;
  if (n < 48) return;
  if (p[16] == 2) {
    memcpy(&end, p + 40, 8);
    if (end > n) end = n;
  }
  memset(p + 32, 0, 8);
  for (size_t i = 0; 8 * i < end; i++) {
    w = 0;
    memcpy(&w, p + 8 * i, end - 8 * i < 8 ? end - 8 * i : 8);
    sum += w * (2 * (uint64_t)i + 1);
  }
  memcpy(p + 32, &sum, 8);
}


/* The run's folder and the two model files in it, removed at exit. */
static void remove_folder(void) {
  unlink(tiny_path);
  unlink(tiny_named);
  rmdir(folder);
}
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  FILE *f = fopen(TINY_SEED, "rb");
  static uint8_t seed[1 << 16];
  size_t n = f ? fread(seed, 1, sizeof seed, f) : 0;
  if (!f || n < 2 || n == sizeof seed)
    fail("cannot read " TINY_SEED " (run from the repository root)", 0);
  fclose(f);
  tiny_n = n - 1;
  tiny = malloc(tiny_n);
  if (!tiny) fail("no memory", 0);
  memcpy(tiny, seed + 1, tiny_n);
  char err[1024];
  HsModel *m = hs_model_open(tiny, tiny_n, err, sizeof err);
  if (!m) fail("the tiny model", err);
  tiny_dims = hs_model_dims(m);
  tiny_vector = malloc(sizeof(float) * (size_t)tiny_dims);
  if (!tiny_vector ||
      hs_model_embed(m, TEXT, (int64_t)strlen(TEXT), HS_MODEL_QUERY, tiny_vector, 0, 0) != HS_MODEL_OK)
    fail("the tiny model does not embed", 0);
  hs_model_free(m);
  const char *tmp = getenv("TMPDIR");
  snprintf(folder, sizeof folder, "%.40s/fuzz_lookup.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(folder)) fail("cannot make a folder", folder);
  atexit(remove_folder); /* libFuzzer ends by exit(): the folder goes with the run */
  snprintf(tiny_path, sizeof tiny_path, "%s/all-MiniLM-L6-v2-int8.hsmodel", folder);
  f = fopen(tiny_path, "wb");
  if (!f || fwrite(tiny, 1, tiny_n, f) != tiny_n || fclose(f) != 0) fail("cannot write", tiny_path);
  snprintf(tiny_named, sizeof tiny_named, "%s/tiny-fuzz-seed.hsmodel", folder);
  f = fopen(tiny_named, "wb");
  if (!f || fwrite(tiny, 1, tiny_n, f) != tiny_n || fclose(f) != 0) fail("cannot write", tiny_named);
  setenv("HYBRIDSQL_CACHE_DIR", folder, 1);
  return 0;
}

static void tiny_model(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  sqlite3_result_blob(ctx, tiny, (int)tiny_n, SQLITE_STATIC);
}

static void sealed(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  int n = sqlite3_value_bytes(argv[0]);
  const void *p = sqlite3_value_blob(argv[0]);
  uint8_t *copy = sqlite3_malloc(n > 0 ? n : 1);
  if (!copy) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (n > 0) memcpy(copy, p, (size_t)n);
  seal(copy, (size_t)n);
  sqlite3_result_blob(ctx, copy, n, sqlite3_free);
}

/* The input's SQL: no file is attached or written. */
static int setup_authorizer(void *arg, int action, const char *a, const char *b, const char *c,
                            const char *d) {
  (void)arg;
  (void)b;
  (void)c;
  (void)d;
  if (action == SQLITE_ATTACH && a && *a && strcmp(a, ":memory:") != 0) return SQLITE_DENY;
  return SQLITE_OK;
}

static int setup_progress(void *arg) {
  long *steps = arg;
  return ++*steps > SETUP_STEPS / 1000;
}

/* Runs sql's statements one after another, each within SETUP_STEPS; errors are the input's. */
static void run_sql(sqlite3 *db, const char *sql) {
  sqlite3_set_authorizer(db, setup_authorizer, 0);
  while (sql && *sql) {
    sqlite3_stmt *st = 0;
    const char *tail = 0;
    long steps = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &st, &tail) != SQLITE_OK) {
      sqlite3_finalize(st);
      break;
    }
    sqlite3_progress_handler(db, 1000, setup_progress, &steps);
    while (st && sqlite3_step(st) == SQLITE_ROW) {
    }
    sqlite3_progress_handler(db, 0, 0, 0);
    sqlite3_finalize(st);
    if (!tail || tail == sql) break;
    sql = tail;
  }
  sqlite3_set_authorizer(db, 0, 0);
}

static int is(const char *a, const char *b) { return a && strcasecmp(a, b) == 0; }

/* What a statement of one value answers: "V" and the bytes of a vector, or "E" and the error. */
static void answer(sqlite3_stmt *st, char *out, size_t cap, int *bytes) {
  *bytes = 0;
  if (sqlite3_step(st) == SQLITE_ROW) {
    int n = sqlite3_column_bytes(st, 0);
    const void *p = sqlite3_column_blob(st, 0);
    if (sqlite3_column_type(st, 0) == SQLITE_TEXT) {
      snprintf(out, cap, "T%s", (const char *)sqlite3_column_text(st, 0));
    } else if ((size_t)n + 1 <= cap) {
      out[0] = 'V';
      if (n) memcpy(out + 1, p, (size_t)n);
      *bytes = n;
    } else {
      fail("a vector too long", 0);
    }
  } else {
    snprintf(out, cap, "E%s", sqlite3_errmsg(now.db));
    if (strchr(out, '\n')) fail("an error of two lines", out);
  }
  sqlite3_reset(st);
}

/* While embed() looks: only what Requirement 16 allows the lookup to prepare. */
static int lookup_authorizer(void *arg, int action, const char *a, const char *b, const char *c,
                             const char *d) {
  (void)arg;
  (void)c;
  (void)d;
  if (!now.looking) return SQLITE_OK;
  char what[512];
  snprintf(what, sizeof what, "action %d: %.200s, %.200s", action, a ? a : "", b ? b : "");
  if (now.read_nothing) fail("the database was looked at with the user's model named", what);
  int allowed = action == SQLITE_SELECT ||
                (action == SQLITE_READ &&
                 (is(a, "sqlite_master") || is(a, "sqlite_temp_master") ||
                  is(a, "sqlite_schema") || is(a, "sqlite_temp_schema") ||
                  is(a, "hybridsql_model") || is(a, "index_model"))) ||
                (action == SQLITE_FUNCTION && is(b, "typeof")) ||
                (action == SQLITE_PRAGMA &&
                 (is(a, "table_xinfo") || is(a, "table_info") || is(a, "index_info")));
  if (!allowed) fail("the lookup prepared SQL of the database's", what);
  if (now.reenter && !now.reentered) { /* a statement of the lookup is being prepared */
    int bytes;
    now.reentered = 1;
    answer(now.inner_embed, now.answer[0], LINE, &bytes);
    answer(now.inner_model, now.answer[1], LINE, &bytes);
  }
  return SQLITE_OK;
}

static int lookup_progress(void *arg) {
  (void)arg;
  if (++now.steps > LOOKUP_STEPS / 1000) fail("the lookup ran past its budget of steps", 0);
  return 0;
}

/* The expectation: 'V' with the vector (dims floats), or 'E' with the start of the line. */
typedef struct {
  char kind;
  char line[256];
  float *vector;
  int dims;
} Expected;

static void expect_line(Expected *e, const char *start) {
  e->kind = 'E';
  snprintf(e->line, sizeof e->line, "%s", start);
}

static void expect_model(Expected *e, const uint8_t *data, size_t n) {
  uint8_t *copy = malloc(n ? n : 1);
  char err[1024];
  if (!copy) fail("no memory", 0);
  if (n) memcpy(copy, data, n);
  uint64_t size = 0;
  if (n >= 32) memcpy(&size, copy + 24, 8);
  HsModel *m = size <= STORED_MAX ? hs_model_open(copy, n, err, sizeof err) : 0;
  if (!m) {
    expect_line(e, "embed(): the ");
  } else {
    e->kind = 'V';
    e->dims = hs_model_dims(m);
    e->vector = malloc(sizeof(float) * (size_t)e->dims);
    if (!e->vector ||
        hs_model_embed(m, TEXT, (int64_t)strlen(TEXT), HS_MODEL_QUERY, e->vector, 0, 0) != HS_MODEL_OK)
      fail("an accepted model does not embed", 0);
    hs_model_free(m);
  }
  free(copy);
}

/* A table's shape as Requirements 16 and 17 read it, from SQLite's own view of the schema:
** 0 with the name its rowid is read by in *rowid where it is an ordinary rowid table with the
** columns; -1 where there is no such table; 1 where e says the refusal (or that SQLite could
** not tell). */
static int expected_shape(sqlite3 *db, const char *table, const char *const *columns,
                          Expected *e, const char **rowid) {
  static const char *const rowid_names[3] = {"rowid", "_rowid_", "oid"};
  sqlite3_stmt *st = 0;
  char sql[256], line[256];
  int has[2] = {0, 0}, generated = 0, taken[3] = {0, 0, 0}, free_name = 0, result = 1;
  const char *type;
  snprintf(sql, sizeof sql,
           "select 1 from temp.sqlite_master where type in ('table', 'view') and name = '%s'"
           " collate nocase",
           table);
  if (sqlite3_prepare_v2(db, sql, -1, &st, 0) != SQLITE_OK) goto cannot;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    snprintf(line, sizeof line, "embed(): temp.%s is a ", table);
    expect_line(e, line);
    goto done;
  }
  if (rc != SQLITE_DONE) goto cannot;
  sqlite3_finalize(st);
  snprintf(sql, sizeof sql,
           "select type, wr from pragma_table_list where schema = 'main' and name = '%s'"
           " collate nocase",
           table);
  if (sqlite3_prepare_v2(db, sql, -1, &st, 0) != SQLITE_OK) goto cannot;
  rc = sqlite3_step(st);
  if (rc == SQLITE_DONE) {
    result = -1;
    goto done;
  }
  if (rc != SQLITE_ROW) goto cannot;
  type = (const char *)sqlite3_column_text(st, 0);
  int without_rowid = sqlite3_column_int(st, 1);
  if (is(type, "view") || is(type, "virtual")) {
    snprintf(line, sizeof line, "embed(): main.%s is a %s", table,
             is(type, "view") ? "view" : "virtual table");
    expect_line(e, line);
    goto done;
  }
  sqlite3_finalize(st);
  snprintf(sql, sizeof sql, "select name, hidden from pragma_table_xinfo('%s', 'main')", table);
  if (sqlite3_prepare_v2(db, sql, -1, &st, 0) != SQLITE_OK) goto cannot;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    for (int i = 0; i < 2 && columns[i]; i++) has[i] |= is(name, columns[i]);
    generated |= sqlite3_column_int(st, 1) >= 2;
    for (int i = 0; i < 3; i++) taken[i] |= is(name, rowid_names[i]);
  }
  if (rc != SQLITE_DONE) goto cannot;
  for (int i = 0; i < 2 && columns[i]; i++) {
    if (!has[i]) {
      snprintf(line, sizeof line, "embed(): main.%s has no column %s", table, columns[i]);
      expect_line(e, line);
      goto done;
    }
  }
  if (generated) {
    snprintf(line, sizeof line, "embed(): main.%s has generated columns", table);
    expect_line(e, line);
    goto done;
  }
  if (without_rowid) {
    snprintf(line, sizeof line, "embed(): main.%s is a WITHOUT ROWID table", table);
    expect_line(e, line);
    goto done;
  }
  while (free_name < 3 && taken[free_name]) free_name++;
  if (free_name == 3) {
    snprintf(line, sizeof line, "embed(): main.%s has columns named rowid, _rowid_ and oid",
             table);
    expect_line(e, line);
    goto done;
  }
  *rowid = rowid_names[free_name];
  result = 0;
  goto done;
cannot:
  expect_line(e, "embed(): cannot look for a model in this database");
done:
  sqlite3_finalize(st);
  return result;
}

/* Requirement 16 read from SQLite's own view of the schema: 1 where it decides e, else 0 (no
** table, or no row). */
static int expected_stored(sqlite3 *db, Expected *e) {
  static const char *const columns[2] = {"model", 0};
  sqlite3_stmt *st = 0;
  const char *rowid = 0;
  char sql[256];
  int shape = expected_shape(db, "hybridsql_model", columns, e, &rowid);
  if (shape) return shape > 0;
  snprintf(sql, sizeof sql,
           "select typeof(model), model from main.hybridsql_model not indexed order by %s limit 1",
           rowid);
  int decided = 1;
  if (sqlite3_prepare_v2(db, sql, -1, &st, 0) != SQLITE_OK) {
    expect_line(e, "embed(): cannot look for a model in this database");
  } else {
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
      decided = 0;
    } else if (rc != SQLITE_ROW) {
      expect_line(e, "embed(): cannot look for a model in this database");
    } else if (!is((const char *)sqlite3_column_text(st, 0), "blob")) {
      expect_line(e, "embed(): the table hybridsql_model holds ");
    } else {
      expect_model(e, sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1));
    }
  }
  sqlite3_finalize(st);
  return decided;
}

/* Whether the n bytes at s are a model's name (embedsql.c's is_model_id). */
static int name_of_model(const unsigned char *s, int n) {
  if (!s || n < 1 || n > 63 || s[0] == '.') return 0;
  for (int i = 0; i < n; i++) {
    unsigned char ch = s[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
          ch == '.' || ch == '_' || ch == '-'))
      return 0;
  }
  return 1;
}

/* Requirement 17 read from SQLite's own view of the schema (where Requirement 16 decided
** nothing): the tiny model for a local row naming a file the cache folder holds, else the
** line. */
static void expected_index(sqlite3 *db, Expected *e) {
  static const char *const columns[2] = {"model_id", "provider"};
  sqlite3_stmt *st = 0;
  const char *rowid = 0;
  char sql[256];
  if (expected_shape(db, "index_model", columns, e, &rowid) != 0) return;
  snprintf(sql, sizeof sql,
           "select typeof(model_id), typeof(provider), cast(model_id as blob),"
           " cast(provider as blob) from main.index_model not indexed order by %s limit 1",
           rowid);
  if (sqlite3_prepare_v2(db, sql, -1, &st, 0) != SQLITE_OK) {
    expect_line(e, "embed(): cannot look for a model in this database");
    return;
  }
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    const unsigned char *id = sqlite3_column_blob(st, 2), *provider = sqlite3_column_blob(st, 3);
    int n = sqlite3_column_bytes(st, 2), np = sqlite3_column_bytes(st, 3);
    if (!is((const char *)sqlite3_column_text(st, 0), "text") ||
        !is((const char *)sqlite3_column_text(st, 1), "text")) {
      expect_line(e, "embed(): main.index_model holds ");
    } else if (!name_of_model(provider, np) || np != 5 || memcmp(provider, "local", 5) != 0) {
      expect_line(e, "embed(): this index's vectors were made by ");
    } else if (!name_of_model(id, n)) {
      expect_line(e, "embed(): main.index_model's model_id is not a model's name");
    } else if ((n == 14 && memcmp(id, "tiny-fuzz-seed", 14) == 0) ||
               (n == 16 && memcmp(id, "all-MiniLM-L6-v2", 16) == 0) ||
               (n == 21 && memcmp(id, "all-MiniLM-L6-v2-int8", 21) == 0)) {
      e->kind = 'V'; /* the tiny model's file in the cache folder, by either name */
    } else {
      expect_line(e, "embed(): this index was made by the model ");
    }
  } else if (rc != SQLITE_DONE) {
    expect_line(e, "embed(): cannot look for a model in this database");
  }
  sqlite3_finalize(st);
}

/* Requirements 16 and 17 read from SQLite's own view of the schema, in the lookup's order. */
static void expected(sqlite3 *db, Expected *e) {
  e->kind = 'V';
  e->vector = tiny_vector; /* no model in the database: the cache folder's */
  e->dims = tiny_dims;
  if (!expected_stored(db, e)) expected_index(db, e);
}

/* The embedding connection from the input: main made by its SQL or its image, then its SQL on
** the connection; NULL where the input is not one to run. */
static sqlite3 *make_connection(const uint8_t *data, size_t size, uint8_t control) {
  sqlite3 *db = 0;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) fail("open", 0);
  unsigned char *image = 0;
  sqlite3_int64 n = 0;
  const char *on_connection = 0;
  char *text = 0;
  if (control & 1) {
    image = sqlite3_malloc64(size ? size : 1);
    if (!image) fail("no memory", 0);
    if (size) memcpy(image, data, size);
    n = (sqlite3_int64)size;
  } else {
    text = malloc(size + 1);
    if (!text) fail("no memory", 0);
    memcpy(text, data, size);
    text[size] = 0;
    for (char *p = text; *p; p++) {
      if (strncasecmp(p, "vacuum", 6) == 0) { /* VACUUM INTO writes a file */
        free(text);
        sqlite3_close(db);
        return 0;
      }
    }
    char *mark = strstr(text, MARK);
    if (mark) {
      *mark = 0;
      on_connection = mark + strlen(MARK);
    }
    sqlite3 *maker = 0;
    if (sqlite3_open(":memory:", &maker) != SQLITE_OK) fail("open", 0);
    sqlite3_limit(maker, SQLITE_LIMIT_LENGTH, 1 << 25);
    sqlite3_create_function(maker, "tiny_model", 0, SQLITE_UTF8, 0, tiny_model, 0, 0);
    sqlite3_create_function(maker, "sealed", 1, SQLITE_UTF8, 0, sealed, 0, 0);
    run_sql(maker, text);
    image = sqlite3_serialize(maker, "main", &n, 0);
    sqlite3_close(maker);
  }
  if (image && sqlite3_deserialize(db, "main", image, n, n,
                                   SQLITE_DESERIALIZE_FREEONCLOSE |
                                       SQLITE_DESERIALIZE_RESIZEABLE) != SQLITE_OK)
    fail("deserialize", sqlite3_errmsg(db));
  if (control & 2) sqlite3_exec(db, "pragma writable_schema = on", 0, 0, 0);
  if (on_connection) run_sql(db, on_connection);
  free(text);
  return db;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t control = size ? data[0] : 0;
  sqlite3 *db = make_connection(data + (size ? 1 : 0), size ? size - 1 : 0, control);
  if (!db) return 0;
  /* SQLite checks that sqlite_master's names match their SQL only without writable_schema:
  ** with it, the schema table and SQLite's parsed schema may differ, and the lookup reads the
  ** former (nothing else of it runs either way). */
  int trusting = !(control & 2) && !(control & 24);
  Expected e = {0, "", 0, 0};
  expected(db, &e);
  if (e.kind == 'V' && e.vector != tiny_vector && ++other_models > OTHER_MODELS) {
    free(e.vector); /* a new model would stay in the process: enough of them */
    sqlite3_close(db);
    return 0;
  }
  if (control & 8) setenv("HYBRIDSQL_MODEL", tiny_path, 1);
  if (sqlite3_hybridsql_init(db, 0, 0) != SQLITE_OK) fail("init", sqlite3_errmsg(db));
  sqlite3_stmt *run = 0;
  memset(&now, 0, sizeof now);
  now.db = db;
  /* Before the statements are prepared: a new authorizer makes SQLite prepare them again. */
  sqlite3_set_authorizer(db, lookup_authorizer, 0);
  if (sqlite3_prepare_v2(db, "select embed('" TEXT "')", -1, &run, 0) != SQLITE_OK ||
      sqlite3_prepare_v2(db, "select embed('" TEXT "')", -1, &now.inner_embed, 0) != SQLITE_OK ||
      sqlite3_prepare_v2(db, "select hybridsql_model(?1)", -1, &now.inner_model, 0) != SQLITE_OK)
    fail("prepare", sqlite3_errmsg(db));
  sqlite3_bind_blob(now.inner_model, 1, tiny, (int)tiny_n, SQLITE_STATIC);
  if (control & 16) {
    char chosen[LINE];
    int bytes;
    answer(now.inner_model, chosen, LINE, &bytes);
    if (strcmp(chosen, "Ttiny-fuzz-seed") != 0) fail("hybridsql_model() of the tiny model", chosen);
  }
  now.read_nothing = (control & 24) != 0;
  now.reenter = (control & 4) != 0;
  sqlite3_progress_handler(db, 1000, lookup_progress, 0);
  static char said[2][LINE];
  int bytes[2];
  for (int i = 0; i < 2; i++) {
    now.steps = 0;
    now.reentered = 0;
    now.looking = 1;
    answer(run, said[i], LINE, &bytes[i]);
    now.looking = 0;
  }
  sqlite3_set_authorizer(db, 0, 0);
  sqlite3_progress_handler(db, 0, 0, 0);
  if (control & 8) unsetenv("HYBRIDSQL_MODEL");

  if (said[0][0] == 'E' && strncmp(said[0], "Eembed(): ", 10) != 0)
    fail("an error that is not embed()'s", said[0]);
  size_t said_bytes = said[0][0] == 'V' ? (size_t)bytes[0] + 1 : strlen(said[0]) + 1;
  if (bytes[0] != bytes[1] || memcmp(said[0], said[1], said_bytes) != 0)
    fail("the second embed() said otherwise", said[1]);
  size_t tiny_bytes = sizeof(float) * (size_t)tiny_dims;
  if ((control & 24) && (said[0][0] != 'V' || (size_t)bytes[0] != tiny_bytes ||
                         memcmp(said[0] + 1, tiny_vector, tiny_bytes) != 0))
    fail("the user's model was not the one embedded", said[0]);
  static const char reentry[] = "called while this connection looks for its model";
  for (int i = 0; i < 2; i++) {
    if (now.answer[i][0] && !strstr(now.answer[i], reentry))
      fail("a call from inside the lookup said", now.answer[i]);
  }
  /* A database whose pages SQLite finds malformed has no model to expect: where the lookup or
  ** this harness's own reading of the schema meets the damage depends on the pages each reads,
  ** so either may say why first; the answer is still one line of embed()'s (checked above). */
  static const char unreadable[] = "embed(): cannot look for a model in this database";
  int damaged = said[0][0] == 'E' &&
                (strstr(said[0], "database disk image is malformed") != 0 ||
                 (e.kind == 'E' && strncmp(e.line, unreadable, sizeof unreadable - 1) == 0));
  if (trusting && !damaged) {
    if (e.kind == 'V') {
      if (said[0][0] != 'V' || bytes[0] != e.dims * 4 ||
          memcmp(said[0] + 1, e.vector, (size_t)bytes[0]) != 0)
        fail("not the vector of the model the database holds", said[0]);
    } else if (said[0][0] != 'E' || strncmp(said[0] + 1, e.line, strlen(e.line)) != 0) {
      fprintf(stderr, "fuzz_lookup: expected a line starting %s\n", e.line);
      fail("embed() said", said[0]);
    }
  }
  if (e.vector != tiny_vector) free(e.vector);
  sqlite3_finalize(run);
  sqlite3_finalize(now.inner_embed);
  sqlite3_finalize(now.inner_model);
  sqlite3_close(db);
  return 0;
}
