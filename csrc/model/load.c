/*
** Opening a model file (csrc/model/model.h is the contract; hybridsql/embedding/model_file.py's
** docstring is the format): its header, checksums, numbers, sections and tokenizer, each
** checked against the bytes before one of them is used, into struct HsModel (model/weights.h),
** whose pointers point into the caller's bytes.  Any failure is one line for the user that says
** what is wrong and what to do.
**
** Two formats: 2, which describes its model, and 1, which hybridsql wrote for all-MiniLM-L6-v2
** before format 2 (users' caches and databases' hybridsql_model tables hold it): read as that
** model, so that nothing has to be written again.
*/
#include "model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "weights.h"

#define HS_REMAKE "make it again with `hybridsql model --out FILE`"
#define HS_ALIGN 64       /* every section starts at a multiple of it */
#define HS_V1_HEADER 128  /* format 1's header bytes */
#define HS_V1_ID 40       /* format 1's id field */
#define HS_V2_HEADER 320  /* format 2's header bytes */
#define HS_V2_ID 64       /* format 2's id field */
#define HS_MINILM_WINDOW 256 /* format 1's model: all-MiniLM-L6-v2 reads 256 tokens a window */

static const char MAGIC[16] = "hybridsql model";

static uint32_t u32_at(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static uint64_t u64_at(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static float f32_at(const uint8_t *p) {
  float v;
  memcpy(&v, p, sizeof(v));
  return v;
}

/* The sum of the n bytes' 8-byte words w[i] * (2i + 1) modulo 2^64, the last word zero-padded
** and word `skip` (the checksum's own place in a header) read as zero. */
static uint64_t checksum(const uint8_t *data, size_t n, size_t skip) {
  uint64_t sum = 0;
  size_t i = 0;
  for (; i < n / 8; i++) {
    uint64_t w = i == skip ? 0 : u64_at(data + 8 * i);
    sum += w * (2 * (uint64_t)i + 1);
  }
  if (n % 8) {
    uint8_t last[8] = {0};
    memcpy(last, data + 8 * i, n % 8);
    sum += u64_at(last) * (2 * (uint64_t)i + 1);
  }
  return sum;
}

/* Hands out the sections in the file's order, each at a multiple of HS_ALIGN. */
typedef struct {
  const uint8_t *base;
  uint64_t at, n; /* the next section's offset; the end of what may be handed out */
  int ok;
} Sections;

static const void *take(Sections *f, uint64_t bytes) {
  if (!f->ok || f->at > f->n || bytes > f->n - f->at) {
    f->ok = 0;
    return NULL;
  }
  const void *p = f->base + f->at;
  f->at = (f->at + bytes + HS_ALIGN - 1) / HS_ALIGN * HS_ALIGN;
  return p;
}

/* The bytes of a table of rows by its type, and of a matrix [in][out] by its type. */
static uint64_t table_bytes(int type, uint64_t rows, uint64_t dims) {
  return type == HS_F32 ? rows * dims * 4 : type == HS_INT8 ? rows * dims
                                                            : rows * (dims / HS_BLOCK) * HS_Q4_BLOCK;
}

static uint64_t matrix_bytes(int type, uint64_t in, uint64_t out) {
  return type == HS_INT8 ? in * out : (out / HS_BLOCK) * (in / HS_BLOCK) * HS_Q4_TILE;
}

static void take_table(Sections *f, Table *t, int type, uint64_t rows, uint64_t dims) {
  t->type = type;
  t->rows = take(f, table_bytes(type, rows, dims));
  t->scale = type == HS_INT8 ? take(f, rows * 4) : NULL;
}

static void take_linear(Sections *f, Linear *l, int type, uint64_t in, uint64_t out) {
  l->type = type;
  l->w = take(f, matrix_bytes(type, in, out));
  l->scale = type == HS_INT8 ? take(f, out * 4) : NULL;
  l->bias = take(f, out * 4);
}

/* Writes a refusal's line into err (when there is one): 1, a header's answer. */
static int say(char *err, size_t errcap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int say(char *err, size_t errcap, const char *fmt, ...) {
  if (err && errcap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errcap, fmt, ap);
    va_end(ap);
  }
  return 1;
}

static HsModel *refuse(HsModel *m, char *err, size_t errcap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static HsModel *refuse(HsModel *m, char *err, size_t errcap, const char *fmt, ...) {
  if (err && errcap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errcap, fmt, ap);
    va_end(ap);
  }
  hs_model_free(m);
  return NULL;
}

int hs_model_header(const void *head, uint64_t size, char *err, size_t errcap) {
  const uint8_t *p = head;
  if (err && errcap) err[0] = 0;
  if (!head || size < HS_MODEL_HEADER)
    return say(err, errcap, "the model file is truncated (%llu bytes, not even a header): " HS_REMAKE,
               (unsigned long long)size);
  if (memcmp(p, MAGIC, sizeof(MAGIC)) != 0)
    return say(err, errcap,
               "not a hybridsql model file (it does not start with \"hybridsql model\"): name the file "
               "that `hybridsql model` writes");
  uint32_t version = u32_at(p + 16);
  if (version != 1 && version != 2)
    return say(err, errcap,
               "the model file has format version %u, this hybridsql reads versions 1 and 2: " HS_REMAKE,
               version);
  uint64_t declared = u64_at(p + 24), word_at = u64_at(p + 40);
  int damaged = version == 1 ? u32_at(p + 20) != HS_V1_HEADER || declared % 8 != 0
                             : u32_at(p + 20) != HS_V2_HEADER || word_at % HS_ALIGN != 0 ||
                                   word_at < HS_V2_HEADER || word_at > declared;
  for (int i = 48; version == 2 && i < HS_MODEL_HEADER; i++) damaged |= p[i] != 0;
  if (damaged) return say(err, errcap, "the model file's header is damaged: " HS_REMAKE);
  /* Before the sizes are compared: a caller allocates what the header gives once they agree. */
  if (declared > HS_MODEL_MOST)
    return say(err, errcap,
               "the model file's header gives it %llu bytes, over the %llu MiB a model file may "
               "have: " HS_REMAKE,
               (unsigned long long)declared, (unsigned long long)(HS_MODEL_MOST >> 20));
  if (size < declared)
    return say(err, errcap, "the model file is truncated (%llu of %llu bytes): " HS_REMAKE,
               (unsigned long long)size, (unsigned long long)declared);
  if (size > declared)
    return say(err, errcap, "the model file has %llu bytes after its end (%llu bytes): " HS_REMAKE,
               (unsigned long long)(size - declared), (unsigned long long)declared);
  return 0;
}

/* Whether the n bytes at s are UTF-8 as Python's strict decoder takes it: no overlong form, no
** surrogate, nothing past U+10FFFF. */
static int is_utf8(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                                                      : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || len > n - i) return 0;
    for (size_t k = 1; k < len; k++)
      if ((s[i + k] & 0xC0) != 0x80) return 0;
    if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) ||
        (c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F))
      return 0;
    i += len;
  }
  return 1;
}

/* The model id of a field of `field` bytes: UTF-8 of 1 to field - 1 bytes ending in NUL. */
static int read_id(HsModel *m, const uint8_t *id, size_t field) {
  const uint8_t *end = memchr(id, 0, field);
  if (!end || end == id || !is_utf8(id, (size_t)(end - id))) return 0;
  memcpy(m->id, id, (size_t)(end - id));
  return 1;
}

/* The shapes both formats give (dims, layers, heads, ffn, vocab, positions, token types):
** sizes this engine can run, the epsilon a LayerNorm's. */
static int shapes_fit(const HsModel *m, int types_least) {
  return m->dims >= HS_BLOCK && m->dims <= 4096 && m->dims % HS_BLOCK == 0 && m->layers >= 1 &&
         m->layers <= 64 && m->heads >= 1 && m->dims % m->heads == 0 &&
         m->dims / m->heads <= HS_HEAD && m->ffn >= HS_BLOCK && m->ffn <= 16384 &&
         m->ffn % HS_BLOCK == 0 && m->vocab >= 4 && m->vocab <= 1000000 && m->positions >= 1 &&
         m->positions <= 65536 && m->types >= types_least && m->types <= 16 && m->eps > 0 &&
         m->eps < 1;
}

/* Reads the 7 uint32 shapes at p into m, each clipped to what an int holds (shapes_fit() bounds). */
static void read_shapes(HsModel *m, const uint8_t *p, uint32_t *raw) {
  int *to[7] = {&m->dims, &m->layers, &m->heads, &m->ffn, &m->vocab, &m->positions, &m->types};
  for (int i = 0; i < 7; i++) {
    raw[i] = u32_at(p + 4 * i);
    *to[i] = raw[i] > 1000000000u ? 1000000000 : (int)raw[i];
  }
}

static HsModel *refuse_shapes(HsModel *m, const uint32_t *raw, char *err, size_t errcap) {
  return refuse(m, err, errcap,
                "the model file's shapes are not a model this engine runs (%u dims, %u layers, "
                "%u heads, %u ffn, %u pieces): " HS_REMAKE,
                raw[0], raw[1], raw[2], raw[3], raw[4]);
}

/* Opens the tokenizer of `kind` on its section and takes cls and sep from it where the file
** gives none (format 1); NULL with err written on failure. */
static HsModel *open_tokenizer(HsModel *m, int kind, const void *section, int64_t bytes,
                               char *err, size_t errcap) {
  char why[256] = "";
  m->tokenizer = hs_tokenizer_open(kind, section, bytes, why, sizeof why);
  if (!m->tokenizer) return refuse(m, err, errcap, "the model file's tokenizer: %s: " HS_REMAKE, why);
  if (hs_tokenizer_size(m->tokenizer) > m->vocab)
    return refuse(m, err, errcap,
                  "the model file's tokenizer has %d pieces, its word table %d rows: " HS_REMAKE,
                  hs_tokenizer_size(m->tokenizer), m->vocab);
  return m;
}

/* A checksum that does not match: format 1's over the whole file, format 2's over its head or a
** block of its word table. */
static const char DAMAGED[] =
    "the model file is damaged (its checksum does not match its bytes): " HS_REMAKE;

/* Format 1: all-MiniLM-L6-v2 as hybridsql wrote it before format 2 (model_file.py's docstring
** ends with its layout). */
static HsModel *open_v1(const uint8_t *p, size_t n, char *err, size_t errcap) {
  if (checksum(p, n, 4) != u64_at(p + 32))
    return refuse(NULL, err, errcap, "%s", DAMAGED);
  HsModel *m = calloc(1, sizeof(*m));
  if (!m) return refuse(NULL, err, errcap, "out of memory opening the model");
  if (!read_id(m, p + 40, HS_V1_ID))
    return refuse(m, err, errcap,
                  "the model file's id is not UTF-8 text of 1 to %d bytes ending in NUL: " HS_REMAKE,
                  HS_V1_ID - 1);
  uint32_t raw[7];
  read_shapes(m, p + 80, raw);
  m->eps = f32_at(p + 108);
  uint32_t vocab_bytes = u32_at(p + 112);
  if (!shapes_fit(m, 1) || m->positions < HS_MINILM_WINDOW) return refuse_shapes(m, raw, err, errcap);
  m->pooling = HS_POOL_MEAN;
  m->normalise = 1;
  m->window = HS_MINILM_WINDOW;
  m->readable = 0.5f;
  m->prefix[0] = m->prefix[1] = "";
  uint64_t D = (uint64_t)m->dims, F = (uint64_t)m->ffn;

  Sections f = {p, HS_V1_HEADER, n, 1};
  const char *vocab = take(&f, vocab_bytes);
  m->word.type = HS_INT8;
  m->word.rows = take(&f, (uint64_t)m->vocab * D);
  m->word.scale = take(&f, (uint64_t)m->vocab * 4);
  take_table(&f, &m->position, HS_INT8, (uint64_t)m->positions, D);
  take_table(&f, &m->token_type, HS_F32, (uint64_t)m->types, D);
  m->norm_weight = take(&f, D * 4);
  m->norm_bias = take(&f, D * 4);
  m->layer = calloc((size_t)m->layers, sizeof(Layer));
  if (!m->layer) return refuse(m, err, errcap, "out of memory opening the model");
  for (int l = 0; l < m->layers; l++) {
    Layer *w = &m->layer[l];
    take_linear(&f, &w->query, HS_INT8, D, D);
    take_linear(&f, &w->key, HS_INT8, D, D);
    take_linear(&f, &w->value, HS_INT8, D, D);
    take_linear(&f, &w->output, HS_INT8, D, D);
    w->norm1_weight = take(&f, D * 4);
    w->norm1_bias = take(&f, D * 4);
    take_linear(&f, &w->up, HS_INT8, D, F);
    take_linear(&f, &w->down, HS_INT8, F, D);
    w->norm2_weight = take(&f, D * 4);
    w->norm2_bias = take(&f, D * 4);
  }
  if (!f.ok || f.at != n)
    return refuse(m, err, errcap,
                  "the model file's sections do not fill its %llu bytes as its shapes say: " HS_REMAKE,
                  (unsigned long long)n);
  /* The vocabulary as a WordPiece section of the tokenizer's (its 16-byte header, then the
  ** pieces), in memory of the model's own. */
  uint8_t *section = malloc(16 + (size_t)vocab_bytes);
  if (!section) return refuse(m, err, errcap, "out of memory opening the model");
  uint32_t head[4] = {1, 15, (uint32_t)m->vocab, vocab_bytes};
  memcpy(section, head, sizeof head);
  memcpy(section + 16, vocab, vocab_bytes);
  m->owned = section;
  if (!open_tokenizer(m, HS_TOKENIZER_WORDPIECE, section, 16 + (int64_t)vocab_bytes, err, errcap))
    return NULL;
  m->cls = hs_tokenizer_special(m->tokenizer, HS_TOKEN_CLS);
  m->sep = hs_tokenizer_special(m->tokenizer, HS_TOKEN_SEP);
  if (m->cls < 0 || m->sep < 0)
    return refuse(m, err, errcap, "the model file's vocabulary has no [CLS] or [SEP]: " HS_REMAKE);
  return m;
}

/* A setting of format 2's that this engine does not run: its name and value. */
static HsModel *refuse_setting(HsModel *m, const char *name, long long value, char *err,
                               size_t errcap) {
  return refuse(m, err, errcap,
                "the model file's %s is %lld, which this engine does not run: " HS_REMAKE, name,
                value);
}

/* Format 2 (model_file.py's docstring). */
/* Whether bytes, block b of a format-2 model's word table, match its checksum. */
static int word_block_ok(const HsModel *m, int64_t b, const uint8_t *bytes) {
  uint64_t at, n;
  hs_model_word_block(m, b, &at, &n);
  return checksum(bytes, (size_t)n, SIZE_MAX) == u64_at(m->words.sums + 8 * b);
}

/* Format 2 (model_file.py's docstring); its word table read and checked later, a block at a time,
** when words_later is set (hs_model_open_head). */
static HsModel *open_v2(const uint8_t *p, size_t n, int words_later, char *err, size_t errcap) {
  uint64_t word_at = u64_at(p + 40); /* hs_model_header: a multiple of 64, in the file */
  if (checksum(p, (size_t)word_at, 4) != u64_at(p + 32)) return refuse(NULL, err, errcap, "%s", DAMAGED);
  HsModel *m = calloc(1, sizeof(*m));
  if (!m) return refuse(NULL, err, errcap, "out of memory opening the model");
  if (!read_id(m, p + 128, HS_V2_ID))
    return refuse(m, err, errcap,
                  "the model file's id is not UTF-8 text of 1 to %d bytes ending in NUL: " HS_REMAKE,
                  HS_V2_ID - 1);
  uint32_t raw[7], v[25];
  for (int i = 0; i < 25; i++) v[i] = u32_at(p + 192 + 4 * i);
  for (int i = 292; i < HS_V2_HEADER; i++)
    if (p[i]) return refuse(m, err, errcap, "the model file's header is damaged: " HS_REMAKE);
  /* architecture, then dims, layers, heads, ffn, vocab, positions (1 to 6), the position offset
  ** (7), the token types (8) */
  uint32_t shapes[7] = {v[1], v[2], v[3], v[4], v[5], v[6], v[8]};
  read_shapes(m, (const uint8_t *)shapes, raw);
  m->eps = f32_at(p + 228);
  if (!shapes_fit(m, 0)) return refuse_shapes(m, raw, err, errcap);
  uint32_t architecture = v[0], offset = v[7], activation = v[10], kind = v[19];
  uint32_t token_bytes = v[20], prefix_bytes[2] = {v[21], v[22]}, word_type = v[23], position_type = v[24];
  int32_t special[4];
  memcpy(special, p + 252, sizeof special);
  m->pooling = (int)v[11];
  m->normalise = (int)v[12];
  m->readable = f32_at(p + 248);
  if (architecture < 1 || architecture > 2) return refuse_setting(m, "architecture", architecture, err, errcap);
  if (activation != 1) return refuse_setting(m, "activation", activation, err, errcap);
  if (v[11] < 1 || v[11] > 2) return refuse_setting(m, "pooling", v[11], err, errcap);
  if (v[12] > 1) return refuse_setting(m, "normalise", v[12], err, errcap);
  if (v[13] < 3 || v[13] > 65536 || (uint64_t)offset + v[13] > (uint64_t)m->positions)
    return refuse(m, err, errcap,
                  "the model file's window (%u tokens from position %u) does not fit its %d "
                  "positions: " HS_REMAKE,
                  v[13], offset, m->positions);
  m->window = (int)v[13];
  m->position_offset = (int)offset;
  if (!(m->readable >= 0 && m->readable <= 1))
    return refuse(m, err, errcap, "the model file's readable share is not 0 to 1: " HS_REMAKE);
  for (int i = 0; i < 4; i++)
    if (special[i] < 0 || special[i] >= m->vocab)
      return refuse_setting(m, "special id", special[i], err, errcap);
  m->cls = special[0];
  m->sep = special[1];
  if (kind < 1 || kind > 2) return refuse_setting(m, "tokenizer kind", kind, err, errcap);
  if (word_type < 1 || word_type > 3) return refuse_setting(m, "word table type", word_type, err, errcap);
  if (position_type < 1 || position_type > 3)
    return refuse_setting(m, "position table type", position_type, err, errcap);

  uint64_t D = (uint64_t)m->dims, F = (uint64_t)m->ffn, V = (uint64_t)m->vocab;
  uint64_t blocks = (V + HS_WORD_BLOCK - 1) / HS_WORD_BLOCK;
  Sections f = {p, HS_V2_HEADER, word_at, 1};
  for (int r = 0; r < 2; r++) {
    m->prefix[r] = take(&f, prefix_bytes[r]);
    m->prefix_bytes[r] = prefix_bytes[r];
  }
  const void *tokenizer = take(&f, token_bytes);
  const uint8_t *types = take(&f, (uint64_t)m->layers * 6);
  m->word.type = (int)word_type;
  m->word.scale = word_type == HS_INT8 ? take(&f, V * 4) : NULL;
  const uint8_t *sums = take(&f, blocks * 8);
  take_table(&f, &m->position, (int)position_type, (uint64_t)m->positions, D);
  take_table(&f, &m->token_type, HS_F32, (uint64_t)m->types, D);
  if (m->types == 0) m->token_type.rows = NULL;
  m->norm_weight = take(&f, D * 4);
  m->norm_bias = take(&f, D * 4);
  m->layer = calloc((size_t)m->layers, sizeof(Layer));
  if (!m->layer) return refuse(m, err, errcap, "out of memory opening the model");
  for (int l = 0; l < m->layers && types; l++) {
    Layer *w = &m->layer[l];
    const uint8_t *t = types + 6 * l;
    for (int i = 0; i < 6; i++)
      if (t[i] != HS_INT8 && t[i] != HS_Q4_0)
        return refuse_setting(m, "matrix type", t[i], err, errcap);
    take_linear(&f, &w->query, t[0], D, D);
    take_linear(&f, &w->key, t[1], D, D);
    take_linear(&f, &w->value, t[2], D, D);
    take_linear(&f, &w->output, t[3], D, D);
    w->norm1_weight = take(&f, D * 4);
    w->norm1_bias = take(&f, D * 4);
    take_linear(&f, &w->up, t[4], D, F);
    take_linear(&f, &w->down, t[5], F, D);
    w->norm2_weight = take(&f, D * 4);
    w->norm2_bias = take(&f, D * 4);
  }
  uint64_t row_bytes = table_bytes((int)word_type, 1, D);
  if (!f.ok || f.at != word_at || word_at + V * row_bytes != n)
    return refuse(m, err, errcap,
                  "the model file's sections do not fill its %llu bytes as its shapes say: " HS_REMAKE,
                  (unsigned long long)n);
  for (int r = 0; r < 2; r++)
    if (!is_utf8((const uint8_t *)m->prefix[r], prefix_bytes[r]))
      return refuse(m, err, errcap, "the model file's %s prefix is not UTF-8: " HS_REMAKE,
                    r == HS_MODEL_QUERY ? "query" : "document");
  m->word.rows = p + word_at;
  m->words = (Words){word_at, n, row_bytes, (int64_t)blocks, sums};
  if (!open_tokenizer(m, (int)kind, tokenizer, token_bytes, err, errcap)) return NULL;
  static const int which[4] = {HS_TOKEN_CLS, HS_TOKEN_SEP, HS_TOKEN_PAD, HS_TOKEN_UNK};
  for (int i = 0; i < 4; i++) {
    int32_t own = hs_tokenizer_special(m->tokenizer, which[i]);
    if (own >= 0 && own != special[i])
      return refuse(m, err, errcap,
                    "the model file's special ids (%d %d %d %d) are not its tokenizer's: " HS_REMAKE,
                    special[0], special[1], special[2], special[3]);
  }
  /* The word table, a block at a time, last: a caller that checks it later (hs_model_open_head)
  ** refuses a file with the same line. */
  for (uint64_t b = 0; b < blocks && !words_later; b++) {
    uint64_t at, bytes;
    hs_model_word_block(m, (int64_t)b, &at, &bytes);
    if (!word_block_ok(m, (int64_t)b, p + at)) return refuse(m, err, errcap, "%s", DAMAGED);
  }
  return m;
}

static HsModel *open_model(const void *data, size_t n, int words_later, char *err, size_t errcap) {
  const uint8_t *p = data;
  if (hs_model_header(data, n, err, errcap)) return NULL;
  if (((uintptr_t)data % 8) != 0)
    return refuse(NULL, err, errcap, "the model's bytes are not aligned to 8 bytes in memory: copy them to memory from malloc");
  return u32_at(p + 16) == 1 ? open_v1(p, n, err, errcap) : open_v2(p, n, words_later, err, errcap);
}

HsModel *hs_model_open(const void *data, size_t n, char *err, size_t errcap) {
  return open_model(data, n, 0, err, errcap);
}

uint64_t hs_model_words_at(const void *head, uint64_t size) {
  const uint8_t *p = head;
  return u32_at(p + 16) == 2 ? u64_at(p + 40) : size;
}

HsModel *hs_model_open_head(const void *data, size_t n, char *err, size_t errcap) {
  return open_model(data, n, 1, err, errcap);
}

int64_t hs_model_word_blocks(const HsModel *m) { return m->words.blocks; }

void hs_model_word_block(const HsModel *m, int64_t b, uint64_t *at, uint64_t *bytes) {
  const Words *w = &m->words;
  *at = w->at + (uint64_t)b * HS_WORD_BLOCK * w->row_bytes;
  *bytes = *at + HS_WORD_BLOCK * w->row_bytes < w->size ? HS_WORD_BLOCK * w->row_bytes
                                                         : w->size - *at;
}

int hs_model_word_block_ok(const HsModel *m, int64_t b, const void *bytes, char *err,
                           size_t errcap) {
  if (b >= 0 && b < m->words.blocks && word_block_ok(m, b, bytes)) return 1;
  snprintf(err, errcap, "%s", DAMAGED);
  return 0;
}

void hs_model_free(HsModel *m) {
  if (!m) return;
  hs_tokenizer_free(m->tokenizer);
  free(m->layer);
  free(m->owned);
  free(m);
}

int32_t hs_model_special(const HsModel *m, int which) { return which == 0 ? m->cls : m->sep; }
