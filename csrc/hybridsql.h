/*
** The kernels of hybridsql.c that Python calls through cffi in ABI mode (hybridsql/_native.py
** opens the loadable library itself). They know nothing of SQLite. The library exports these
** and sqlite3_hybridsql_init, nothing else. _native.py's cdef repeats these declarations;
** tests/test_extension.py checks that the two agree.
*/
#ifndef HYBRIDSQL_H
#define HYBRIDSQL_H
#include <stdint.h>

/* What the library exports; every build hides the rest (-fvisibility=hidden). */
#if defined(_WIN32)
#define HS_EXPORT __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define HS_EXPORT __attribute__((visibility("default")))
#else
#define HS_EXPORT
#endif

HS_EXPORT const char *hs_simd_path(void);
HS_EXPORT int64_t hs_first_nonfinite(const float *v, int64_t d);
HS_EXPORT double hs_cosine(const float *a, const float *b, int64_t d);

/* The tokenizer of csrc/tokenizer.h (its contract), exported for the tests. */
HS_EXPORT struct HsVocab *hs_vocab_new(const char *blob, int64_t len, int32_t n);
HS_EXPORT void hs_vocab_free(struct HsVocab *v);
HS_EXPORT int32_t hs_vocab_id(const struct HsVocab *v, const char *piece);
HS_EXPORT int64_t hs_tokenize(const struct HsVocab *v, const char *text, int64_t len, int most,
                              int32_t *ids, int64_t cap);
HS_EXPORT double hs_readable_share(const struct HsVocab *v, const int32_t *ids, int64_t n);

#endif
