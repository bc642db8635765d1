/*
** A libFuzzer harness for the tokenizers' one interface (csrc/model/tokenizer.h) and the
** SentencePiece Unigram tokenizer behind it (csrc/model/unigram.c): any bytes as a text, read
** with XLM-R's tokenizer in shape (fuzz/build/unigram.bin, which fuzz/build.sh writes with
** fuzz/unigram_seed.py: XLM-R's charsmap, 3,000 pieces, the added tokens), or any bytes as a
** section of either kind (the section's reader: offsets, counts, the charsmap's double array and
** replacements, the pieces' trie, scores, added tokens), then a text with it.
**
** The input:
**   byte 0        bit 0: a section follows (else the built-in one); bit 1: the section is read
**                 at an odd address; bit 2: it is a WordPiece section (kind 1), not Unigram
**   byte 1        most: byte % 10 windows (0 to 9)
**   byte 2        cap: 0 (none), 1, 255, per * most, or byte * 9
**   byte 3        per: 1, 2, 7, 30, 254 or 510 ids a window (byte % 6)
**   byte 4        the prefix's length, byte % 17
**   bytes 5-8     (bit 0) the section's length L, little-endian, at most what is left; L bytes
**   the prefix, then the rest: the text
**
** Beyond "no crash" (ASan and UBSan abort on any memory error or undefined behaviour): a refused
** section has one line naming the tokenizer's section; an opened one has its specials and every
** id within its size; the count is at most the cap and per ids a window; the same input gives
** the same ids twice; a smaller cap gives the first ids of a larger one; prefix + text gives
** the ids of the two bytes side by side as one text; the readable share is in [0, 1];
** hs_tokenizer_id of any string is -1 or an id.
**
** Build and run: see fuzz/README.md.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer.h"

#define SECTION_FILE "fuzz/build/unigram.bin"

static HsTokenizer *builtin;
static uint8_t *builtin_bytes;

static void fail(const char *what) {
  fprintf(stderr, "fuzz_unigram: %s\n", what);
  abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  FILE *f = fopen(SECTION_FILE, "rb");
  char err[256];
  long len;
  (void)argc;
  (void)argv;
  if (!f) fail("no " SECTION_FILE ": run fuzz/build.sh from the repository root");
  fseek(f, 0, SEEK_END);
  len = ftell(f);
  fseek(f, 0, SEEK_SET);
  builtin_bytes = malloc((size_t)len);
  if (!builtin_bytes || fread(builtin_bytes, 1, (size_t)len, f) != (size_t)len)
    fail("cannot read " SECTION_FILE);
  fclose(f);
  builtin = hs_tokenizer_open(HS_TOKENIZER_UNIGRAM, builtin_bytes, len, err, sizeof err);
  if (!builtin) fail(err);
  return 0; /* the section stays: the tokenizer reads it in place */
}

static int64_t ids_of(const HsTokenizer *t, const uint8_t *prefix, size_t plen,
                      const uint8_t *text, size_t len, int per, int most, int32_t *ids,
                      int64_t cap) {
  return hs_tokenizer_ids(t, (const char *)prefix, (int64_t)plen, (const char *)text,
                          (int64_t)len, per, most, ids, cap);
}

static void check(const HsTokenizer *t, const uint8_t *prefix, size_t plen, const uint8_t *text,
                  size_t len, int per, int most, int64_t cap) {
  int32_t size = hs_tokenizer_size(t);
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(cap + 1));
  int32_t *again = malloc(sizeof(int32_t) * (size_t)(cap + 1));
  uint8_t *both = malloc(plen + len + 1);
  int64_t n, m, i, half;
  double share;
  int k;
  if (!ids || !again || !both) fail("no memory");
  for (k = 0; k < 5; k++)
    if (hs_tokenizer_special(t, k) < -1 || hs_tokenizer_special(t, k) >= size)
      fail("a special id out of the tokenizer");
  n = ids_of(t, prefix, plen, text, len, per, most, ids, cap);
  if (n < 0) fail("no memory");
  if (n > cap || n > (int64_t)per * (most > 0 ? most : 0)) fail("too many ids");
  for (i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= size) fail("an id out of the tokenizer");
  m = ids_of(t, prefix, plen, text, len, per, most, again, cap);
  if (m != n || memcmp(ids, again, sizeof(int32_t) * (size_t)n)) fail("not the same twice");
  half = n / 2;
  m = ids_of(t, prefix, plen, text, len, per, most, again, half);
  if (m != half || memcmp(ids, again, sizeof(int32_t) * (size_t)half))
    fail("a smaller cap is not the first ids");
  memcpy(both, prefix, plen);
  memcpy(both + plen, text, len);
  m = ids_of(t, NULL, 0, both, plen + len, per, most, again, cap);
  if (m != n || memcmp(ids, again, sizeof(int32_t) * (size_t)n))
    fail("the prefix is not read as the start of the text");
  share = hs_tokenizer_readable(t, ids, n);
  if (!(share >= 0.0 && share <= 1.0)) fail("readable share out of [0, 1]");
  m = hs_tokenizer_id(t, (const char *)text, (int64_t)(len < 24 ? len : 24));
  if (m < -1 || m >= size) fail("hs_tokenizer_id out of the tokenizer");
  free(ids);
  free(again);
  free(both);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const int PER[6] = {1, 2, 7, 30, 254, 510};
  uint8_t head[5] = {0};
  HsTokenizer *own = NULL;
  uint8_t *copy = NULL;
  int most, per;
  int64_t cap;
  size_t take = size < 5 ? size : 5, plen;
  memcpy(head, data, take);
  data += take;
  size -= take;
  most = head[1] % 10;
  per = PER[head[3] % 6];
  cap = head[2] == 0 ? 0
        : head[2] == 1 ? 1
        : head[2] == 2 ? 255
        : head[2] == 3 ? (int64_t)per * most
                       : (int64_t)head[2] * 9;
  if (head[0] & 1) {
    uint32_t len = 0;
    char err[96];
    int odd = (head[0] & 2) != 0;
    memcpy(&len, data, size < 4 ? size : 4);
    take = size < 4 ? size : 4;
    data += take;
    size -= take;
    if (len > size) len = (uint32_t)size;
    /* A buffer of exactly the section's bytes, so that ASan sees any read past them. */
    copy = malloc((size_t)len + (size_t)odd + 1);
    if (!copy) fail("no memory");
    memcpy(copy + odd, data, len);
    err[0] = 1;
    own = hs_tokenizer_open(head[0] & 4 ? HS_TOKENIZER_WORDPIECE : HS_TOKENIZER_UNIGRAM,
                            copy + odd, len, err, sizeof err);
    if (!own && (!memchr(err, 0, sizeof err) || strstr(err, "tokenizer") == NULL))
      fail("a refused section without its line");
    data += len;
    size -= len;
  }
  plen = head[4] % 17;
  if (plen > size) plen = size;
  check(own ? own : builtin, data, plen, data + plen, size - plen, per, most, cap);
  hs_tokenizer_free(own);
  free(copy);
  return 0;
}
