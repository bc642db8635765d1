/*
** What the library exports besides SQLite's entry point (hybridsql.c): the kernels Python calls
** through cffi in ABI mode (hybridsql/_native.py opens the loadable library itself).  They know
** nothing of SQLite.  The library exports these and sqlite3_hybridsql_init, nothing else.
** Each is declared, with HS_EXPORT, in the header of the file that defines it (kernels/simd.h,
** model/tokenizer.h, model/model.h); these are copies for the library's users, which the
** compiler checks against those in hybridsql.c, where both are seen.  _native.py's cdef repeats
** them; tests/test_extension.py checks that the two agree.
*/
#ifndef HYBRIDSQL_H
#define HYBRIDSQL_H
#include <stddef.h>
#include <stdint.h>

#include "common.h" /* HS_EXPORT */

HS_EXPORT const char *hs_simd_path(void);
HS_EXPORT int64_t hs_first_nonfinite(const float *v, int64_t d);
HS_EXPORT double hs_cosine(const float *a, const float *b, int64_t d);

/* The tokenizers of model/tokenizer.h (its contract): WordPiece's own entry points, and the
** interface of every kind; exported for the tests and Python. */
HS_EXPORT struct HsVocab *hs_vocab_new(const char *blob, int64_t len, int32_t n);
HS_EXPORT void hs_vocab_free(struct HsVocab *v);
HS_EXPORT int32_t hs_vocab_id(const struct HsVocab *v, const char *piece);
HS_EXPORT int64_t hs_tokenize(const struct HsVocab *v, const char *text, int64_t len, int most,
                              int32_t *ids, int64_t cap);
HS_EXPORT double hs_readable_share(const struct HsVocab *v, const int32_t *ids, int64_t n);
HS_EXPORT struct HsTokenizer *hs_tokenizer_open(int kind, const void *section, int64_t len,
                                                char *err, size_t errcap);
HS_EXPORT void hs_tokenizer_free(struct HsTokenizer *t);
HS_EXPORT int32_t hs_tokenizer_special(const struct HsTokenizer *t, int which);
HS_EXPORT int32_t hs_tokenizer_size(const struct HsTokenizer *t);
HS_EXPORT int32_t hs_tokenizer_id(const struct HsTokenizer *t, const char *piece, int64_t len);
HS_EXPORT int64_t hs_tokenizer_ids(const struct HsTokenizer *t, const char *prefix, int64_t plen,
                                   const char *text, int64_t len, int per, int most,
                                   int32_t *ids, int64_t cap);
HS_EXPORT double hs_tokenizer_readable(const struct HsTokenizer *t, const int32_t *ids,
                                       int64_t n);

/* The embedding model's engine (model/model.h is its contract; struct HsModel is its HsModel),
** the SIMD path of its matmul, the ids it reads of a text, and one function for the tests: the
** vector of ids, as hs_model_embed makes it from a text's (-1 when an id is not in the word
** table).  role: 0 a query, 1 a document. */
HS_EXPORT int hs_model_header(const void *head, uint64_t size, char *err, size_t errcap);
HS_EXPORT struct HsModel *hs_model_open(const void *data, size_t n, char *err, size_t errcap);
HS_EXPORT void hs_model_free(struct HsModel *m);
HS_EXPORT const char *hs_model_simd(void);
HS_EXPORT const char *hs_model_id(const struct HsModel *m);
HS_EXPORT int hs_model_dims(const struct HsModel *m);
HS_EXPORT int hs_model_window(const struct HsModel *m);
HS_EXPORT int hs_model_embed(const struct HsModel *m, const char *text, int64_t len, int role,
                             float *out, int (*stop)(void *), void *arg);
HS_EXPORT int64_t hs_model_tokens(const struct HsModel *m, const char *text, int64_t len, int role,
                                  int most, int32_t *ids, int64_t cap);
HS_EXPORT int hs_model_embed_ids(const struct HsModel *m, const int32_t *ids, int64_t n,
                                 float *out);

#endif
