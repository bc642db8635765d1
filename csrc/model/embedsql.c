/*
** embed() in SQL: the embedding engine of csrc/model/model.h behind two SQL functions, and the
** model file it runs, found, read once per process and shared by every connection.
**
**   embed(text)                -> BLOB, float32 little-endian, the model's dims (384)
**       the text's vector as a query: the model's query prefix before it (e5's "query: "), as
**       the Python layer embeds a search's query.
**       select length(embed('how do I log in')) -> 1536
**   embed(text, role)          -> BLOB
**       role 'query' is embed(text); 'document' embeds the text as the index's chunks are
**       embedded (the model's document prefix, e5's "passage: ").
**       select embed('the deploy freeze starts Friday', 'document')
**   hybridsql_model(source)    -> TEXT, the model's id
**       makes this connection's embed() run the model file at the path source (TEXT), or the
**       model file's bytes (BLOB).  select hybridsql_model('/models/minilm.hsmodel')
**       -> all-MiniLM-L6-v2-int8
**
** Requirements (the extension's numbers: csrc/hybridsql.c says where 1 to 11 are):
**
** 12. embed(text[, role]): NULL in gives NULL out; a text gives the BLOB of hs_model_dims()
**    float32 values that hs_model_embed() computes (its prefix, windows, pooling and zero
**    vector); any other type is the error "embed(): 1st argument must be text, got blob" (as the
**    Python embed()).  The role is 'query' (the default: a hybrid statement, written by hand or
**    printed by --explain, passes the user's question) or 'document'; anything else, NULL
**    included, is the error "embed(): 2nd argument must be 'query' or 'document', got 'X'"
**    (got integer, got NULL ... for another type).  Not DETERMINISTIC: which model file runs
**    depends on the process and the connection (Requirement 13), and the SIMD path may change
**    the last bits.  A constant argument (a literal, a bound parameter) is embedded once per
**    statement and role (sqlite3_set_auxdata).
** 13. The model a connection's embed() runs is the first of: the one hybridsql_model() named
**    on it; $HYBRIDSQL_MODEL; the model the database keeps in its table main.hybridsql_model
**    (Requirement 16); the model that made the index's vectors, as main.index_model records it
**    (Requirement 17); the file HS_MODEL_FILE beside the loaded library; HS_MODEL_FILE in the
**    user's cache folder ($HYBRIDSQL_CACHE_DIR, else %LOCALAPPDATA%\hybridsql\Cache,
**    ~/Library/Caches/hybridsql, $XDG_CACHE_HOME/hybridsql or ~/.cache/hybridsql:
**    hybridsql.embed.cache_dir()), where `hybridsql model` writes it.  The user's explicit
**    choices outrank the database's model, which outranks the defaults: a database is data
**    someone else may have written, and a user who does not trust its model names one of their
**    own first.  hybridsql_model() and $HYBRIDSQL_MODEL take a model file's path, or a model's
**    name: a text with no path separator, not ending in ".hsmodel" and naming no file, of 1 to
**    63 letters, digits, '.', '_' or '-' (the first not '.'), which is a known model's name
**    (all-MiniLM-L6-v2, multilingual-e5-small: known_models below) or a model file's id; the
**    model of that name is the file "<id>.hsmodel" beside the library, else in the cache folder,
**    where `hybridsql model NAME` writes it.  The model is looked for at the connection's first
**    embed(), not when the extension loads, and kept.  None found, or one that hs_model_open()
**    refuses (missing, truncated, foreign), is an error of one line that names the file and
**    what to do; never a crash or a wrong vector.
** 14. A model file is read into memory of the process's own and checked (hs_model_open) once per
**    process and file, and a model BLOB copied and checked once per process and content: every
**    connection, in any thread, shares it.  Only a regular file is read: a FIFO, a device or a
**    folder is refused before a byte of it is read, and never blocks (opened with O_NONBLOCK
**    after stat; Windows: its type checked after opening).  Its header is read and checked
**    first (hs_model_header), so that a file's size is checked before the rest is allocated.
**    Not mapped: a file cut short under a mapping killed the process (SIGBUS), and one rewritten
**    in place changed its vectors.  A copy cannot change: a connection keeps the vectors of the
**    model it found, whatever happens to the file, and a file that changes while it is read is
**    refused ("changed while it was read").  A format-2 file's word table (54 of
**    multilingual-e5-small's 73 MB, of which a query needs a few rows) is checked whole at
**    open (words_check, through a buffer reused) but copied a block of 64 rows at a time, the
**    first time a text needs one (copy_words), from the file the model keeps open, each block
**    checked again: a file replaced (a package upgraded, `hybridsql model` again) leaves the
**    open one readable, so the model keeps its vectors; one rewritten in place or cut short,
**    which the copy of the whole used to outlive, makes a text that needs a block not copied
**    yet an error of one line ("changed or was damaged since it was read"), never a wrong
**    vector.  Each model keeps its file's identity (device, inode, size, modified and changed
**    times; Windows: volume, file index, size, write and creation times) and header (its
**    checksum): a new lookup by path (a new connection's first embed(), hybridsql_model('PATH')
**    again) whose file is no longer that one reads it again (and shares the copy read before
**    where the bytes before the word table, which hold its checksums, are the same: a file
**    touched or copied again).  Models stay until the process exits (a connection may hold one
**    any time), and so does the library from its first model on: it pins itself (pin_library),
**    so that SQLite's unloading it with the last connection that loaded it neither strands its
**    models nor makes the next load read the file again.
** 15. embed() asks sqlite3_is_interrupted() between two windows (SQLite 3.41 and later; older
**    ones have no way to ask) and stops with SQLite's own interrupt error (SQLITE_INTERRUPT,
**    "interrupted"), as any interrupted statement does.
** 16. A database's model is the `model` BLOB of the first row (the lowest rowid) of main's
**    ordinary table hybridsql_model, as `hybridsql model --into FILE` writes it.  Looking for
**    it runs nothing of the database's: no view, virtual table, trigger, generated column,
**    index or collation of its own.  A view, a virtual table, a WITHOUT ROWID table, a table
**    with generated columns or no column `model`, and an object hybridsql_model in temp (which
**    unqualified SQL would read in its place) are refused, each with one line that names what
**    was found and what to do; no such table, or no row, is no model (the next place is
**    looked in).  The BLOB's header (the magic, its declared size, at most HS_STORED_MAX) is
**    read and checked before anything else of it; then its bytes are copied once and checked
**    by hs_model_open().  A refusal is kept for the connection: every later embed() says the
**    same line at once (hybridsql_model() still names another model); a failure to read (a
**    busy or damaged file) is not kept.  A stored model changes the vectors of that
**    connection's embed() and nothing else: it is weights and a vocabulary, never code.
**    embed() or hybridsql_model() called from inside the lookup (an authorizer, a progress
**    handler) is an error of one line, never a second lookup.
** 17. An index's model (issue 41): the model that made the vectors of a hybridsql index, which
**    embed() on it runs without being told, is named by the first row (the lowest rowid) of
**    main's ordinary table index_model, as hybridsql/db/schema.py writes it: model_id (the
**    model file's id) and provider ('local': hybridsql's engine).  It is read by Requirement
**    16's rules: nothing of the database's runs; a view, a virtual table, a WITHOUT ROWID table,
**    a table with generated columns or without those columns, and a temp object of the name are
**    refused, each with one line; no such table, or no row, is no model (the defaults follow).
**    Both values must be text of a model's name (Requirement 13's characters, 63 bytes at most),
**    read through a BLOB handle so that a longer one is never read whole; anything else is one
**    line.  A provider other than 'local' (openai, llm) made vectors that embed() cannot make:
**    one line.  A local model runs from "<model_id>.hsmodel" beside the library, else in the
**    cache folder; where neither has it, one line names the file and the command that writes it
**    (looked for again at the next embed(), so that a file written since is found).  The
**    refusals are kept for the connection, as Requirement 16's.
*/
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* dl_iterate_phdr */
#endif
#include "embedsql.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"
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
#include <dlfcn.h>
#if defined(__linux__)
#include <link.h>
/* glibc before 2.34 keeps dlopen in libdl, which the library does not link (it loads only libc
** and libm): a weak reference, answered by the process's own dlopen, which every SQLite that
** loads an extension has (NULL where none is in the global scope: the library is then not
** pinned, and nothing else changes). */
#pragma weak dlopen
#endif
#endif

SQLITE_EXTENSION_INIT3

/* The model file's name, beside the library and in the cache folder (Requirement 13). */
#define HS_MODEL_FILE "all-MiniLM-L6-v2-int8.hsmodel"
#define HS_PATH 1024 /* a loader's line, at most */
#define HS_MISSING 2048 /* the path of a model file that is not there, at most */
#define HS_ID_BYTES 63 /* a model's name or id, at most (model_file.py's id field, less its NUL) */
#define HS_ERR 4096  /* an error's text, at most */
/* What to do when the file is not there or not a model: the release's file (what a user of the
** bare library has, docs/platforms.md), or the Python package's command that writes it. */
#define HS_MAKE_ONE \
  "take " HS_MODEL_FILE " from hybridsql's release page or write it with `hybridsql model`"

/* ---- The models of this process (Requirement 14) ---- */


/* A model file's word table while blocks of it are not read yet (hs_model_open_head): the file,
** kept open, and which blocks are in the copy; under the models lock. */
typedef struct {
  HsFile file;
  unsigned char *read; /* a flag a block */
  int64_t unread;      /* blocks not read; 0 once every one is (the file is closed then) */
} Unread;

typedef struct Model {
  struct Model *next;
  char *path;        /* the file as first named; NULL for a model read from a BLOB */
  const void *data;  /* its bytes: a copy of the file's (hs_private_bytes), or of the BLOB's */
  size_t n;
  HsModel *model;
  HsFileId file;       /* the file's identity when it was read (a file's model only) */
  Unread *unread;      /* NULL where the model's bytes were read whole */
} Model;

static Model *models; /* only added to, under the lock; never freed */

static void pin_library(void);

#if defined(_WIN32)
static SRWLOCK lock = SRWLOCK_INIT;
static void models_lock(void) { AcquireSRWLockExclusive(&lock); }
static void models_unlock(void) { ReleaseSRWLockExclusive(&lock); }
#else
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void models_lock(void) { pthread_mutex_lock(&lock); }
static void models_unlock(void) { pthread_mutex_unlock(&lock); }
#endif

static Model *model_add(char *path, const void *data, size_t n, HsModel *m, Unread *u) {
  static int pinned;
  Model *x = calloc(1, sizeof *x);
  if (!x) return 0;
  if (!pinned) {
    pin_library();
    pinned = 1;
  }
  x->path = path;
  x->data = data;
  x->n = n;
  x->model = m;
  x->unread = u;
  x->next = models;
  models = x;
  return x;
}

/* Where the model comes from, for its errors: "the model file PATH", "$HYBRIDSQL_MODEL (PATH)". */
static void model_error(char *err, const char *where, const char *why) {
  snprintf(err, HS_ERR, "embed(): %s %s; %s, or name another", where, why, HS_MAKE_ONE);
}

/* The error of a file that changed or failed between two reads. */
static void read_error(char *err, const char *where, int rc) {
  if (rc > 0) {
    snprintf(err, HS_ERR, "embed(): %s changed while it was read: try again once it is written",
             where);
  } else {
    model_error(err, where, "cannot be read");
  }
}

/* Every block of the word table of m, read from f a stretch at a time into memory reused (none
** of it kept), checked against its checksum: as file_model_read's codes. */
static int words_check(HsFile f, const HsModel *m, char *why, size_t whycap) {
  enum { READ = 0, NOMEM = 2, REFUSED = 3 };
  int64_t blocks = hs_model_word_blocks(m), step = 64; /* blocks a read: e5's 864 KB */
  uint64_t at0, bytes, last_at, last_bytes;
  hs_model_word_block(m, 0, &at0, &bytes);
  unsigned char *buf = malloc((size_t)(bytes * (uint64_t)step));
  int rc = buf ? READ : NOMEM;
  for (int64_t b = 0; b < blocks && rc == READ; b += step) {
    int64_t end = b + step < blocks ? b + step : blocks;
    uint64_t from;
    hs_model_word_block(m, b, &from, &bytes);
    hs_model_word_block(m, end - 1, &last_at, &last_bytes);
    rc = hs_file_read(f, buf, (size_t)(last_at + last_bytes - from), from);
    for (int64_t i = b; i < end && rc == READ; i++) {
      hs_model_word_block(m, i, &at0, &bytes);
      if (!hs_model_word_block_ok(m, i, buf + (at0 - from), why, whycap)) rc = REFUSED;
    }
  }
  free(buf);
  return rc;
}

/* The file's model, read and checked, added to the models: under the lock.  Its bytes are
** copied into memory of the process's own, and its identity checked again after: a file that
** changes under the process or is cut short can no longer reach a vector (a mapping gave SIGBUS,
** or other weights, then).  A format-2 file's word table is checked whole now (words_check) and
** copied a block at a time by copy_words: then the model keeps f open (*kept is set) and the
** caller must not close it. */
static const Model *file_model_read(HsFile f, const char *path, const HsFileId *id, const char *where,
                                    int *kept, char *err) {
  enum { READ = 0, CHANGED = 1, FAILED = -1, NOMEM = 2, REFUSED = 3 };
  size_t n = (size_t)id->size; /* at most HS_MODEL_MOST: hs_model_header said so */
  size_t head = (size_t)hs_model_words_at(id->header, id->size); /* the bytes copied now */
  void *data = hs_private_bytes(n, head);
  char *name = hs_joined(path, "");
  char why[HS_PATH] = "";
  HsModel *m = 0;
  Unread *u = 0;
  HsFileId now;
  int rc = data && name ? hs_file_read(f, data, head, 0) : NOMEM;
  if (rc == READ) {
    m = head < n ? hs_model_open_head(data, n, why, sizeof why)
                 : hs_model_open(data, n, why, sizeof why);
    if (!m) rc = REFUSED;
  }
  if (rc == READ && head < n) rc = words_check(f, m, why, sizeof why);
  if (rc == READ && hs_file_identity(f, &now) != 0) rc = FAILED;
  if (rc == READ) {
    memcpy(now.header, data, sizeof now.header);
    if (!hs_same_file(id, &now)) rc = CHANGED;
  }
  /* One read before from the same bytes (a file touched or copied again): shared.  The head
  ** holds the word blocks' checksums, so two files of the same head have the same table. */
  const Model *same = 0;
  for (Model *x = models; rc == READ && x && !same; x = x->next) {
    if (x->path && x->n == n && memcmp(x->data, data, head) == 0) same = x;
  }
  if (same) {
    Model *x = model_add(name, same->data, n, same->model, same->unread);
    if (x) {
      x->file = *id;
      hs_model_free(m);
      hs_private_free(data, n);
      return x;
    }
    rc = NOMEM;
  } else if (rc == READ) {
    if (head < n) {
      u = calloc(1, sizeof *u);
      if (u) u->read = calloc((size_t)hs_model_word_blocks(m), 1);
      if (u && u->read) {
        u->file = f;
        u->unread = hs_model_word_blocks(m);
      }
    }
    Model *x = head == n || (u && u->read) ? model_add(name, data, n, m, u) : 0;
    if (x) {
      x->file = *id;
      *kept = u != 0;
      return x;
    }
    rc = NOMEM;
  }
  if (rc == NOMEM) {
    snprintf(err, HS_ERR, "embed(): out of memory");
  } else if (rc == REFUSED) {
    snprintf(err, HS_ERR, "embed(): %s: %s", where, why);
  } else {
    read_error(err, where, rc);
  }
  if (u) free(u->read);
  free(u);
  hs_model_free(m);
  hs_private_free(data, n);
  free(name);
  return 0;
}

/* The word-table blocks that the text of len bytes needs in its role, read from the model's file
** where they are not yet and checked (Requirement 14): 0, else 1 with err set. */
static int copy_words(const Model *x, const char *text, int64_t len, int role, char *err) {
  Unread *u = x->unread;
  models_lock();
  int64_t unread = u->unread;
  models_unlock();
  if (unread == 0) return 0;
  const HsModel *m = x->model;
  int64_t cap = 8 * (int64_t)hs_model_window(m) + 2; /* hs_model_embed reads 8 windows at most */
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
  int64_t n = ids ? hs_model_tokens(m, text, len, role, 8, ids, cap - 2) : -1;
  if (n < 0) {
    free(ids);
    snprintf(err, HS_ERR, "embed(): out of memory");
    return 1;
  }
  ids[n++] = hs_model_special(m, 0);
  ids[n++] = hs_model_special(m, 1);
  int failed = 0;
  models_lock();
  for (int64_t i = 0; i < n && u->unread && !failed; i++) {
    int64_t b = ids[i] / HS_WORD_BLOCK;
    if (ids[i] < 0 || b >= hs_model_word_blocks(m) || u->read[b]) continue;
    uint64_t at, bytes;
    hs_model_word_block(m, b, &at, &bytes);
    unsigned char *place = (unsigned char *)x->data + at;
    char why[HS_PATH];
    int rc = hs_file_read(u->file, place, (size_t)bytes, at);
    if (rc != 0 || !hs_model_word_block_ok(m, b, place, why, sizeof why)) {
      snprintf(err, HS_ERR,
               "embed(): the model file %s %s (its word rows %lld to %lld%s): restart the process"
               " once the file is whole; %s",
               x->path,
               rc < 0 ? "can no longer be read" : "changed or was damaged since it was read",
               (long long)(b * HS_WORD_BLOCK), (long long)(b * HS_WORD_BLOCK + HS_WORD_BLOCK - 1),
               rc > 0 ? " are past its end" : rc == 0 ? " do not match their checksum" : "",
               HS_MAKE_ONE);
      failed = 1;
    } else {
      u->read[b] = 1;
      if (--u->unread == 0) hs_file_close(u->file); /* every block in memory: done with it */
    }
  }
  models_unlock();
  free(ids);
  return failed;
}

/* The model of the file at path: the one read before while the file is still that one (its
** identity and header), else read and checked now; NULL with err set ("embed(): WHERE does not
** exist; ...") on any failure.  where names the file for the user: "the model file /x" or
** "$HYBRIDSQL_MODEL (/x)". */
static const Model *model_from_file(const char *path, const char *where, char *err) {
  HsFile f;
  HsFileId id;
  const char *why;
  if (hs_file_open(path, &f, &id, &why) != 0) {
    model_error(err, where, why);
    return 0;
  }
  const Model *found = 0;
  int kept = 0; /* f, by the model found */
  size_t head = id.size < HS_MODEL_HEADER ? (size_t)id.size : HS_MODEL_HEADER;
  char why_open[HS_PATH] = "";
  int rc;
  memset(id.header, 0, sizeof id.header);
  if (id.size == 0) {
    model_error(err, where, "is empty: it is not a model file");
  } else if ((rc = hs_file_read(f, id.header, head, 0)) != 0) {
    read_error(err, where, rc);
  } else if (hs_model_header(id.header, id.size, why_open, sizeof why_open) != 0) {
    snprintf(err, HS_ERR, "embed(): %s: %s", where, why_open);
  } else {
    models_lock();
    for (Model *x = models; x && !found; x = x->next) {
      if (x->path && hs_same_file(&x->file, &id)) found = x;
    }
    if (!found) found = file_model_read(f, path, &id, where, &kept, err);
    models_unlock();
  }
  if (!kept) hs_file_close(f);
  return found;
}

/* The model of the n bytes at copy (from malloc, 8-aligned; taken over), one per process and
** content: the copy is freed where the process holds the same bytes already, or where the engine
** refuses them (then *refused is set, and err says why after "embed(): WHERE: "). */
static const Model *model_adopt(void *copy, size_t n, const char *where, char *err, int *refused) {
  models_lock();
  const Model *found = 0;
  for (Model *x = models; x && !found; x = x->next) {
    if (!x->path && x->n == n && memcmp(x->data, copy, n) == 0) found = x;
  }
  if (found) {
    models_unlock();
    free(copy);
    return found;
  }
  char why[HS_PATH] = "";
  HsModel *m = hs_model_open(copy, n, why, sizeof why);
  if (m) found = model_add(0, copy, n, m, 0);
  models_unlock();
  if (!found) {
    if (m) hs_model_free(m);
    free(copy);
    if (m) {
      snprintf(err, HS_ERR, "embed(): out of memory");
    } else {
      snprintf(err, HS_ERR, "embed(): %s: %s", where, why);
      *refused = 1;
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
  models_unlock();
  if (found) return found;
  void *copy = malloc(n ? n : 1);
  if (!copy) {
    snprintf(err, HS_ERR, "embed(): out of memory");
    return 0;
  }
  int refused = 0;
  return model_adopt(memcpy(copy, blob, n), n, where, err, &refused);
}

/* ---- Where the model file is looked for (Requirement 13) ---- */

/* The folder of the loaded library, with a trailing separator, in memory from malloc; NULL if
** unknown. */
#if defined(_WIN32)
static char *library_folder(void) {
  HMODULE self;
  wchar_t path[MAX_PATH * 4];
  if (!GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS |
                              GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                          (LPCWSTR)(void *)library_folder, &self)) {
    return 0;
  }
  DWORD n = GetModuleFileNameW(self, path, MAX_PATH * 4);
  if (n == 0 || n >= MAX_PATH * 4) return 0;
  int len = WideCharToMultiByte(CP_UTF8, 0, path, -1, 0, 0, 0, 0);
  char *buf = len > 0 ? malloc((size_t)len) : 0;
  char *slash = buf && WideCharToMultiByte(CP_UTF8, 0, path, -1, buf, len, 0, 0) == len
                    ? strrchr(buf, '\\')
                    : 0;
  if (!slash) {
    free(buf);
    return 0;
  }
  slash[1] = 0;
  return buf;
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

static char *library_folder(void) {
  Found f = {0, (uintptr_t)(void *)library_folder};
  if (!dl_iterate_phdr(find_self, &f) || !f.name || !strrchr(f.name, '/')) return 0;
  char *buf = hs_joined(f.name, "");
  if (buf) strrchr(buf, '/')[1] = 0;
  return buf;
}
#else
static char *library_folder(void) {
  Dl_info info;
  if (!dladdr((void *)library_folder, &info) || !info.dli_fname || !strrchr(info.dli_fname, '/'))
    return 0;
  char *buf = hs_joined(info.dli_fname, "");
  if (buf) strrchr(buf, '/')[1] = 0;
  return buf;
}
#endif

/* The library kept in the process until it exits, from its first model on (Requirement 14).
** SQLite unloads an extension when the last connection that loaded it closes; the models, in
** memory this library's statics point to, would stay unreachable, and the library loaded again
** would read its model again (23 MB more at each open, embed, close).  No-op for a library
** compiled into its program. */
#if defined(_WIN32)
static void pin_library(void) {
  HMODULE self;
  GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_PIN,
                     (LPCWSTR)(void *)pin_library, &self);
}
#elif defined(__linux__)
static void pin_library(void) {
  Found f = {0, (uintptr_t)(void *)pin_library};
  /* Its own name as it was loaded (the main program's is ""): RTLD_NOLOAD finds that library
  ** and loads nothing, RTLD_NODELETE keeps it; the handle is never closed. */
  if (dlopen && dl_iterate_phdr(find_self, &f) && f.name && *f.name) {
    (void)dlopen(f.name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  }
}
#else
static void pin_library(void) {
  Dl_info info;
  if (dladdr((void *)pin_library, &info) && info.dli_fname && *info.dli_fname) {
    (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  }
}
#endif

/* hybridsql.embed.cache_dir(), with a trailing separator, in memory from malloc (a path of any
** length); NULL if there is none. */
static char *cache_folder(void) {
  const char *chosen = getenv("HYBRIDSQL_CACHE_DIR");
#if defined(_WIN32)
  const char *local = getenv("LOCALAPPDATA");
  const char *home = getenv("USERPROFILE");
  if (chosen && *chosen) return hs_joined(chosen, "\\");
  if (local && *local) return hs_joined(local, "\\hybridsql\\Cache\\");
  if (home && *home) return hs_joined(home, "\\.cache\\hybridsql\\");
#else
  const char *home = getenv("HOME");
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (chosen && *chosen) return hs_joined(chosen, "/");
#if defined(__APPLE__)
  (void)xdg;
  if (home && *home) return hs_joined(home, "/Library/Caches/hybridsql/");
#else
  if (xdg && *xdg) return hs_joined(xdg, "/hybridsql/");
  if (home && *home) return hs_joined(home, "/.cache/hybridsql/");
#endif
#endif
  return 0;
}

/* The model file `file` beside the library, else the cache folder's (Requirements 13 and 17);
** NULL with err set where the one there is refused, or with missing set (HS_MISSING bytes) to the
** path it would have in the cache folder where neither folder has it (else to ""). */
static const Model *model_in_folders(const char *file, char *err, char *missing) {
  char *folders[2] = {library_folder(), cache_folder()};
  const Model *found = 0;
  int looked = 0;
  missing[0] = 0;
  for (int i = 0; i < 2 && !looked; i++) {
    char *path = folders[i] ? hs_joined(folders[i], file) : 0;
    if (folders[i] && !path) {
      snprintf(err, HS_ERR, "embed(): out of memory");
      looked = 1;
    } else if (path && hs_exists(path)) {
      char where[HS_ERR];
      snprintf(where, sizeof where, "the model file %s", path);
      found = model_from_file(path, where, err);
      looked = 1;
    }
    free(path);
  }
  if (!looked) {
    const char *folder = folders[1] ? folders[1] : folders[0] ? folders[0] : "";
    snprintf(missing, HS_MISSING, "%s%s", folder, file);
    if (!missing[0]) snprintf(missing, HS_MISSING, "%s", file); /* never "" once missing */
    /* The step docs/platforms.md gives a user of the bare library first, then the Python
    ** package's: either may be the one reading this (a named model's caller says its own). */
    snprintf(err, HS_ERR,
             "embed(): no model file: put %s (from hybridsql's release page) %s%s,"
             " or write it with `hybridsql model`%s%s, or name one with $HYBRIDSQL_MODEL or"
             " hybridsql_model('PATH')",
             file, folders[0] ? "in the library's folder " : "beside the library",
             folders[0] ? folders[0] : "", folders[1] ? " to " : "", folders[1] ? folders[1] : "");
  }
  free(folders[0]);
  free(folders[1]);
  return found;
}

/* The default model: HS_MODEL_FILE beside the library, else in the cache folder. */
static const Model *default_model(char *err) {
  char missing[HS_MISSING];
  return model_in_folders(HS_MODEL_FILE, err, missing); /* err says what to do if missing */
}

/* ---- Models by name (Requirements 13 and 17) ---- */

/* The models hybridsql knows by name (hybridsql/embedding/models.py's KNOWN, which a test
** compares with this): the name a user gives, the id of the file it is converted into (its file
** in the folders is "<id>.hsmodel"), and the extras that make it. */
static const struct {
  const char *name, *id, *extras;
} known_models[] = {
    {"all-MiniLM-L6-v2", "all-MiniLM-L6-v2-int8", "local"},
    {"multilingual-e5-small", "multilingual-e5-small-q4", "local,multilingual"},
};
#define HS_KNOWN_MODELS (int)(sizeof known_models / sizeof known_models[0])

/* Whether the n bytes at s are a model's name or id, as a file name takes it in any folder of
** any system: 1 to HS_ID_BYTES letters, digits, '.', '_' or '-', the first not '.'. */
static int is_model_id(const char *s, size_t n) {
  if (n < 1 || n > HS_ID_BYTES || s[0] == '.') return 0;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
          ch == '.' || ch == '_' || ch == '-'))
      return 0;
  }
  return 1;
}

/* Whether the text a path is taken from names a model instead: a model's name or id, not a
** path to a model file (no separator, not ending in ".hsmodel") nor a file that hs_exists. */
static int names_a_model(const char *text) {
  size_t n = strlen(text);
  return is_model_id(text, n) && !(n >= 8 && strcmp(text + n - 8, ".hsmodel") == 0) &&
         !hs_exists(text);
}

/* The known model of name or id, -1 for none. */
static int known_model(const char *name) {
  for (int i = 0; i < HS_KNOWN_MODELS; i++) {
    if (strcmp(name, known_models[i].name) == 0 || strcmp(name, known_models[i].id) == 0) return i;
  }
  return -1;
}

/* The name a user knows a model by: a known model's name, else its id. */
static const char *shown_name(const char *id) {
  int k = known_model(id);
  return k >= 0 ? known_models[k].name : id;
}

/* The model called name (a known model's name, or a model file's id): the file "<id>.hsmodel"
** beside the library, else in the cache folder; NULL with err set ("embed(): WHERE, whose file
** ... ") where neither holds it, or where the one found is refused.  where says how the name was
** given ("the model NAME", "$HYBRIDSQL_MODEL names the model NAME"). */
static const Model *model_named(const char *name, const char *where, char *err) {
  char file[HS_ID_BYTES + 16], path[HS_MISSING];
  int k = known_model(name);
  snprintf(file, sizeof file, "%s.hsmodel", k >= 0 ? known_models[k].id : name);
  const Model *found = model_in_folders(file, err, path);
  if (!path[0]) return found;
  if (k >= 0) {
    snprintf(err, HS_ERR,
             "embed(): %s, whose file %s is neither beside the library nor at %s; write it with"
             " `hybridsql model %s` (pip install 'hybridsql[%s]'), or name another model with"
             " hybridsql_model('NAME') or $HYBRIDSQL_MODEL",
             where, file, path, known_models[k].name, known_models[k].extras);
  } else {
    snprintf(err, HS_ERR,
             "embed(): %s, whose file %s is neither beside the library nor at %s; convert it there"
             " again with `hybridsql model PATH` (its Hugging Face folder or model file), or name"
             " another model with hybridsql_model('NAME') or $HYBRIDSQL_MODEL",
             where, file, path);
  }
  return 0;
}

/* ---- A database's own model (Requirements 13 and 16) ---- */

#define HS_TABLE "hybridsql_model" /* where a database keeps its model: engine.MODEL_TABLE */
/* The bytes a database's model may have: ten times the model `hybridsql model` writes, room
** for a larger model of the same engine, and no more (Requirement 16). */
#define HS_STORED_MAX (256u << 20)
/* The start of model_file.py's format: the magic, and the file's bytes at offset 24. */
#define HS_HEADER 128
static const char HS_MAGIC[16] = "hybridsql model";
/* What a refusal of a database's model tells the user to do. */
#define HS_KEEP                                                                                \
  "a database keeps its model in an ordinary table hybridsql_model(model BLOB) as `hybridsql"   \
  " model --into FILE` writes it; or name a model with hybridsql_model('PATH') or"              \
  " $HYBRIDSQL_MODEL"

/* What a lookup of a database's model found. */
typedef enum {
  LOOKED_NONE,    /* no table hybridsql_model, or no row: look further */
  LOOKED_FOUND,   /* the model */
  LOOKED_REFUSED, /* what the database holds is no model: said again at each embed() */
  LOOKED_FAILED,  /* the database could not be read (busy, I/O, memory): asked again next time */
  LOOKED_STOPPED  /* interrupted */
} Looked;

/* The text after the spaces and comments at s, as SQLite's tokenizer skips them. */
static const char *past_space(const char *s) {
  for (;;) {
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\f' || *s == '\r') s++;
    if (s[0] == '-' && s[1] == '-') {
      while (*s && *s != '\n') s++;
    } else if (s[0] == '/' && s[1] == '*') {
      const char *end = strstr(s + 2, "*/");
      s = end ? end + 2 : s + strlen(s);
    } else {
      return s;
    }
  }
}

static int is_name_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_' || ch == '$' || (unsigned char)ch >= 0x80;
}

/* Whether *s, past spaces and comments, is the keyword word (in any case); moves *s past it. */
static int keyword(const char **s, const char *word) {
  const char *at = past_space(*s);
  size_t n = strlen(word);
  if (sqlite3_strnicmp(at, word, (int)n) != 0 || is_name_char(at[n])) return 0;
  *s = at + n;
  return 1;
}

/* Whether s, past spaces and comments, is the name table alone (not a schema's name before a
** dot), bare or quoted ("", ``, '', []) and in any case, as SQLite reads a name. */
static int names_table(const char *s, const char *table) {
  char name[32];
  size_t n = 0;
  s = past_space(s);
  char close = *s == '"' ? '"' : *s == '`' ? '`' : *s == '\'' ? '\'' : *s == '[' ? ']' : 0;
  if (close) {
    for (s++; *s && (*s != close || (close != ']' && s[1] == close)); s++) {
      if (*s == close) s++; /* a doubled quote is one */
      if (n == sizeof name - 1) return 0;
      name[n++] = *s;
    }
    if (*s++ != close) return 0;
  } else {
    while (is_name_char(*s)) {
      if (n == sizeof name - 1) return 0;
      name[n++] = *s++;
    }
  }
  name[n] = 0;
  return *past_space(s) != '.' && sqlite3_stricmp(name, table) == 0;
}

/* What SQLite made of a schema's sql, the statement it runs to load the object: an ordinary
** table of that name ("table", WITHOUT ROWID and generated columns aside), or what else (a
** file's schema may hold any text that SQLite parses, whatever its columns type and name say). */
static const char *created(const char *sql, const char *table) {
  if (!sql || !keyword(&sql, "create")) return "not an ordinary table";
  if (keyword(&sql, "table")) return names_table(sql, table) ? "table" : "not an ordinary table";
  if (keyword(&sql, "view")) return "a view, whose SQL embed() does not run";
  if (keyword(&sql, "virtual")) return "a virtual table, whose module embed() does not run";
  return "not an ordinary table";
}

/* One statement of the lookup prepared and stepped once: SQLITE_ROW, SQLITE_DONE or the error. */
static int first_row(sqlite3 *db, const char *sql, sqlite3_stmt **st) {
  int rc = sqlite3_prepare_v2(db, sql, -1, st, 0);
  return rc == SQLITE_OK ? sqlite3_step(*st) : rc;
}

/* The lookup's failure to read table: one line with SQLite's reason (which may quote the
** lines of a malformed schema's SQL: each control character becomes a space); LOOKED_STOPPED
** where it was interrupted (SQLite's own error then reaches the caller, as from embed()
** itself). */
static Looked failed(sqlite3 *db, int rc, const char *table, char *err) {
  snprintf(err, HS_ERR, "embed(): cannot look for a model in this database's table %s: %s",
           table, sqlite3_errmsg(db));
  for (char *c = err; *c; c++) {
    if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = ' ';
  }
  return rc == SQLITE_INTERRUPT ? LOOKED_STOPPED : LOOKED_FAILED;
}

/* A refusal of what the database holds: why, then what to do (keep). */
static void refused(char *err, const char *why, const char *keep) {
  snprintf(err, HS_ERR, "embed(): %s; %s", why, keep);
}

/* Whether the BLOB open in b equals the n bytes at data, read a block at a time. */
static int blob_equals(sqlite3_blob *b, const unsigned char *data, int n, int *rc) {
  unsigned char block[16384];
  for (int at = 0; at < n; at += (int)sizeof block) {
    int len = n - at < (int)sizeof block ? n - at : (int)sizeof block;
    if ((*rc = sqlite3_blob_read(b, block, len, at)) != SQLITE_OK) return 0;
    if (memcmp(block, data + at, (size_t)len) != 0) return 0;
  }
  return 1;
}

/* The model in the BLOB of n bytes open in b (Requirement 16): its header checked before
** anything else is read, a model of the same bytes in the process used as it is, else the
** bytes copied once and opened. */
static Looked model_in_blob(sqlite3 *db, sqlite3_blob *b, int n, const Model **found, char *err) {
  const char *where = "the model in the table " HS_TABLE;
  unsigned char header[HS_HEADER];
  uint64_t size = 0;
  int rc, engine_refused = 0;
  if (n >= HS_HEADER) {
    if ((rc = sqlite3_blob_read(b, header, HS_HEADER, 0)) != SQLITE_OK) return failed(db, rc, HS_TABLE, err);
    memcpy(&size, header + 24, sizeof size); /* little-endian, as model.c requires of its host */
    if (memcmp(header, HS_MAGIC, sizeof HS_MAGIC) != 0) {
      snprintf(err, HS_ERR,
               "embed(): the table %s holds a BLOB of %d bytes in its column model that is not"
               " a model file (it does not start with \"hybridsql model\"); store one with"
               " `hybridsql model --into FILE`",
               HS_TABLE, n);
      return LOOKED_REFUSED;
    }
    if (size > HS_STORED_MAX) {
      snprintf(err, HS_ERR,
               "embed(): %s has %llu bytes, more than the %u MiB a database's model may have;"
               " name a model file with hybridsql_model('PATH') or $HYBRIDSQL_MODEL",
               where, (unsigned long long)size, HS_STORED_MAX >> 20);
      return LOOKED_REFUSED;
    }
    if (size != (uint64_t)n) {
      snprintf(err, HS_ERR,
               "embed(): %s is damaged: its header says %llu bytes, its BLOB has %d; store it"
               " again with `hybridsql model --into FILE`",
               where, (unsigned long long)size, n);
      return LOOKED_REFUSED;
    }
    /* The models never go and a node never changes once added: the list is walked unlocked. */
    models_lock();
    const Model *x = models;
    models_unlock();
    for (; x; x = x->next) {
      if (x->path || x->n != (size_t)n || memcmp(x->data, header, HS_HEADER) != 0) continue;
      if (blob_equals(b, x->data, n, &rc)) {
        *found = x;
        return LOOKED_FOUND;
      }
      if (rc != SQLITE_OK) return failed(db, rc, HS_TABLE, err);
    }
  }
  unsigned char *copy = malloc(n ? (size_t)n : 1);
  if (!copy) {
    snprintf(err, HS_ERR, "embed(): out of memory");
    return LOOKED_FAILED;
  }
  if (n && (rc = sqlite3_blob_read(b, copy, n, 0)) != SQLITE_OK) {
    free(copy);
    return failed(db, rc, HS_TABLE, err);
  }
  *found = model_adopt(copy, (size_t)n, where, err, &engine_refused);
  return *found ? LOOKED_FOUND : engine_refused ? LOOKED_REFUSED : LOOKED_FAILED;
}

/* A table of the database that a lookup reads (Requirements 16 and 17): its name, the columns
** it must have, and what a refusal of it tells the user to do. */
typedef struct {
  const char *table;
  const char *columns[2]; /* a second one may be NULL */
  const char *keep;
} Shape;

/* Whether main's table s->table is an ordinary rowid table with s's columns, found in the schema
** tables and its kind told by the statement that made it: nothing of the database's runs.
** LOOKED_FOUND with the name its rowid is read by in *rowid and, in *hold, the statement that
** read main's schema, stepped once and still open (the caller finalizes it once its reads are
** done: they run inside that one read of the database, which no other process's change can cut
** into); LOOKED_NONE where there is no such table; LOOKED_REFUSED with the line in err;
** LOOKED_FAILED or LOOKED_STOPPED where the database could not be read. */
static Looked ordinary_table(sqlite3 *db, const Shape *s, const char **rowid, sqlite3_stmt **hold,
                             char *err) {
  static const char *const rowid_names[3] = {"rowid", "_rowid_", "oid"};
  sqlite3_stmt *st = 0;
  Looked looked = LOOKED_REFUSED;
  char sql[256], why[512];
  const char *kind;
  /* A column named rowid, _rowid_ or oid hides the rowid: it is read by the first name left */
  int taken[3] = {0, 0, 0}, has[2] = {0, 0}, generated = 0, rowid_name = 0;
  *hold = 0;
  snprintf(sql, sizeof sql,
           "select type from temp.sqlite_master where type in ('table', 'view') and name = '%s'"
           " collate nocase",
           s->table);
  int rc = first_row(db, sql, &st);
  if (rc == SQLITE_ROW) {
    snprintf(why, sizeof why,
             "temp.%s is a %s of this connection, where embed() never looks for a model: drop it",
             s->table, (const char *)sqlite3_column_text(st, 0));
    refused(err, why, s->keep);
    goto done;
  }
  if (rc != SQLITE_DONE) goto read_failed;
  snprintf(sql, sizeof sql,
           "select sql from main.sqlite_master where type in ('table', 'view') and name = '%s'"
           " collate nocase",
           s->table);
  rc = first_row(db, sql, hold);
  if (rc == SQLITE_DONE) {
    looked = LOOKED_NONE;
    goto done;
  }
  if (rc != SQLITE_ROW) goto read_failed;
  kind = created((const char *)sqlite3_column_text(*hold, 0), s->table);
  if (strcmp(kind, "table") != 0) {
    snprintf(why, sizeof why, "main.%s is %s", s->table, kind);
    refused(err, why, s->keep);
    goto done;
  }

  /* table_xinfo (SQLite 3.26) names generated columns too; before it, table_info (no SQLite
  ** before 3.31 has generated columns) answers. */
  for (int pass = 0; pass < 2 && !has[0]; pass++) {
    sqlite3_finalize(st);
    snprintf(sql, sizeof sql, pass ? "pragma main.table_info('%s')" : "pragma main.table_xinfo('%s')",
             s->table);
    rc = first_row(db, sql, &st);
    for (; rc == SQLITE_ROW; rc = sqlite3_step(st)) {
      const char *name = (const char *)sqlite3_column_text(st, 1);
      if (!name) continue;
      for (int i = 0; i < 2 && s->columns[i]; i++) has[i] |= sqlite3_stricmp(name, s->columns[i]) == 0;
      generated |= !pass && sqlite3_column_int(st, 6) >= 2;
      for (int i = 0; i < 3; i++) taken[i] |= sqlite3_stricmp(name, rowid_names[i]) == 0;
    }
    if (rc != SQLITE_DONE) goto read_failed;
  }
  for (int i = 0; i < 2 && s->columns[i]; i++) {
    if (!has[i]) {
      snprintf(why, sizeof why, "main.%s has no column %s", s->table, s->columns[i]);
      refused(err, why, s->keep);
      goto done;
    }
  }
  if (generated) {
    snprintf(why, sizeof why, "main.%s has generated columns, whose values SQL computes", s->table);
    refused(err, why, s->keep);
    goto done;
  }
  /* index_info of a WITHOUT ROWID table names its primary key (SQLite 3.30; before it, the
  ** select of the row finds no rowid and says so). */
  sqlite3_finalize(st);
  snprintf(sql, sizeof sql, "pragma main.index_info('%s')", s->table);
  rc = first_row(db, sql, &st);
  if (rc == SQLITE_ROW) {
    snprintf(why, sizeof why, "main.%s is a WITHOUT ROWID table, which has no BLOB handle to read",
             s->table);
    refused(err, why, s->keep);
    goto done;
  }
  if (rc != SQLITE_DONE) goto read_failed;
  while (rowid_name < 3 && taken[rowid_name]) rowid_name++;
  if (rowid_name == 3) {
    snprintf(why, sizeof why,
             "main.%s has columns named rowid, _rowid_ and oid, which hide the rowid its model is"
             " read by",
             s->table);
    refused(err, why, s->keep);
    goto done;
  }
  *rowid = rowid_names[rowid_name];
  looked = LOOKED_FOUND;
  goto done;

read_failed:
  looked = failed(db, rc, s->table, err);
done:
  sqlite3_finalize(st);
  if (looked != LOOKED_FOUND) {
    sqlite3_finalize(*hold);
    *hold = 0;
  }
  return looked;
}

/* The model of main.hybridsql_model (Requirement 16): only an ordinary rowid table with a column
** model and no generated column is read (ordinary_table), through a statement on the table itself
** and a BLOB handle. */
static Looked model_in_database(sqlite3 *db, const Model **found, char *err) {
  static const Shape shape = {HS_TABLE, {"model", 0}, HS_KEEP};
  sqlite3_stmt *schema = 0, *st = 0;
  sqlite3_blob *b = 0;
  const char *rowid = 0, *type;
  char sql[256];
  int rc;
  Looked looked = ordinary_table(db, &shape, &rowid, &schema, err);
  if (looked != LOOKED_FOUND) return looked;
  looked = LOOKED_REFUSED;

  /* The first row's rowid and the model's type, read from the table alone (NOT INDEXED: no
  ** index of the database's, whatever it holds) and without the BLOB itself. */
  snprintf(sql, sizeof sql, "select %s, typeof(model) from main.%s not indexed order by %s limit 1",
           rowid, HS_TABLE, rowid);
  rc = first_row(db, sql, &st);
  if (rc == SQLITE_DONE) {
    looked = LOOKED_NONE;
    goto done;
  }
  if (rc != SQLITE_ROW) goto read_failed;
  type = (const char *)sqlite3_column_text(st, 1);
  if (!type || strcmp(type, "blob") != 0) {
    snprintf(err, HS_ERR,
             "embed(): the table %s holds %s in its column model, not the model file's bytes;"
             " store them with `hybridsql model --into FILE`",
             HS_TABLE, !type || strcmp(type, "null") == 0 ? "NULL" : type);
    goto done;
  }
  rc = sqlite3_blob_open(db, "main", HS_TABLE, "model", sqlite3_column_int64(st, 0), 0, &b);
  if (rc != SQLITE_OK) goto read_failed;
  looked = model_in_blob(db, b, sqlite3_blob_bytes(b), found, err);
  goto done;

read_failed:
  looked = failed(db, rc, HS_TABLE, err);
done:
  sqlite3_blob_close(b);
  sqlite3_finalize(st);
  sqlite3_finalize(schema);
  return looked;
}

/* ---- An index's model (Requirement 17) ---- */

#define HS_INDEX_TABLE "index_model" /* where an index records its model: db/schema.py */
#define HS_RECORD                                                                               \
  "an index records its model in an ordinary table index_model(model_id, provider, ...) as"     \
  " `hybridsql index` writes it; re-index it with `hybridsql index DIR --db FILE --reembed`, or" \
  " name a model with hybridsql_model('NAME') or $HYBRIDSQL_MODEL"

/* The text of column in the row of HS_INDEX_TABLE, through a BLOB handle (so that nothing more
** of it is read): its bytes into out (NUL-terminated, cap - 1 at most; *bytes of them, a NUL
** among them counted) and 0; 1 where it has more bytes than that; -1 where it cannot be read
** (*rc says why). */
static int short_text(sqlite3 *db, const char *column, sqlite3_int64 row, char *out, int cap,
                      int *bytes, int *rc) {
  sqlite3_blob *b = 0;
  int result = 1;
  *rc = sqlite3_blob_open(db, "main", HS_INDEX_TABLE, column, row, 0, &b);
  if (*rc == SQLITE_OK) {
    int n = *bytes = sqlite3_blob_bytes(b);
    if (n < cap) {
      *rc = n ? sqlite3_blob_read(b, out, n, 0) : SQLITE_OK;
      out[n] = 0;
      result = *rc == SQLITE_OK ? 0 : -1;
    }
  } else {
    result = -1;
  }
  sqlite3_blob_close(b);
  return result;
}

/* The model that made the index's vectors (Requirement 17): the first row of main.index_model,
** read under Requirement 16's rules, names it; a model of hybridsql's engine ('local') is run
** from its file, found as model_named() finds one. */
static Looked model_of_index(sqlite3 *db, const Model **found, char *err) {
  static const Shape shape = {HS_INDEX_TABLE, {"model_id", "provider"}, HS_RECORD};
  static const char *const columns[2] = {"model_id", "provider"};
  sqlite3_stmt *schema = 0, *st = 0;
  const char *rowid = 0;
  char sql[256], why[512], text[2][HS_ID_BYTES + 1], where[HS_ID_BYTES + 64];
  int rc;
  Looked looked = ordinary_table(db, &shape, &rowid, &schema, err);
  if (looked != LOOKED_FOUND) return looked;
  looked = LOOKED_REFUSED;
  snprintf(sql, sizeof sql,
           "select %s, typeof(model_id), typeof(provider) from main." HS_INDEX_TABLE
           " not indexed order by %s limit 1",
           rowid, rowid);
  rc = first_row(db, sql, &st);
  if (rc == SQLITE_DONE) {
    looked = LOOKED_NONE;
    goto done;
  }
  if (rc != SQLITE_ROW) goto read_failed;
  int named[2];
  for (int i = 0; i < 2; i++) {
    const char *type = (const char *)sqlite3_column_text(st, i + 1);
    if (!type || strcmp(type, "text") != 0) {
      snprintf(why, sizeof why, "main." HS_INDEX_TABLE " holds %s in its column %s, not text",
               !type || strcmp(type, "null") == 0 ? "NULL" : type, columns[i]);
      refused(err, why, HS_RECORD);
      goto done;
    }
    int bytes = 0;
    int got = short_text(db, columns[i], sqlite3_column_int64(st, 0), text[i], sizeof text[i],
                         &bytes, &rc);
    if (got < 0) goto read_failed;
    named[i] = got == 0 && is_model_id(text[i], (size_t)bytes); /* a NUL inside is no name */
  }
  /* Another provider's model_id is its own name, any text (a model of llm's may be
  ** "sentence-transformers/all-MiniLM-L6-v2"): shown only where it is a name. */
  if (!named[1] || strcmp(text[1], "local") != 0) {
    snprintf(err, HS_ERR,
             "embed(): this index's vectors were made by %s%s of %s%s, which embed() cannot run;"
             " embed its queries with that provider, or name a model with hybridsql_model('NAME')"
             " or $HYBRIDSQL_MODEL",
             named[0] ? "the model " : "a model", named[0] ? text[0] : "",
             named[1] ? "the provider " : "another provider", named[1] ? text[1] : "");
    goto done;
  }
  if (!named[0]) {
    snprintf(why, sizeof why,
             "main." HS_INDEX_TABLE "'s model_id is not a model's name (1 to %d letters, digits,"
             " '.', '_' or '-', the first not '.')",
             HS_ID_BYTES);
    refused(err, why, HS_RECORD);
    goto done;
  }
  sqlite3_finalize(st);
  sqlite3_finalize(schema);
  st = schema = 0;
  snprintf(where, sizeof where, "this index was made by the model %s", shown_name(text[0]));
  *found = model_named(text[0], where, err);
  looked = *found ? LOOKED_FOUND : LOOKED_FAILED; /* a file written later is found then */
  goto done;

read_failed:
  looked = failed(db, rc, HS_INDEX_TABLE, err);
done:
  sqlite3_finalize(st);
  sqlite3_finalize(schema);
  return looked;
}

/* ---- The SQL functions ---- */

/* What a connection's embed() and hybridsql_model() share: the model they run once found, or
** the line that refused the database's (Requirement 16), and whether a lookup runs now.  One
** reference a function registered; the last one to go frees it. */
/* A call from inside a lookup: SQLite runs the application's callbacks (an authorizer, a
** progress handler, a trace) within the lookup's statements. */
#define HS_LOOKING                                                                              \
  "called while this connection looks for its model (from inside the lookup: an authorizer,"    \
  " progress handler or trace callback)"

typedef struct {
  int refs;
  int looking;  /* conn_model() runs: a call from inside it is refused, never recursion */
  int stopped;  /* the last lookup was interrupted */
  const Model *model;
  char *refused; /* from sqlite3_malloc */
} Conn;

static void conn_release(void *p) {
  Conn *c = p;
  if (--c->refs == 0) {
    sqlite3_free(c->refused);
    sqlite3_free(c);
  }
}

static const char *sql_type(sqlite3_value *v) {
  switch (sqlite3_value_type(v)) {
    case SQLITE_INTEGER: return "integer";
    case SQLITE_FLOAT: return "real";
    case SQLITE_BLOB: return "blob";
    default: return "text";
  }
}

/* The connection's model, found as Requirement 13 says; NULL with err set if none. */
static const Model *conn_model(sqlite3 *db, Conn *c, char *err) {
  if (c->model) return c->model;
  const char *env = getenv("HYBRIDSQL_MODEL");
  if (env && *env) {
    char where[HS_ERR];
    if (names_a_model(env)) {
      snprintf(where, sizeof where, "$HYBRIDSQL_MODEL names the model %s", env);
      return c->model = model_named(env, where, err);
    }
    snprintf(where, sizeof where, "$HYBRIDSQL_MODEL (%s)", env);
    return c->model = model_from_file(env, where, err);
  }
  const Model *found = 0;
  if (c->refused) {
    snprintf(err, HS_ERR, "%s", c->refused);
    return 0;
  }
  /* The database's own model (Requirement 16), then its index's (Requirement 17). */
  for (int i = 0; i < 2; i++) {
    switch (i ? model_of_index(db, &found, err) : model_in_database(db, &found, err)) {
      case LOOKED_FOUND: return c->model = found;
      case LOOKED_REFUSED: c->refused = sqlite3_mprintf("%s", err); return 0;
      case LOOKED_STOPPED: c->stopped = 1; return 0;
      case LOOKED_FAILED: return 0;
      case LOOKED_NONE: break;
    }
  }
  return c->model = default_model(err);
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

/* A vector kept for a constant argument (sqlite3_set_auxdata), with the role it was made for. */
typedef struct {
  int role;
  float v[];
} Kept;

/* Requirement 12's role, from the 2nd argument; -1 with msg written when it is none. */
static int role_of(sqlite3_value *arg, char *msg, size_t cap) {
  int type = sqlite3_value_type(arg); /* before sqlite3_value_text, which converts a BLOB */
  const char *text = type == SQLITE_TEXT ? (const char *)sqlite3_value_text(arg) : 0;
  if (text) {
    if (strcmp(text, "query") == 0) return HS_MODEL_QUERY;
    if (strcmp(text, "document") == 0) return HS_MODEL_DOCUMENT;
    snprintf(msg, cap, "embed(): 2nd argument must be 'query' or 'document', got '%.40s%s'", text,
             strlen(text) > 40 ? "..." : "");
  } else {
    snprintf(msg, cap, "embed(): 2nd argument must be 'query' or 'document', got %s",
             type == SQLITE_NULL ? "NULL" : sql_type(arg));
  }
  return -1;
}

/* Requirement 12. */
static void embed_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  int type = sqlite3_value_type(argv[0]);
  char msg[160];
  if (type == SQLITE_NULL) return;
  if (type != SQLITE_TEXT) {
    snprintf(msg, sizeof msg, "embed(): 1st argument must be text, got %s", sql_type(argv[0]));
    sqlite3_result_error(ctx, msg, -1);
    return;
  }
  int role = argc < 2 ? HS_MODEL_QUERY : role_of(argv[1], msg, sizeof msg);
  if (role < 0) {
    sqlite3_result_error(ctx, msg, -1);
    return;
  }
  const Kept *kept = sqlite3_get_auxdata(ctx, 0);
  Conn *c = sqlite3_user_data(ctx);
  char err[HS_ERR];
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  if (c->looking) {
    sqlite3_result_error(ctx, "embed(): " HS_LOOKING "; call it after", -1);
    return;
  }
  c->looking = 1;
  const Model *model = conn_model(db, c, err);
  c->looking = 0;
  if (!model && c->stopped) {
    c->stopped = 0;
    sqlite3_result_error_code(ctx, SQLITE_INTERRUPT); /* as below */
    return;
  }
  if (!model) {
    sqlite3_result_error(ctx, err, -1);
    return;
  }
  int dims = hs_model_dims(model->model);
  int bytes = dims * (int)sizeof(float);
  if (kept && kept->role == role) {
    sqlite3_result_blob(ctx, kept->v, bytes, SQLITE_TRANSIENT);
    return;
  }
  const char *text = (const char *)sqlite3_value_text(argv[0]);
  int len = sqlite3_value_bytes(argv[0]);
  Kept *out = sqlite3_malloc((int)sizeof(Kept) + bytes);
  if (!out || (!text && len > 0)) {
    sqlite3_free(out);
    sqlite3_result_error_nomem(ctx);
    return;
  }
  out->role = role;
  int (*stop)(void *) = sqlite3_libversion_number() >= 3041000 ? stop_if_interrupted : 0;
  if (model->unread && copy_words(model, text ? text : "", len, role, err)) {
    sqlite3_free(out);
    sqlite3_result_error(ctx, err, -1);
    return;
  }
  int rc = hs_model_embed(model->model, text ? text : "", len, role, out->v, stop, db);
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
  sqlite3_result_blob(ctx, out->v, bytes, SQLITE_TRANSIENT);
  sqlite3_set_auxdata(ctx, 0, out, sqlite3_free); /* frees it at once where it cannot keep it */
}

/* hybridsql_model(source): Requirement 13's first choice. */
static void model_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  Conn *c = sqlite3_user_data(ctx);
  char err[HS_ERR], where[HS_PATH + 128];
  const Model *model = 0;
  if (c->looking) {
    sqlite3_result_error(ctx, "hybridsql_model(): " HS_LOOKING "; call it before or after", -1);
    return;
  }
  switch (sqlite3_value_type(argv[0])) {
    case SQLITE_NULL: return;
    case SQLITE_TEXT: {
      const char *path = (const char *)sqlite3_value_text(argv[0]);
      if (!path) {
        sqlite3_result_error_nomem(ctx);
        return;
      }
      if (names_a_model(path)) {
        snprintf(where, sizeof where, "the model %s", path);
        model = model_named(path, where, err);
      } else {
        snprintf(where, sizeof where, "the model file %s", path);
        model = model_from_file(path, where, err);
      }
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
  memset(c, 0, sizeof *c);
  c->refs = 2;
  /* Not INNOCUOUS: it reads files the environment names.  hybridsql_model() reads any file it
  ** is given, so a schema (a view, a trigger) may not call it: DIRECTONLY. */
  int rc = sqlite3_create_function_v2(db, "embed", 1, SQLITE_UTF8, c, embed_func, 0, 0,
                                      conn_release);
  if (rc != SQLITE_OK) {
    sqlite3_free(c); /* the destructor dropped embed()'s reference; this is the other */
    return rc;
  }
  c->refs++; /* embed(text, role), the same function with a reference of its own */
  rc = sqlite3_create_function_v2(db, "embed", 2, SQLITE_UTF8, c, embed_func, 0, 0, conn_release);
  if (rc != SQLITE_OK) {
    conn_release(c); /* hybridsql_model()'s reference: embed()'s goes with the connection */
    return rc;
  }
  return sqlite3_create_function_v2(db, "hybridsql_model", 1, SQLITE_UTF8 | SQLITE_DIRECTONLY, c,
                                    model_func, 0, 0, conn_release);
}
