/*
** The embedding model's engine (csrc/model/load.c opens a model file, csrc/model/model.c runs
** it): any BERT-family encoder that a model file describes (hybridsql/embedding/model_file.py's
** docstring is the format), read from the bytes the caller has read into memory of its own.  It
** knows nothing of SQLite nor of files: the SQL function embed() (csrc/model/embedsql.c) finds
** the file, reads it once per process (hs_model_header first, so that a file's size is checked
** before a byte more is read) and calls these.
**
** The contract between the engine and its callers; both sides are written against it.
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

/* A text is embedded as a query or as a document: the model's prefix for that role (e5's
** "query: " and "passage: ") is put before it. */
#define HS_MODEL_QUERY 0
#define HS_MODEL_DOCUMENT 1

/* Checks a model file's header against the file's size before the rest is read: head holds its
** first min(size, HS_MODEL_HEADER) bytes and size is the whole file's.  0 when the magic, the
** format version (1 or 2) and the size the header gives (which must be size, and at most
** HS_MODEL_MOST) agree; else 1 with the line that hs_model_open would write for the whole file
** in err. */
HS_EXPORT int hs_model_header(const void *head, uint64_t size, char *err, size_t errcap);

/* Reads a model file's n bytes at data (not copied: they must outlive the model, and must not
** change while it lives; aligned to 8 bytes, as malloc gives them, else refused).  Checks the
** header (hs_model_header), the checksums, every number, shape and offset against n, the
** tokenizer's section and the model id (UTF-8, NUL-terminated within its field); on any failure
** returns NULL and writes one line for the user into err (errcap bytes), which names what is
** wrong and what to do.  Format 1 files (all-MiniLM-L6-v2 as hybridsql wrote it before format
** 2) are read as the model they are. */
HS_EXPORT HsModel *hs_model_open(const void *data, size_t n, char *err, size_t errcap);
HS_EXPORT void hs_model_free(HsModel *m);

/* A format-2 file's word table (54 of multilingual-e5-small's 73 MB) may be put in memory after
** the rest, a block of HS_WORD_BLOCK rows at a time as the texts embedded need them, so that a
** new process's first query copies only what it uses (embedsql.c).  hs_model_words_at: where
** the word table starts, from the file's first HS_MODEL_HEADER bytes and size checked by
** hs_model_header (a format 1 file, whose one checksum covers every byte, gives its size: it is
** read whole).  hs_model_open_head: hs_model_open of data whose bytes before there are read and
** the rest not yet (data still has room for all n).  The caller checks every block of the file
** (hs_model_word_block: its place; hs_model_word_block_ok: whether bytes are it, else 0 with the
** line hs_model_open would have written); before a text is embedded, it reads each block of the
** rows its ids need (hs_model_tokens, [CLS] and [SEP]: hs_model_special) into data at its place
** and checks it again.  The engine reads whatever bytes are there: a row not read is the
** caller's mistake, not damage it can see. */
#define HS_WORD_BLOCK 64
uint64_t hs_model_words_at(const void *head, uint64_t size);
HsModel *hs_model_open_head(const void *data, size_t n, char *err, size_t errcap);
int64_t hs_model_word_blocks(const HsModel *m); /* 0 for format 1 */
void hs_model_word_block(const HsModel *m, int64_t b, uint64_t *at, uint64_t *bytes);
int hs_model_word_block_ok(const HsModel *m, int64_t b, const void *bytes, char *err,
                           size_t errcap);
int32_t hs_model_special(const HsModel *m, int which); /* 0: [CLS], 1: [SEP] */
HS_EXPORT const char *hs_model_id(const HsModel *m); /* UTF-8, e.g. "all-MiniLM-L6-v2-int8" */
HS_EXPORT int hs_model_dims(const HsModel *m);           /* 384 */
HS_EXPORT int hs_model_window(const HsModel *m); /* tokens a window, its two specials included */

/* The vector of a UTF-8 text (len bytes, not NUL-terminated) as a query or a document (role;
** any other value reads as a query) into out[dims]: the role's prefix and the text tokenized as
** one, read in windows of the model's window ([CLS] and [SEP] included), at most 8, pooled over
** their tokens as the model says, L2-normalised where it says so; the zero vector for a text
** the model cannot read (under its readable share).  stop, when not NULL, is asked between
** windows; a non-zero answer stops with HS_MODEL_STOPPED.  One model may be used by many
** threads at once (it keeps no state between calls). */
HS_EXPORT int hs_model_embed(const HsModel *m, const char *text, int64_t len, int role,
                             float *out, int (*stop)(void *), void *arg);

/* The ids the model reads of a text in its role (the prefix's among them; no [CLS]/[SEP]), for
** `most` windows, at most cap: their count; -1 for another role or on no memory. */
HS_EXPORT int64_t hs_model_tokens(const HsModel *m, const char *text, int64_t len, int role,
                                  int most, int32_t *ids, int64_t cap);

/* For the tests (Python, through hybridsql.h): the path of the matmul (avx512, avx2+fma, neon or
** generic), and the vector of ids as hs_model_embed makes it from a text's (-1 when an id is
** not a row of the word table). */
HS_EXPORT const char *hs_model_simd(void);
HS_EXPORT int hs_model_embed_ids(const HsModel *m, const int32_t *ids, int64_t n, float *out);

#endif
