/*
** TEMPORARY (branch i41-engine, until i41-tokenizer's csrc/model/tokenizer.h lands): the
** tokenizer interface of /work/notes/tokenizer-api.md, WordPiece only, over tokenizer.c's
** hs_vocab_* and hs_tokenize.  At the merge this file and tokenizer_shim.c go, and the engine
** includes tokenizer.h instead.
*/
#ifndef HYBRIDSQL_TOKENIZER_SHIM_H
#define HYBRIDSQL_TOKENIZER_SHIM_H
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

#define HS_TOKENIZER_WORDPIECE 1
#define HS_TOKENIZER_UNIGRAM 2
typedef struct HsTokenizer HsTokenizer;

#define HS_TOKEN_CLS 0
#define HS_TOKEN_SEP 1
#define HS_TOKEN_PAD 2
#define HS_TOKEN_UNK 3
#define HS_TOKEN_MASK 4

HsTokenizer *hs_tokenizer_open(int kind, const void *section, int64_t len, char *err,
                               size_t errcap);
void hs_tokenizer_free(HsTokenizer *t);
int32_t hs_tokenizer_special(const HsTokenizer *t, int which);
int32_t hs_tokenizer_size(const HsTokenizer *t);
int64_t hs_tokenizer_ids(const HsTokenizer *t, const char *prefix, int64_t plen, const char *text,
                         int64_t len, int per, int most, int32_t *ids, int64_t cap);
double hs_tokenizer_readable(const HsTokenizer *t, const int32_t *ids, int64_t n);

#endif
