/*
** embed() in SQL: the embedding engine of csrc/model.h behind two SQL functions, and the model
** file it runs, found, mapped once per process and shared by every connection.
**
**   embed(text)                -> BLOB, float32 little-endian, 384 values
**       the text's vector by all-MiniLM-L6-v2 (int8), as the Python layer's local model.
**       select length(embed('how do I log in')) -> 1536
**   hybridsql_model(source)    -> TEXT, the model's id
**       makes this connection's embed() run the model file at the path source (TEXT), or the
**       model file's bytes (BLOB).  select hybridsql_model('/models/minilm.hsmodel')
**       -> all-MiniLM-L6-v2-int8
**
** Requirements (continuing those of csrc/hybridsql.c):
**
** 12. embed(text): NULL in gives NULL out; a text gives the BLOB of hs_model_dims() float32
**    values that hs_model_embed() computes (its windows, pooling and zero vector); any other
**    type is the error "embed(): 1st argument must be text, got blob" (as the Python embed()).
**    Not DETERMINISTIC: which model file runs depends on the process and the connection
**    (Requirement 13), and the SIMD path may change the last bits.  A constant argument (a
**    literal, a bound parameter) is embedded once per statement (sqlite3_set_auxdata).
** 13. The model a connection's embed() runs is the first of: the one hybridsql_model() named
**    on it; the file $HYBRIDSQL_MODEL; the first row's `model` BLOB of the table
**    main.hybridsql_model (a database that carries its model); the file HS_MODEL_FILE beside
**    the loaded library; HS_MODEL_FILE in the user's cache folder ($HYBRIDSQL_CACHE_DIR, else
**    %LOCALAPPDATA%\hybridsql\Cache, ~/Library/Caches/hybridsql, $XDG_CACHE_HOME/hybridsql or
**    ~/.cache/hybridsql: hybridsql.embed.cache_dir()), where `hybridsql model` writes it.  It
**    is looked for at the connection's first embed(), not when the extension loads, and kept.
**    None found, or one that hs_model_open() refuses (missing, truncated, foreign), is an error
**    of one line that names the file and what to do; never a crash or a wrong vector.
** 14. A model file is mapped (mmap, MapViewOfFile) and checked once per process, and a model
**    BLOB copied and checked once per process and content: every connection, in any thread,
**    shares it.  Models stay until the process exits (a connection may hold one any time).
** 15. embed() asks sqlite3_is_interrupted() between two windows (SQLite 3.41 and later; older
**    ones have no way to ask) and stops with SQLite's own interrupt error (SQLITE_INTERRUPT,
**    "interrupted"), as any interrupted statement does.
*/
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* dl_iterate_phdr */
#endif
#include "embedsql.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#if defined(_WIN32)
#include <windows.h>
#else
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__linux__)
#include <link.h>
#else
#include <dlfcn.h>
#endif
#endif

SQLITE_EXTENSION_INIT3

/* The model file's name, beside the library and in the cache folder (Requirement 13). */
#define HS_MODEL_FILE "all-MiniLM-L6-v2-int8.hsmodel"
#define HS_PATH 1024 /* a folder's path, at most */
#define HS_ERR 4096  /* an error's text, at most */
/* What to do when the file is not there or not a model. */
#define HS_MAKE_ONE "write it with `hybridsql model` (pip install 'hybridsql[local]')"

/* ---- The models of this process (Requirement 14) ---- */

typedef struct Model {
  struct Model *next;
  char *path;        /* the file, resolved; NULL for a model read from a BLOB */
  const void *data;  /* its bytes: mapped, or a copy of the BLOB */
  size_t n;
  HsModel *model;
} Model;

static Model *models; /* only added to, under the lock; never freed */

#if defined(_WIN32)
static SRWLOCK lock = SRWLOCK_INIT;
static void models_lock(void) { AcquireSRWLockExclusive(&lock); }
static void models_unlock(void) { ReleaseSRWLockExclusive(&lock); }
#else
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void models_lock(void) { pthread_mutex_lock(&lock); }
static void models_unlock(void) { pthread_mutex_unlock(&lock); }
#endif

static Model *model_add(char *path, const void *data, size_t n, HsModel *m) {
  Model *x = calloc(1, sizeof *x);
  if (!x) return 0;
  x->path = path;
  x->data = data;
  x->n = n;
  x->model = m;
  x->next = models;
  models = x;
  return x;
}

/* Where the model comes from, for its errors: "the model file PATH", "$HYBRIDSQL_MODEL (PATH)". */
static void model_error(char *err, const char *where, const char *why) {
  snprintf(err, HS_ERR, "embed(): %s %s; %s, or name another", where, why, HS_MAKE_ONE);
}

#if defined(_WIN32)
/* A UTF-8 path as Windows takes it; NULL on failure. */
static wchar_t *wide(const char *s) {
  int n = MultiByteToWideChar(CP_UTF8, 0, s, -1, 0, 0);
  wchar_t *w = n > 0 ? malloc((size_t)n * sizeof *w) : 0;
  if (w && MultiByteToWideChar(CP_UTF8, 0, s, -1, w, n) != n) {
    free(w);
    w = 0;
  }
  return w;
}

static char *resolve(const char *path) {
  wchar_t *w = wide(path), full[MAX_PATH * 4];
  DWORD n = w ? GetFullPathNameW(w, MAX_PATH * 4, full, 0) : 0;
  free(w);
  if (n == 0 || n >= MAX_PATH * 4) return 0;
  int len = WideCharToMultiByte(CP_UTF8, 0, full, -1, 0, 0, 0, 0);
  char *out = len > 0 ? malloc((size_t)len) : 0;
  if (out) WideCharToMultiByte(CP_UTF8, 0, full, -1, out, len, 0, 0);
  return out;
}

/* Maps the file read-only: 0, or 1 with *why set ("does not exist", ...). */
static int map_file(const char *path, const void **data, size_t *n, const char **why) {
  wchar_t *w = wide(path);
  HANDLE f = w ? CreateFileW(w, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_DELETE, 0,
                             OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, 0)
               : INVALID_HANDLE_VALUE;
  free(w);
  if (f == INVALID_HANDLE_VALUE) {
    DWORD e = GetLastError();
    *why = e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND ? "does not exist"
                                                                   : "cannot be read";
    return 1;
  }
  LARGE_INTEGER size;
  if (!GetFileSizeEx(f, &size) || size.QuadPart == 0) {
    CloseHandle(f);
    *why = "is empty: it is not a model file";
    return 1;
  }
  HANDLE map = CreateFileMappingW(f, 0, PAGE_READONLY, 0, 0, 0);
  CloseHandle(f);
  void *p = map ? MapViewOfFile(map, FILE_MAP_READ, 0, 0, 0) : 0;
  if (map) CloseHandle(map); /* the view keeps the mapping */
  if (!p) {
    *why = "cannot be mapped into memory";
    return 1;
  }
  *data = p;
  *n = (size_t)size.QuadPart;
  return 0;
}

static void unmap_file(const void *data, size_t n) {
  (void)n;
  UnmapViewOfFile(data);
}

static int exists(const char *path) {
  wchar_t *w = wide(path);
  DWORD a = w ? GetFileAttributesW(w) : INVALID_FILE_ATTRIBUTES;
  free(w);
  return a != INVALID_FILE_ATTRIBUTES;
}
#else
static char *resolve(const char *path) { return realpath(path, 0); }

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 || errno != ENOENT;
}

static int map_file(const char *path, const void **data, size_t *n, const char **why) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = exists(path) ? "cannot be read: check its permissions" : "does not exist";
    return 1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    *why = "is not a file";
    return 1;
  }
  if (st.st_size == 0) {
    close(fd);
    *why = "is empty: it is not a model file";
    return 1;
  }
  void *p = mmap(0, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd); /* the mapping keeps the file */
  if (p == MAP_FAILED) {
    *why = "cannot be mapped into memory";
    return 1;
  }
  *data = p;
  *n = (size_t)st.st_size;
  return 0;
}

static void unmap_file(const void *data, size_t n) { munmap((void *)data, n); }
#endif

/* The model of the file at path, mapped and checked at its first use in the process; NULL with
** err set ("embed(): WHERE does not exist; ...") on any failure.  where names the file for the
** user: "the model file /x" or "$HYBRIDSQL_MODEL (/x)". */
static const Model *model_from_file(const char *path, const char *where, char *err) {
  char *full = resolve(path);
  if (!full) {
    model_error(err, where, exists(path) ? "cannot be read: check its permissions" : "does not exist");
    return 0;
  }
  models_lock();
  const Model *found = 0;
  for (Model *x = models; x && !found; x = x->next) {
    if (x->path && strcmp(x->path, full) == 0) found = x;
  }
  if (found) {
    models_unlock();
    free(full);
    return found;
  }
  const void *data;
  size_t n;
  const char *why;
  if (map_file(full, &data, &n, &why) != 0) {
    models_unlock();
    free(full);
    model_error(err, where, why);
    return 0;
  }
  char why_open[HS_PATH] = "";
  HsModel *m = hs_model_open(data, n, why_open, sizeof why_open);
  if (m) found = model_add(full, data, n, m);
  models_unlock();
  if (!found) {
    if (m) hs_model_free(m);
    unmap_file(data, n);
    free(full);
    if (m) {
      snprintf(err, HS_ERR, "embed(): out of memory");
    } else {
      snprintf(err, HS_ERR, "embed(): %s: %s", where, why_open);
    }
  }
  return found;
}

/* The model of a BLOB's n bytes, copied and checked once per process and content.  SQLite
** gives an empty BLOB as NULL, which memcmp and memcpy may not be passed even for no bytes. */
static const Model *model_from_blob(const void *blob, size_t n, const char *where, char *err) {
  if (!blob && n) {
    snprintf(err, HS_ERR, "embed(): out of memory");
    return 0;
  }
  if (!blob) blob = "";
  models_lock();
  const Model *found = 0;
  for (Model *x = models; x && !found; x = x->next) {
    if (!x->path && x->n == n && memcmp(x->data, blob, n) == 0) found = x;
  }
  if (found) {
    models_unlock();
    return found;
  }
  void *copy = malloc(n ? n : 1);
  char why[HS_PATH] = "";
  HsModel *m = copy ? hs_model_open(memcpy(copy, blob, n), n, why, sizeof why) : 0;
  if (m) found = model_add(0, copy, n, m);
  models_unlock();
  if (!found) {
    if (m) hs_model_free(m);
    free(copy);
    if (!copy || m) {
      snprintf(err, HS_ERR, "embed(): out of memory");
    } else {
      snprintf(err, HS_ERR, "embed(): %s: %s", where, why);
    }
  }
  return found;
}

/* ---- Where the model file is looked for (Requirement 13) ---- */

/* The folder of the loaded library, with a trailing separator, into buf; 0 if unknown. */
#if defined(_WIN32)
static int library_folder(char *buf, size_t cap) {
  HMODULE self;
  wchar_t path[MAX_PATH * 4];
  if (!GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS |
                              GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                          (LPCWSTR)(void *)library_folder, &self)) {
    return 0;
  }
  DWORD n = GetModuleFileNameW(self, path, MAX_PATH * 4);
  if (n == 0 || n >= MAX_PATH * 4) return 0;
  int len = WideCharToMultiByte(CP_UTF8, 0, path, -1, buf, (int)cap, 0, 0);
  if (len <= 0) return 0;
  char *slash = strrchr(buf, '\\');
  if (!slash) return 0;
  slash[1] = 0;
  return 1;
}
#elif defined(__linux__)
/* dl_iterate_phdr is in libc itself (dladdr needs libdl before glibc 2.34). */
typedef struct {
  const char *name;
  uintptr_t address;
} Found;

static int find_self(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  Found *f = arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *p = &info->dlpi_phdr[i];
    uintptr_t start = (uintptr_t)info->dlpi_addr + p->p_vaddr;
    if (p->p_type == PT_LOAD && f->address >= start && f->address < start + p->p_memsz) {
      f->name = info->dlpi_name;
      return 1;
    }
  }
  return 0;
}

static int library_folder(char *buf, size_t cap) {
  Found f = {0, (uintptr_t)(void *)library_folder};
  if (!dl_iterate_phdr(find_self, &f) || !f.name || !*f.name) return 0;
  const char *slash = strrchr(f.name, '/');
  size_t len = slash ? (size_t)(slash - f.name) + 1 : 0;
  if (!slash || len >= cap) return 0;
  memcpy(buf, f.name, len);
  buf[len] = 0;
  return 1;
}
#else
static int library_folder(char *buf, size_t cap) {
  Dl_info info;
  if (!dladdr((void *)library_folder, &info) || !info.dli_fname) return 0;
  const char *slash = strrchr(info.dli_fname, '/');
  size_t len = slash ? (size_t)(slash - info.dli_fname) + 1 : 0;
  if (!slash || len >= cap) return 0;
  memcpy(buf, info.dli_fname, len);
  buf[len] = 0;
  return 1;
}
#endif

/* hybridsql.embed.cache_dir(), with a trailing separator, into buf; 0 if there is none. */
static int cache_folder(char *buf, size_t cap) {
  const char *chosen = getenv("HYBRIDSQL_CACHE_DIR");
  int n;
#if defined(_WIN32)
  const char *local = getenv("LOCALAPPDATA");
  if (chosen && *chosen) {
    n = snprintf(buf, cap, "%s\\", chosen);
  } else if (local && *local) {
    n = snprintf(buf, cap, "%s\\hybridsql\\Cache\\", local);
  } else {
    const char *home = getenv("USERPROFILE");
    if (!home || !*home) return 0;
    n = snprintf(buf, cap, "%s\\.cache\\hybridsql\\", home);
  }
#else
  const char *home = getenv("HOME");
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (chosen && *chosen) {
    n = snprintf(buf, cap, "%s/", chosen);
#if defined(__APPLE__)
  } else if (home && *home) {
    n = snprintf(buf, cap, "%s/Library/Caches/hybridsql/", home);
#else
  } else if (xdg && *xdg) {
    n = snprintf(buf, cap, "%s/hybridsql/", xdg);
  } else if (home && *home) {
    n = snprintf(buf, cap, "%s/.cache/hybridsql/", home);
#endif
  } else {
    return 0;
  }
  (void)xdg;
#endif
  return n > 0 && (size_t)n < cap;
}

/* ---- The SQL functions ---- */

/* What a connection's embed() and hybridsql_model() share: the model they run once found.  One
** reference a function registered; the last one to go frees it. */
typedef struct {
  int refs;
  const Model *model;
} Conn;

static void conn_release(void *p) {
  Conn *c = p;
  if (--c->refs == 0) sqlite3_free(c);
}

static const char *sql_type(sqlite3_value *v) {
  switch (sqlite3_value_type(v)) {
    case SQLITE_INTEGER: return "integer";
    case SQLITE_FLOAT: return "real";
    case SQLITE_BLOB: return "blob";
    default: return "text";
  }
}

/* The model in main.hybridsql_model, or NULL with err empty when there is no such table or
** row, or NULL with err set when its BLOB is no model. */
static const Model *model_in_database(sqlite3 *db, char *err) {
  sqlite3_stmt *st = 0;
  const Model *found = 0;
  if (sqlite3_prepare_v2(db, "select model from main.hybridsql_model limit 1", -1, &st, 0) !=
      SQLITE_OK) {
    return 0; /* no such table */
  }
  if (sqlite3_step(st) == SQLITE_ROW) {
    const void *blob = sqlite3_column_blob(st, 0);
    int n = sqlite3_column_bytes(st, 0);
    if (sqlite3_column_type(st, 0) != SQLITE_BLOB) {
      snprintf(err, HS_ERR,
               "embed(): the table hybridsql_model holds %s in its column model, not the model"
               " file's bytes; store them with `hybridsql model --into FILE`",
               sqlite3_column_type(st, 0) == SQLITE_NULL ? "NULL" : sql_type(sqlite3_column_value(st, 0)));
    } else {
      found = model_from_blob(blob, (size_t)n, "the model in the table hybridsql_model", err);
    }
  }
  sqlite3_finalize(st);
  return found;
}

/* The connection's model, found as Requirement 13 says; NULL with err set if none. */
static const Model *conn_model(sqlite3 *db, Conn *c, char *err) {
  if (c->model) return c->model;
  char where[HS_PATH + 128];
  const char *env = getenv("HYBRIDSQL_MODEL");
  if (env && *env) {
    snprintf(where, sizeof where, "$HYBRIDSQL_MODEL (%s)", env);
    return c->model = model_from_file(env, where, err);
  }
  err[0] = 0;
  if ((c->model = model_in_database(db, err)) || err[0]) return c->model;
  char beside[HS_PATH], cache[HS_PATH], path[HS_PATH + 64];
  int has_beside = library_folder(beside, sizeof beside);
  int has_cache = cache_folder(cache, sizeof cache);
  const char *folders[2] = {has_beside ? beside : 0, has_cache ? cache : 0};
  for (int i = 0; i < 2; i++) {
    if (!folders[i]) continue;
    snprintf(path, sizeof path, "%s%s", folders[i], HS_MODEL_FILE);
    if (!exists(path)) continue;
    snprintf(where, sizeof where, "the model file %s", path);
    return c->model = model_from_file(path, where, err);
  }
  snprintf(err, HS_ERR,
           "embed(): no model file: " HS_MAKE_ONE " to %s%s, or name one with $HYBRIDSQL_MODEL"
           " or hybridsql_model('PATH')",
           has_cache ? cache : (has_beside ? beside : ""), HS_MODEL_FILE);
  return 0;
}

#if defined(SQLITE_CORE)
/* Compiled into a program with its SQLite (the fuzzers), whose library may predate 3.41:
** never stopped. */
static int stop_if_interrupted(void *db) {
  (void)db;
  return 0;
}
#else
static int stop_if_interrupted(void *db) { return sqlite3_is_interrupted((sqlite3 *)db); }
#endif

/* Requirement 12. */
static void embed_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  int type = sqlite3_value_type(argv[0]);
  if (type == SQLITE_NULL) return;
  if (type != SQLITE_TEXT) {
    char msg[96];
    snprintf(msg, sizeof msg, "embed(): 1st argument must be text, got %s", sql_type(argv[0]));
    sqlite3_result_error(ctx, msg, -1);
    return;
  }
  const float *kept = sqlite3_get_auxdata(ctx, 0);
  Conn *c = sqlite3_user_data(ctx);
  char err[HS_ERR];
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  const Model *model = conn_model(db, c, err);
  if (!model) {
    sqlite3_result_error(ctx, err, -1);
    return;
  }
  int dims = hs_model_dims(model->model);
  int bytes = dims * (int)sizeof(float);
  if (kept) {
    sqlite3_result_blob(ctx, kept, bytes, SQLITE_TRANSIENT);
    return;
  }
  const char *text = (const char *)sqlite3_value_text(argv[0]);
  int len = sqlite3_value_bytes(argv[0]);
  float *out = sqlite3_malloc(bytes);
  if (!out || (!text && len > 0)) {
    sqlite3_free(out);
    sqlite3_result_error_nomem(ctx);
    return;
  }
  int (*stop)(void *) = sqlite3_libversion_number() >= 3041000 ? stop_if_interrupted : 0;
  int rc = hs_model_embed(model->model, text ? text : "", len, out, stop, db);
  if (rc != HS_MODEL_OK) {
    sqlite3_free(out);
    if (rc == HS_MODEL_STOPPED) {
      /* SQLite's own interrupt, text and all: a client (Datasette's time limit) tells an
      ** interrupted statement by it. */
      sqlite3_result_error_code(ctx, SQLITE_INTERRUPT);
    } else {
      sqlite3_result_error_nomem(ctx);
    }
    return;
  }
  sqlite3_result_blob(ctx, out, bytes, SQLITE_TRANSIENT);
  sqlite3_set_auxdata(ctx, 0, out, sqlite3_free); /* frees it at once where it cannot keep it */
}

/* hybridsql_model(source): Requirement 13's first choice. */
static void model_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  Conn *c = sqlite3_user_data(ctx);
  char err[HS_ERR], where[HS_PATH + 128];
  const Model *model = 0;
  switch (sqlite3_value_type(argv[0])) {
    case SQLITE_NULL: return;
    case SQLITE_TEXT: {
      const char *path = (const char *)sqlite3_value_text(argv[0]);
      if (!path) {
        sqlite3_result_error_nomem(ctx);
        return;
      }
      snprintf(where, sizeof where, "the model file %s", path);
      model = model_from_file(path, where, err);
      break;
    }
    case SQLITE_BLOB:
      model = model_from_blob(sqlite3_value_blob(argv[0]), (size_t)sqlite3_value_bytes(argv[0]),
                              "the model BLOB", err);
      break;
    default:
      snprintf(err, sizeof err,
               "hybridsql_model(): 1st argument must be a model file's path (text) or its bytes"
               " (blob), got %s",
               sql_type(argv[0]));
  }
  if (!model) {
    /* The loaders' errors begin with embed(), the function a user meets them through. */
    if (strncmp(err, "embed(): ", 9) == 0) {
      char msg[HS_ERR + 16];
      snprintf(msg, sizeof msg, "hybridsql_model(): %s", err + 9);
      sqlite3_result_error(ctx, msg, -1);
    } else {
      sqlite3_result_error(ctx, err, -1);
    }
    return;
  }
  c->model = model;
  sqlite3_result_text(ctx, hs_model_id(model->model), -1, SQLITE_TRANSIENT);
}

int hs_embed_register(sqlite3 *db) {
  Conn *c = sqlite3_malloc(sizeof *c);
  if (!c) return SQLITE_NOMEM;
  c->refs = 2;
  c->model = 0;
  /* Not INNOCUOUS: it reads files the environment names.  hybridsql_model() reads any file it
  ** is given, so a schema (a view, a trigger) may not call it: DIRECTONLY. */
  int rc = sqlite3_create_function_v2(db, "embed", 1, SQLITE_UTF8, c, embed_func, 0, 0,
                                      conn_release);
  if (rc != SQLITE_OK) {
    sqlite3_free(c); /* the destructor dropped embed()'s reference; this is the other */
    return rc;
  }
  return sqlite3_create_function_v2(db, "hybridsql_model", 1, SQLITE_UTF8 | SQLITE_DIRECTONLY, c,
                                    model_func, 0, 0, conn_release);
}
