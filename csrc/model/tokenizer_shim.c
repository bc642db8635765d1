/*
** TEMPORARY: see tokenizer_shim.h.  WordPiece sections of tokenizer-api.md §2 only.
*/
#include "tokenizer_shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct HsTokenizer {
  HsVocab *vocab;
  int32_t size;
};

HsTokenizer *hs_tokenizer_open(int kind, const void *section, int64_t len, char *err,
                               size_t errcap) {
  const uint8_t *p = section;
  uint32_t head[4];
  if (kind != HS_TOKENIZER_WORDPIECE) {
    snprintf(err, errcap, "its tokenizer is of kind %d, which this build does not read", kind);
    return NULL;
  }
  if (len < 16) {
    snprintf(err, errcap, "its WordPiece section is shorter than its header");
    return NULL;
  }
  memcpy(head, p, sizeof head);
  if (head[0] != 1 || head[1] != 15 || head[3] != (uint64_t)len - 16 || head[2] == 0 ||
      head[2] > 1000000) {
    snprintf(err, errcap, "its WordPiece section's header is not one this build reads");
    return NULL;
  }
  HsTokenizer *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, errcap, "no memory");
    return NULL;
  }
  t->size = (int32_t)head[2];
  t->vocab = hs_vocab_new((const char *)p + 16, len - 16, t->size);
  if (!t->vocab) {
    snprintf(err, errcap, "its vocabulary is not %u pieces with [UNK]", head[2]);
    free(t);
    return NULL;
  }
  return t;
}

void hs_tokenizer_free(HsTokenizer *t) {
  if (!t) return;
  hs_vocab_free(t->vocab);
  free(t);
}

int32_t hs_tokenizer_special(const HsTokenizer *t, int which) {
  static const char *const names[] = {"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"};
  return which >= 0 && which < 5 ? hs_vocab_id(t->vocab, names[which]) : -1;
}

int32_t hs_tokenizer_size(const HsTokenizer *t) { return t->size; }

int64_t hs_tokenizer_ids(const HsTokenizer *t, const char *prefix, int64_t plen, const char *text,
                         int64_t len, int per, int most, int32_t *ids, int64_t cap) {
  /* hs_tokenize reads windows of 254 pieces: as many of them as per * most pieces need. */
  int windows = (int)(((int64_t)per * most + 253) / 254);
  if (cap > (int64_t)per * most) cap = (int64_t)per * most;
  if (plen == 0) return hs_tokenize(t->vocab, text, len, windows, ids, cap);
  char *joined = malloc((size_t)(plen + len) + 1);
  if (!joined) return -1;
  memcpy(joined, prefix, (size_t)plen);
  if (len) memcpy(joined + plen, text, (size_t)len);
  int64_t n = hs_tokenize(t->vocab, joined, plen + len, windows, ids, cap);
  free(joined);
  return n;
}

double hs_tokenizer_readable(const HsTokenizer *t, const int32_t *ids, int64_t n) {
  return hs_readable_share(t->vocab, ids, n);
}
