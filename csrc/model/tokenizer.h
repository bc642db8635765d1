/*
** The embedding model's tokenizer (csrc/model/tokenizer.c): BERT's WordPiece exactly as
** hybridsql/data/tokenizer.json (the tokenizers library that LocalProvider runs) reads a text:
** BertNormalizer (control characters dropped, white space made spaces, CJK ideographs split,
** NFD with the nonspacing marks dropped, lower case), BertPreTokenizer (split at white space and
** around punctuation), WordPiece (longest match first, "##" pieces inside a word, [UNK] for a
** word of over 100 characters or one the pieces cannot spell), and the added tokens [PAD] [UNK]
** [CLS] [SEP] [MASK] matched in the raw text first.  It knows nothing of SQLite or of the model.
**
** The contract between tokenizer.c and its callers (csrc/model/model.c, and Python's tests
** through csrc/hybridsql.h); both sides are written against it.
*/
#ifndef HYBRIDSQL_TOKENIZER_H
#define HYBRIDSQL_TOKENIZER_H
#include <stdint.h>

#include "common.h" /* HS_EXPORT: the library exports these, for the tests */

typedef struct HsVocab HsVocab;

/* The vocabulary: n pieces in id order, each NUL-terminated, packed one after another in
** blob (len bytes), as the model file stores it.  NULL on bad input or no memory. */
HS_EXPORT HsVocab *hs_vocab_new(const char *blob, int64_t len, int32_t n);
HS_EXPORT void hs_vocab_free(HsVocab *v);
/* -1 if absent: [CLS] [SEP] [UNK] [PAD] */
HS_EXPORT int32_t hs_vocab_id(const HsVocab *v, const char *piece);

/* The word-piece ids of a UTF-8 text (len bytes; invalid bytes as the tokenizers library
** reads Python's str of them, see the tests), no [CLS]/[SEP], exactly as tokenizer.json's
** BertNormalizer + BertPreTokenizer + WordPiece; read no more of the text than LocalProvider
** reads for `most` windows (hybridsql/windows.py encode_windows: at most _PREFIX_CHARS
** characters a window, cut as _cut cuts), and stop once cap ids are written.  Returns the
** number written; -1 on no memory. */
HS_EXPORT int64_t hs_tokenize(const HsVocab *v, const char *text, int64_t len, int most,
                              int32_t *ids, int64_t cap);

/* windows.py's readable_share over these ids. */
HS_EXPORT double hs_readable_share(const HsVocab *v, const int32_t *ids, int64_t n);

#endif
