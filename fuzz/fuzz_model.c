/*
** A libFuzzer harness for the model loader (hs_model_open of csrc/model/load.c, the contract
** in csrc/model/model.h) and the two ways SQL reaches it (csrc/model/embedsql.c): a model file's
** bytes as a BLOB, hybridsql_model(blob), and as a file, hybridsql_model('path'), which reads it.
** When the loader accepts the bytes, one embed() of a short text runs on them, so that a file
** wrongly accepted (an offset, a size, a vocabulary that does not hold) is read through.
**
** The input:
**   byte 0      control: bit 0 set, the header's checksum (bytes 32-39) is computed again and
**               written in, as model_file.py's seal() does: over the whole file in format 1,
**               over the bytes before the word table in format 2 (its offset at byte 40).  A
**               mutation almost never keeps the checksum right, so without this the loader
**               would refuse nearly every input at the checksum and the checks behind it
**               (numbers, sections, matrix types, the tokenizer's section, special ids) would
**               never be reached; with it on half the inputs, they are, and the checksum's own
**               check is fuzzed on the other half (and the word table's block checksums on
**               every input that changes the table).
**               bit 1 set, the bytes are also given at an address that is not a multiple of 8.
**   the rest    the model file (fuzz/corpus/model/tiny-*, written by fuzz/model_seed.py: format
**               2 with int8 weights, and with Q4_0 weights, prefixes, CLS pooling and no token
**               types; and one of format 1; 32 dims and 75 pieces, 15 to 21 KB)
**
** Beyond "no crash" (ASan and UBSan abort on any memory error or undefined behaviour):
** accepted or refused, never both: a refusal is one line (no newline), also when cut short by a
** small buffer, and misaligned bytes are refused; hs_model_header, given the first 128 bytes
** alone (in a buffer of their own, so that ASan sees a read past them), refuses exactly where
** hs_model_open refuses the header, with its line, and accepts every model it accepts; an id is
** UTF-8; an accepted model has the header's dims and id (at their places in its format's
** header), embeds a text as a query and as a document, the empty text and a text of two
** windows, and a vector of finite values is no longer than 1 where the model normalises;
** hybridsql_model() accepts the BLOB and the file exactly when hs_model_open does, its refusal
** is hs_model_open's line after "hybridsql_model(): the model BLOB: " (or "... the model file
** PATH: "), and embed(text) and embed(text, 'document') of an accepted model give the bytes
** hs_model_embed gives for each role.
**
** Only the first IN_SQL inputs the loader accepts go through SQL (every input it refuses
** does): a model SQL accepts stays in the process (Requirement 14 of embedsql.c: never freed,
** shared by every connection), so that every accepted input would grow the process without
** end.  Only the first LONG embed the text of two windows: a full window's attention, every
** comparison traced for coverage, costs about 0.3 s, where the rest of an input costs 1 ms.
**
** Build and run: see fuzz/README.md.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "sqlite3.h"

int sqlite3_hybridsql_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

#define IN_SQL 64
#define LONG 8
/* Special tokens, marks, CJK: the tokenizer's paths over the model's (perhaps mutated) pieces */
#define TEXT "how do I roll back a deploy freeze? [MASK] [PAD]x caf\xc3\xa9 \xe9\x83\xa8 ##s"
#define LONG_PIECES 300 /* a text of 300 one-letter words: two windows, the first full */
#define ERR 1024 /* embedsql.c's HS_PATH: the loader's line fits it */

static sqlite3 *db;
static sqlite3_stmt *choose; /* select hybridsql_model(?1) */
static sqlite3_stmt *run;    /* select embed(?1, ?2) */
static char folder[64];       /* where the files go */
static unsigned accepted, files;

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_model: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

/* The run's folder, empty by then (each input's file is removed after it), removed at exit. */
static void remove_folder(void) { rmdir(folder); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *tmp = getenv("TMPDIR");
  snprintf(folder, sizeof folder, "%.40s/fuzz_model.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(folder)) fail("cannot make a folder", folder);
  atexit(remove_folder); /* libFuzzer ends by exit(): the folder goes with the run */
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) fail("open", sqlite3_errmsg(db));
  if (sqlite3_hybridsql_init(db, 0, 0) != SQLITE_OK) fail("init", sqlite3_errmsg(db));
  if (sqlite3_prepare_v2(db, "select hybridsql_model(?1)", -1, &choose, 0) != SQLITE_OK ||
      sqlite3_prepare_v2(db, "select embed(?1, ?2)", -1, &run, 0) != SQLITE_OK)
    fail("prepare", sqlite3_errmsg(db));
  return 0;
}

/* model_file.py's seal(): the header's checksum (the 8-byte words w[i] * (2i + 1) summed
** modulo 2^64, w[4] as 0, the last word zero-padded) computed again over what it covers. */
static void seal(uint8_t *p, size_t n) {
  uint64_t sum = 0, w, end = n;
  if (n < 48) return;
  if (p[16] == 2) {
    memcpy(&end, p + 40, 8);
    if (end > n) end = n;
  }
  memset(p + 32, 0, 8);
  for (size_t i = 0; 8 * i < end; i++) {
    w = 0;
    memcpy(&w, p + 8 * i, end - 8 * i < 8 ? end - 8 * i : 8);
    sum += w * (2 * (uint64_t)i + 1);
  }
  memcpy(p + 32, &sum, 8);
}

/* Whether s is UTF-8 (strict: no overlong form, surrogate, or code point past U+10FFFF), by
** the standard's table rather than the loader's code. */
static int utf8(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned char c = *p;
    int len = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
    unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned char hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (!len) return 0;
    if (len > 1 && (p[1] < lo || p[1] > hi)) return 0;
    for (int k = 2; k < len; k++)
      if ((p[k] & 0xC0) != 0x80) return 0;
    p += len;
  }
  return 1;
}

/* A refusal's line: not empty, one line, NUL-terminated within cap. */
static void check_line(const char *err, size_t cap) {
  if (!memchr(err, 0, cap)) fail("a refusal overran its buffer", NULL);
  if (cap > 1 && !err[0]) fail("a refusal with no line", NULL);
  if (strchr(err, '\n')) fail("a refusal of two lines", err);
}

/* The model's vector of TEXT as a query into out (dims floats), checked; as a document into
** out + dims; the empty text too, and where asked, a text of two windows. */
static void embed_checked(const HsModel *m, float *out, int normalised, int two_windows) {
  int dims = hs_model_dims(m);
  for (int role = HS_MODEL_QUERY; role <= HS_MODEL_DOCUMENT; role++) {
    float *v = out + role * dims;
    if (hs_model_embed(m, TEXT, (int64_t)strlen(TEXT), role, v, NULL, NULL) != HS_MODEL_OK)
      fail("an accepted model does not embed", NULL);
    double norm = 0;
    int finite = 1;
    for (int i = 0; i < dims; i++) {
      finite &= isfinite(v[i]);
      norm += (double)v[i] * v[i];
    }
    /* 1, or less where the mean is so small that the normalisation's floor (1e-12) divides */
    if (normalised && finite && sqrt(norm) > 1 + 1e-3) fail("a vector longer than 1", NULL);
  }
  float *other = malloc(sizeof(float) * (size_t)dims);
  char long_text[2 * LONG_PIECES];
  if (!other) fail("no memory", NULL);
  if (hs_model_embed(m, "", 0, HS_MODEL_DOCUMENT, other, NULL, NULL) != HS_MODEL_OK)
    fail("an accepted model does not embed the empty text", NULL);
  for (int i = 0; i < LONG_PIECES; i++) {
    long_text[2 * i] = (char)('a' + i % 26);
    long_text[2 * i + 1] = ' ';
  }
  if (two_windows &&
      hs_model_embed(m, long_text, sizeof long_text, HS_MODEL_QUERY, other, NULL, NULL) != HS_MODEL_OK)
    fail("an accepted model does not embed a text of two windows", NULL);
  free(other);
}

/* hybridsql_model(value) on the connection: NULL when accepted, else its error (copied). */
static const char *choose_model(sqlite3_stmt *st, char *err) {
  int rc = sqlite3_step(st);
  const char *answer = 0;
  if (rc == SQLITE_ROW) {
    if (sqlite3_column_type(st, 0) != SQLITE_TEXT) fail("hybridsql_model() gave no id", NULL);
  } else {
    snprintf(err, ERR + 256, "%s", sqlite3_errmsg(db));
    answer = err;
  }
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return answer;
}

/* embed(TEXT, role) on the connection, for each role: the bytes hs_model_embed gave (vectors,
** dims floats a role). */
static void embed_in_sql(const float *vectors, int dims) {
  static const char *const roles[2] = {"query", "document"};
  for (int role = 0; role < 2; role++) {
    sqlite3_bind_text(run, 1, TEXT, -1, SQLITE_STATIC);
    sqlite3_bind_text(run, 2, roles[role], -1, SQLITE_STATIC);
    if (sqlite3_step(run) != SQLITE_ROW) fail("embed() refused an accepted model", sqlite3_errmsg(db));
    if (sqlite3_column_bytes(run, 0) != dims * 4 ||
        memcmp(sqlite3_column_blob(run, 0), vectors + role * dims, (size_t)dims * 4) != 0)
      fail("embed() in SQL differs from hs_model_embed", roles[role]);
    sqlite3_reset(run);
  }
}

/* The SQL ways in: the bytes as a BLOB, then as a file; each must answer as hs_model_open did
** (accepted, or its line err after the way's prefix). */
static void through_sql(const uint8_t *p, size_t n, const char *err, const float *vector,
                        int dims) {
  char got[ERR + 256], want[ERR + 256], path[128];
  sqlite3_bind_blob(choose, 1, n ? (const void *)p : "", (int)n, SQLITE_STATIC);
  const char *refused = choose_model(choose, got);
  if (!vector == !refused) fail("hybridsql_model(blob) and hs_model_open disagree", refused);
  if (refused) {
    snprintf(want, sizeof want, "hybridsql_model(): the model BLOB: %s", err);
    if (strcmp(refused, want) != 0) fail("hybridsql_model(blob) said", refused);
  } else {
    embed_in_sql(vector, dims);
  }
  /* A file's model is kept by its path: an accepted file gets a name of its own. */
  snprintf(path, sizeof path, "%s/%u.hsmodel", folder, vector ? ++files : 0);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) fail("cannot write", path);
  sqlite3_bind_text(choose, 1, path, -1, SQLITE_TRANSIENT);
  refused = choose_model(choose, got);
  if (n == 0) {
    snprintf(want, sizeof want, "hybridsql_model(): the model file %s is empty", path);
    if (!refused || strncmp(refused, want, strlen(want)) != 0)
      fail("hybridsql_model(path) of an empty file said", refused);
  } else {
    if (!vector == !refused) fail("hybridsql_model(path) and hs_model_open disagree", refused);
    if (refused) {
      snprintf(want, sizeof want, "hybridsql_model(): the model file %s: %s", path, err);
      if (strcmp(refused, want) != 0) fail("hybridsql_model(path) said", refused);
    } else {
      embed_in_sql(vector, dims);
    }
  }
  unlink(path); /* an accepted one stays in memory, read */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t control = size ? data[0] : 0;
  size_t n = size ? size - 1 : 0;
  uint8_t *p = malloc(n + 8); /* malloc's alignment, as embedsql.c's copy of a BLOB */
  char err[ERR], small[16];
  if (!p) fail("no memory", NULL);
  if (n) memcpy(p, data + 1, n);
  if (control & 1) seal(p, n);

  HsModel *m = hs_model_open(p, n, err, sizeof err);
  if (m && err[0]) fail("accepted with an error line", err);
  if (!m) check_line(err, sizeof err);
  uint8_t *head = malloc(n < HS_MODEL_HEADER ? n + 1 : HS_MODEL_HEADER);
  char head_err[ERR];
  if (!head) fail("no memory", NULL);
  if (n) memcpy(head, p, n < HS_MODEL_HEADER ? n : HS_MODEL_HEADER);
  if (hs_model_header(head, n, head_err, sizeof head_err)) {
    check_line(head_err, sizeof head_err);
    if (m || strcmp(head_err, err) != 0) fail("hs_model_header and hs_model_open disagree", head_err);
  }
  free(head);
  HsModel *again = hs_model_open(p, n, small, sizeof small);
  if (!again != !m) fail("a smaller error buffer changed the answer", NULL);
  if (!again) check_line(small, sizeof small);
  hs_model_free(again);
  again = hs_model_open(p, n, NULL, 0);
  if (!again != !m) fail("no error buffer changed the answer", NULL);
  hs_model_free(again);
  if (control & 2) {
    uint8_t *odd = malloc(n + 4);
    char odd_err[ERR];
    if (!odd) fail("no memory", NULL);
    if (n) memcpy(odd + 4, p, n);
    if (hs_model_open(odd + 4, n, odd_err, sizeof odd_err)) fail("misaligned bytes accepted", NULL);
    check_line(odd_err, sizeof odd_err);
    free(odd);
  }

  float *vector = NULL;
  int dims = 0;
  if (m) {
    /* the header's dims and id, at format 1's places or format 2's */
    int v2 = p[16] == 2;
    uint32_t header_dims, normalised = 1;
    memcpy(&header_dims, p + (v2 ? 196 : 80), 4);
    if (v2) memcpy(&normalised, p + 240, 4);
    dims = hs_model_dims(m);
    if ((uint32_t)dims != header_dims) fail("dims not the header's", NULL);
    if (strncmp(hs_model_id(m), (const char *)p + (v2 ? 128 : 40), v2 ? 64 : 40) != 0)
      fail("id not the header's", NULL);
    if (!utf8(hs_model_id(m))) fail("an id that is not UTF-8", NULL);
    vector = malloc(2 * sizeof(float) * (size_t)dims);
    if (!vector) fail("no memory", NULL);
    embed_checked(m, vector, normalised == 1, accepted < LONG);
  }
  if (!m || accepted < IN_SQL) through_sql(p, n, err, vector, dims);
  accepted += m != NULL;
  free(vector);
  hs_model_free(m);
  free(p);
  return 0;
}
