/*
** The embedding model's tokenizers, behind one interface (csrc/model/tokenizer.c): a model file's
** tokenizer section of a kind (HS_TOKENIZER_*) opened, and a text read into ids in the windows
** the engine reads, whatever the kind.  Two kinds:
**
** - WordPiece (tokenizer.c): BERT's, exactly as the tokenizers library reads a tokenizer.json of
**   BertNormalizer (control characters dropped, white space made spaces, CJK ideographs split,
**   NFD with the nonspacing marks dropped, lower case), BertPreTokenizer (split at white space
**   and around punctuation), WordPiece (longest match first, "##" pieces inside a word, [UNK]
**   for a word of over 100 characters or one the pieces cannot spell), and the added tokens
**   [PAD] [UNK] [CLS] [SEP] [MASK] matched in the raw text first.
** - SentencePiece Unigram (unigram.c, whose header comment says how): XLM-R's, as the tokenizers
**   library reads its tokenizer.json.
**
** It knows nothing of SQLite or of the model.  The contract between tokenizer.c and its callers
** (csrc/model/model.c, and Python's tests through csrc/hybridsql.h); both sides are written
** against it.
*/
#ifndef HYBRIDSQL_TOKENIZER_H
#define HYBRIDSQL_TOKENIZER_H
#include <stddef.h>
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

/* ---- Every kind ---- */

#define HS_TOKENIZER_WORDPIECE 1
#define HS_TOKENIZER_UNIGRAM 2
#define HS_TOKENIZER_PER 65536 /* per: the ids a window holds, at most */
#define HS_TOKENIZER_MOST 65536 /* most: windows, at most */

typedef struct HsTokenizer HsTokenizer;

/* The tokenizer of `kind` from its section: len bytes, read in place (they must outlive it; any
** alignment).  A WordPiece section, little-endian: u32 version (1), u32 flags (15: lower case,
** accents stripped, CJK split, text cleaned: the only normalizer read), u32 pieces, u32 the
** bytes that follow: the pieces in id order, each NUL-terminated.  A Unigram section: unigram.c's
** header comment.  NULL with one line in err (errcap bytes) when the section is not one of that
** kind, or on no memory. */
HS_EXPORT HsTokenizer *hs_tokenizer_open(int kind, const void *section, int64_t len, char *err,
                                         size_t errcap);
HS_EXPORT void hs_tokenizer_free(HsTokenizer *t);

/* The special ids: a window is CLS, its ids, SEP; -1 where the tokenizer has none. */
#define HS_TOKEN_CLS 0  /* [CLS] or <s> */
#define HS_TOKEN_SEP 1  /* [SEP] or </s> */
#define HS_TOKEN_PAD 2  /* [PAD] or <pad> */
#define HS_TOKEN_UNK 3  /* [UNK] or <unk> */
#define HS_TOKEN_MASK 4 /* [MASK] or <mask> */
HS_EXPORT int32_t hs_tokenizer_special(const HsTokenizer *t, int which);
/* Ids are 0 to size - 1. */
HS_EXPORT int32_t hs_tokenizer_size(const HsTokenizer *t);
/* The id of the piece of len bytes, -1 if absent. */
HS_EXPORT int32_t hs_tokenizer_id(const HsTokenizer *t, const char *piece, int64_t len);

/* The ids of prefix + text, read as one text (plen and len bytes; either may be empty; invalid
** UTF-8 read as Python's bytes.decode("utf-8", "replace") reads it), without the windows' CLS
** and SEP, as hs_tokenize reads a text: `per` ids a window (1 to HS_TOKENIZER_PER), the first
** `most` windows (1 to HS_TOKENIZER_MOST), no more of the text than encode_windows reads for them,
** at most cap ids written.  Returns the number written; -1 on no memory. */
HS_EXPORT int64_t hs_tokenizer_ids(const HsTokenizer *t, const char *prefix, int64_t plen,
                                   const char *text, int64_t len, int per, int most,
                                   int32_t *ids, int64_t cap);

/* The share of ids the model can read: CLS, SEP and PAD not counted; WordPiece as
** hs_readable_share; Unigram: all but <unk> (and ids out of range). */
HS_EXPORT double hs_tokenizer_readable(const HsTokenizer *t, const int32_t *ids, int64_t n);

#endif
