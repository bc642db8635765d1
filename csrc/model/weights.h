/*
** The model in memory: what model/load.c fills from a model file and model/model.c runs.  Every
** pointer points into the caller's bytes (hybridsql/embedding/model_file.py's docstring is their
** format); nothing here is particular to one model.
*/
#ifndef HYBRIDSQL_MODEL_WEIGHTS_H
#define HYBRIDSQL_MODEL_WEIGHTS_H
#include <stdint.h>
#include <string.h>

#include "tokenizer.h"

/* A weight's type, as the file names it. */
#define HS_INT8 1 /* int8 with a float32 scale a row (tables) or an output column (matrices) */
#define HS_Q4_0 2 /* ggml's Q4_0: 4-bit codes, a float16 scale a block of 32 */
#define HS_F32 3  /* float32, tables only */

#define HS_BLOCK 32       /* a matrix's blocks: 32 output columns (and 32 inputs for Q4_0) */
#define HS_Q4_BLOCK 18    /* a Q4_0 block of a table's row: float16 d, 16 bytes of codes */
#define HS_Q4_TILE 576    /* a Q4_0 tile of a matrix: 32 float16 scales, 32 x 16 bytes */
#define HS_MAX_WINDOWS 8  /* a text's windows, at most: the rest is not read */
#define HS_POOL_MEAN 1
#define HS_POOL_CLS 2

/* An embedding table: rows of dims values. */
typedef struct {
  int type;           /* HS_INT8, HS_Q4_0 or HS_F32 */
  const void *rows;   /* int8 [rows][dims], Q4_0 [rows][dims / 32] blocks, float [rows][dims] */
  const float *scale; /* HS_INT8: [rows] */
} Table;

/* A weight matrix [in][out] and its bias: out = x W + bias. */
typedef struct {
  int type;           /* HS_INT8 or HS_Q4_0 */
  const void *w;      /* HS_INT8: int8 [out / 32][in][32]; HS_Q4_0: tiles [out / 32][in / 32] */
  const float *scale; /* HS_INT8: [out], column j is worth w[.][j] * scale[j]; else NULL */
  const float *bias;  /* [out] */
} Linear;

typedef struct {
  Linear query, key, value, output, up, down;
  const float *norm1_weight, *norm1_bias; /* after attention */
  const float *norm2_weight, *norm2_bias; /* after the feed-forward */
} Layer;

#define HS_ID_MOST 63 /* a model id's bytes, at most */

/* A format-2 file's word table, checked a block of HS_WORD_BLOCK rows at a time against the
** checksums its head keeps (format 1: blocks 0, its one checksum covers the whole file). */
typedef struct {
  uint64_t at, size;    /* where the table starts; the file's size (the table runs to its end) */
  uint64_t row_bytes;
  int64_t blocks;
  const uint8_t *sums;  /* a little-endian uint64 a block */
} Words;

struct HsModel {
  char id[HS_ID_MOST + 1];
  int dims, layers, heads, ffn, vocab, positions, position_offset, types;
  float eps;
  int pooling;   /* HS_POOL_MEAN or HS_POOL_CLS */
  int normalise; /* 1: L2 */
  int window;    /* tokens a window, cls and sep included */
  float readable; /* the zero vector under this share of readable pieces; 0 never */
  int32_t cls, sep;
  const char *prefix[2]; /* HS_MODEL_QUERY, HS_MODEL_DOCUMENT: UTF-8, not NUL-terminated */
  int64_t prefix_bytes[2];
  Table word, position, token_type; /* token_type.rows NULL when the model has none */
  Words words;
  const float *norm_weight, *norm_bias;
  Layer *layer;
  HsTokenizer *tokenizer;
  void *owned; /* memory of the model's own (a format 1 file's tokenizer section), or NULL */
};

/* A float16's value (IEEE binary16, little-endian bytes). */
static inline float hs_half(const uint8_t *p) {
  uint32_t h = (uint32_t)p[0] | (uint32_t)p[1] << 8;
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | man << 13; /* infinity or NaN */
  } else if (exp != 0) {
    bits = sign | (exp + 112) << 23 | man << 13;
  } else if (man == 0) {
    bits = sign; /* zero */
  } else { /* subnormal: shift the mantissa up to a normal number */
    exp = 113;
    while (!(man & 0x400)) {
      man <<= 1;
      exp--;
    }
    bits = sign | exp << 23 | (man & 0x3FF) << 13;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

#endif
