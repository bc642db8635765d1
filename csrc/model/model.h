/*
** The embedding model's engine (csrc/model/model.c): all-MiniLM-L6-v2 with int8 weights, read
** from one model file that the caller has read into memory of its own.  It knows nothing of
** SQLite nor of files: the SQL function embed() (csrc/model/embedsql.c) finds the file, reads it
** once per process (hs_model_header first, so that a file's size is checked before a byte more
** is read) and calls these.
**
** The contract between model.c and its callers; both sides are written against it.
*/
#ifndef HYBRIDSQL_MODEL_H
#define HYBRIDSQL_MODEL_H
#include <stddef.h>
#include <stdint.h>

#include "common.h" /* HS_EXPORT: the library exports these (hybridsql.h) */

typedef struct HsModel HsModel;

/* What hs_model_embed returns. */
#define HS_MODEL_OK 0
#define HS_MODEL_STOPPED 1 /* stop() said so between two windows; out is untouched */
#define HS_MODEL_NOMEM 2

#define HS_MODEL_HEADER 128                   /* a model file's header: its first bytes */
#define HS_MODEL_MOST ((uint64_t)1024 << 20) /* the most bytes a model file may have */

/* Checks a model file's header against the file's size before the rest is read: head holds its
** first min(size, HS_MODEL_HEADER) bytes and size is the whole file's.  0 when the magic, the
** format version and the size the header gives (which must be size, and at most HS_MODEL_MOST)
** agree; else 1 with the line that hs_model_open would write for the whole file in err. */
HS_EXPORT int hs_model_header(const void *head, uint64_t size, char *err, size_t errcap);

/* Reads a model file's n bytes at data (not copied: they must outlive the model, and must not
** change while it lives; aligned to 8 bytes, as malloc gives them, else refused).  Checks the
** header (hs_model_header), the checksum, every shape and offset against n, and the model id
** (UTF-8, NUL-terminated within its 40 bytes); on any failure returns NULL and writes one line
** for the user into err (errcap bytes), which names what is wrong and what to do. */
HS_EXPORT HsModel *hs_model_open(const void *data, size_t n, char *err, size_t errcap);
HS_EXPORT void hs_model_free(HsModel *m);
HS_EXPORT const char *hs_model_id(const HsModel *m); /* UTF-8, e.g. "all-MiniLM-L6-v2-int8" */
HS_EXPORT int hs_model_dims(const HsModel *m);           /* 384 */

/* The vector of a UTF-8 text (len bytes, not NUL-terminated) into out[dims]: tokenized, read in
** windows of 256 tokens ([CLS] and [SEP] included), at most 8, mean-pooled over all their tokens,
** L2-normalised; the zero vector for a text the model cannot read (as LocalProvider).  stop, when
** not NULL, is asked between windows; a non-zero answer stops with HS_MODEL_STOPPED.  One model
** may be used by many threads at once (it keeps no state between calls). */
HS_EXPORT int hs_model_embed(const HsModel *m, const char *text, int64_t len, float *out,
                             int (*stop)(void *), void *arg);

/* For the tests (Python, through hybridsql.h): the path of the matmul (avx512, avx2+fma, neon or
** generic), and the vector of word-piece ids as hs_model_embed makes it from a text's (-1 when
** an id is not in the vocabulary). */
HS_EXPORT const char *hs_model_simd(void);
HS_EXPORT int hs_model_embed_ids(const HsModel *m, const int32_t *ids, int64_t n, float *out);

#endif
