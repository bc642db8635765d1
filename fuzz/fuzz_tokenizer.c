/*
** A libFuzzer harness for the tokenizer (csrc/model/tokenizer.c, the contract in
** csrc/model/tokenizer.h): any bytes as the text, read with the model's vocabulary
** (fuzz/build/vocab.bin, which fuzz/build.sh writes from hybridsql/data/tokenizer.json) or with a
** vocabulary taken from the input itself, any number of windows and any cap.
**
** The input:
**   byte 0        most: byte % 10 windows (0 to 9)
**   byte 1        cap: 0 (none), 1, 255, 254 * most, or byte * 9
**   byte 2        odd: a vocabulary from the input follows
**     bytes 3-4   its length L (little-endian, at most what is left)
**     byte 5      its number of pieces
**     L bytes     the blob (pieces each NUL-terminated, as the model file stores them)
**   the rest      the text
**
** Beyond "no crash" (ASan and UBSan abort on any memory error or undefined behaviour): the
** count is at most the cap and 254 ids a window, every id is one of the vocabulary's, a smaller
** cap gives the first ids of a larger one, the same input gives the same ids twice, the
** readable share is in [0, 1], and hs_vocab_id of any string is -1 or an id.
**
** Build and run: see fuzz/README.md.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer.h"

#define VOCAB_FILE "fuzz/build/vocab.bin"

static HsVocab *model_vocab;
static int32_t model_pieces;

static void fail(const char *what) {
  fprintf(stderr, "fuzz_tokenizer: %s\n", what);
  abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  FILE *f = fopen(VOCAB_FILE, "rb");
  char *blob;
  long len;
  (void)argc;
  (void)argv;
  if (!f) fail("no " VOCAB_FILE ": run fuzz/build.sh from the repository root");
  fseek(f, 0, SEEK_END);
  len = ftell(f);
  fseek(f, 0, SEEK_SET);
  blob = malloc((size_t)len);
  if (!blob || fread(blob, 1, (size_t)len, f) != (size_t)len) fail("cannot read " VOCAB_FILE);
  fclose(f);
  for (long i = 0; i < len; i++) model_pieces += blob[i] == 0;
  model_vocab = hs_vocab_new(blob, len, model_pieces);
  if (!model_vocab) fail(VOCAB_FILE " is not a vocabulary");
  free(blob); /* the vocabulary keeps no pointer into it */
  return 0;
}

static void check(const HsVocab *v, int32_t pieces, const uint8_t *text, size_t len, int most,
                  int64_t cap) {
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(cap + 1));
  int32_t *again = malloc(sizeof(int32_t) * (size_t)(cap + 1));
  int64_t n, m, i, half;
  double share;
  if (!ids || !again) fail("no memory");
  n = hs_tokenize(v, (const char *)text, (int64_t)len, most, ids, cap);
  if (n < 0 || n > cap || n > (int64_t)254 * (most > 0 ? most : 0)) fail("too many ids");
  for (i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= pieces) fail("an id out of the vocabulary");
  m = hs_tokenize(v, (const char *)text, (int64_t)len, most, again, cap);
  if (m != n || memcmp(ids, again, sizeof(int32_t) * (size_t)n)) fail("not the same twice");
  half = n / 2;
  m = hs_tokenize(v, (const char *)text, (int64_t)len, most, again, half);
  if (m != half || memcmp(ids, again, sizeof(int32_t) * (size_t)half))
    fail("a smaller cap is not the first ids");
  share = hs_readable_share(v, ids, n);
  if (!(share >= 0.0 && share <= 1.0)) fail("readable share out of [0, 1]");
  free(ids);
  free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t head[6] = {0};
  HsVocab *own = NULL;
  int32_t own_pieces = 0;
  int most;
  int64_t cap;
  char piece[33];
  size_t take;
  memcpy(head, data, size < 6 ? size : 6);
  most = head[0] % 10;
  cap = head[1] == 0 ? 0
        : head[1] == 1 ? 1
        : head[1] == 2 ? 255
        : head[1] == 3 ? (int64_t)254 * most
                       : (int64_t)head[1] * 9;
  if (head[2] & 1) {
    size_t len = (size_t)(head[3] | head[4] << 8);
    size_t at = size < 6 ? size : 6;
    if (len > size - at) len = size - at;
    own_pieces = head[5];
    own = hs_vocab_new((const char *)data + at, (int64_t)len, own_pieces);
    data += at + len;
    size -= at + len;
  } else {
    take = size < 3 ? size : 3;
    data += take;
    size -= take;
  }
  check(model_vocab, model_pieces, data, size, most, cap);
  if (own) check(own, own_pieces, data, size, most, cap);
  take = size < 32 ? size : 32;
  memcpy(piece, data, take);
  piece[take] = 0;
  if (hs_vocab_id(model_vocab, piece) < -1 || hs_vocab_id(model_vocab, piece) >= model_pieces)
    fail("hs_vocab_id out of the vocabulary");
  hs_vocab_free(own);
  return 0;
}
