/*
** The operating system's files, as the model's lookup reads them (embedsql.c, Requirements 13
** and 14): a file opened only once it is known to be a regular file (a FIFO or a device would
** block or act), its identity (device, inode, size, times, header), read at an offset, and the
** private memory a model file's copy is read into.  Windows and POSIX each have their half.
*/
#ifndef HYBRIDSQL_MODEL_FILES_H
#define HYBRIDSQL_MODEL_FILES_H
#include <stddef.h>
#include <stdint.h>

#include "model.h"

#if defined(_WIN32)
#include <windows.h>
typedef HANDLE HsFile;
#else
typedef int HsFile;
#endif

/* A model file's identity when it was read: a new lookup by path reads the file again unless it
** is still this one (Requirement 14).  The header holds the checksum, so that a file rewritten
** with another model in place is told apart even where its times did not move. */
typedef struct {
  uint64_t device, inode, size;
  int64_t modified, changed; /* nanoseconds (Windows: 100 ns) since an epoch */
  unsigned char header[HS_MODEL_HEADER];
} HsFileId;

/* Whether two identities are the same file with the same bytes, as far as they tell. */
int hs_same_file(const HsFileId *a, const HsFileId *b);
/* a + b in memory from malloc; NULL when there is none. */
char *hs_joined(const char *a, const char *b);
/* Opens path if it is a regular file, its identity (header aside) into id; 1 with why set to a
** few words ("does not exist", "is not a file (a FIFO)") when it cannot. */
int hs_file_open(const char *path, HsFile *out, HsFileId *id, const char **why);
/* The open file's identity now, header aside; 1 on failure. */
int hs_file_identity(HsFile f, HsFileId *id);
/* 0 when n bytes were read at offset at; 1 when the file ended first; -1 on an error. */
int hs_file_read(HsFile f, void *buf, size_t n, uint64_t at);
void hs_file_close(HsFile f);
/* n bytes of memory of the process's own for a file's copy, the first `now` of them to be copied
** at once and the rest later a little at a time (NULL when there is none), and their release. */
void *hs_private_bytes(size_t n, size_t now);
void hs_private_free(void *p, size_t n);
/* Whether something is at path (a file that cannot be looked at counts as there). */
int hs_exists(const char *path);

#endif
