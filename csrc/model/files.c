/*
** The operating system's files for the model's lookup: files.h says what each function does.
** A file is opened, checked to be a regular file before a byte of it is read, read from an
** offset, and closed; a model file's copy lives in memory of the process's own.
*/
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* MADV_HUGEPAGE, as embedsql.c had it */
#endif
#include "files.h"

#include <stdlib.h>
#include <string.h>

#if !defined(_WIN32)
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

int hs_same_file(const HsFileId *a, const HsFileId *b) {
  return a->device == b->device && a->inode == b->inode && a->size == b->size &&
         a->modified == b->modified && a->changed == b->changed &&
         memcmp(a->header, b->header, sizeof a->header) == 0;
}

/* a + b in memory from malloc; NULL when there is none. */
char *hs_joined(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  char *out = malloc(na + nb + 1);
  if (out) {
    memcpy(out, a, na);
    memcpy(out + na, b, nb + 1);
  }
  return out;
}

/* A file is opened, checked to be a regular file before a byte of it is read, read from an
** offset, and closed.  hs_file_open writes its identity, header aside, into id; on failure it says
** why in a few words ("does not exist", "is not a file (a FIFO)"). */
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

int hs_file_identity(HsFile f, HsFileId *id) {
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

int hs_file_open(const char *path, HsFile *out, HsFileId *id, const char **why) {
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
  if (hs_file_identity(f, id)) {
    CloseHandle(f);
    *why = "cannot be read";
    return 1;
  }
  *out = f;
  return 0;
}

/* 0 when n bytes were read at offset at; 1 when the file ended first; -1 on an error. */
int hs_file_read(HsFile f, void *buf, size_t n, uint64_t at) {
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

void hs_file_close(HsFile f) { CloseHandle(f); }

void *hs_private_bytes(size_t n, size_t now) {
  (void)now;
  return malloc(n);
}
void hs_private_free(void *p, size_t n) {
  (void)n;
  free(p);
}

int hs_exists(const char *path) {
  wchar_t *w = wide(path);
  DWORD a = w ? GetFileAttributesW(w) : INVALID_FILE_ATTRIBUTES;
  DWORD e = GetLastError();
  free(w);
  return a != INVALID_FILE_ATTRIBUTES || (e != ERROR_FILE_NOT_FOUND && e != ERROR_PATH_NOT_FOUND);
}
#else

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

int hs_file_identity(HsFile f, HsFileId *id) {
  struct stat st;
  if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) return 1;
  id->device = (uint64_t)st.st_dev;
  id->inode = (uint64_t)st.st_ino;
  id->size = (uint64_t)st.st_size;
  id->modified = HS_MTIME(st);
  id->changed = HS_CTIME(st);
  return 0;
}

int hs_file_open(const char *path, HsFile *out, HsFileId *id, const char **why) {
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
  if (!S_ISREG(st.st_mode) || hs_file_identity(fd, id) != 0) {
    close(fd);
    *why = not_a_file(st.st_mode);
    return 1;
  }
  *out = fd;
  return 0;
}

/* 0 when n bytes were read at offset at; 1 when the file ended first; -1 on an error. */
int hs_file_read(HsFile f, void *buf, size_t n, uint64_t at) {
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

void hs_file_close(HsFile f) { close(f); }

/* Memory for a file's copy, in pages of its own.  Its first `now` bytes, copied at once: on Linux
** in huge pages where the system allows them (madvise), as the copy's first touch of some 5,600
** pages of 4 KB took longer than the copy itself (docs/benchmarks.md).  The rest, copied a block
** at a time as texts need it (a word table): in small pages, so that a block of 14 KB costs its
** own pages, not 2 MB.  NULL when there is none. */
void *hs_private_bytes(size_t n, size_t now) {
  void *p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
  size_t page = (size_t)sysconf(_SC_PAGESIZE), split = (now + page - 1) / page * page;
  if (split > n) split = n;
  if (split) madvise(p, split, MADV_HUGEPAGE);
  if (split < n) madvise((char *)p + split, n - split, MADV_NOHUGEPAGE);
#else
  (void)now;
#endif
  return p;
}

void hs_private_free(void *p, size_t n) {
  if (p) munmap(p, n);
}

int hs_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 || (errno != ENOENT && errno != ENOTDIR);
}
#endif
