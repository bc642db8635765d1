/*
** The embedding model's forward pass: a BERT-family encoder (BERT, XLM-RoBERTa) of any shape,
** as one model file describes it (model/load.c reads it into struct HsModel, model/weights.h;
** hybridsql/embedding/model_file.py's docstring is the format).  It knows nothing of SQLite nor
** of files; csrc/model/model.h is its contract.
**
** Written like llama2.c's run.c: the weights are plain pointers into the caller's bytes, and one
** function (forward) runs a window through the whole network over plain arrays, in float32:
**
**   1. x[t] = word[id] + token_type[0] (when the model has token types) + position[offset + t],
**      each row dequantized (int8 times its scale, Q4_0 blocks, or float32), then LayerNorm.
**   2. Each layer: q, k, v = x Wq + bq, x Wk + bk, x Wv + bv; q and k times head_dim^-0.25;
**      each head's softmax(q k^T) v, the heads side by side, is a; x = LayerNorm(x + a Wo + bo);
**      u = x W1 + b1; x = LayerNorm(x + GELU(u) W2 + b2), GELU(u) = u * 0.5 * (1 + erf(u / sqrt(2))).
**   3. A text's vector: the pooling (the mean of x over every token of its windows, or the mean
**      of each window's first token), then L2-normalised where the model says so.
**
** A text is read as the role's prefix (the model's query or document prefix) and the text,
** tokenized as one (model/tokenizer.h), in windows of the model's window less its two specials
** between cls and sep, at most HS_MAX_WINDOWS; the zero vector when under the model's readable
** share of the text's pieces are readable.  The kernels (matmul for each weight type, attention,
** GELU) are model/ops.c's, on the instruction set chosen once a process.
*/
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "weights.h"

/* out[0..D) = row r of the table, dequantized. */
static void table_row(const Table *tab, int64_t r, int D, float *out) {
  if (tab->type == HS_F32) {
    memcpy(out, (const float *)tab->rows + r * D, sizeof(float) * (size_t)D);
  } else if (tab->type == HS_INT8) {
    const int8_t *row = (const int8_t *)tab->rows + r * D;
    float s = tab->scale[r];
    for (int i = 0; i < D; i++) out[i] = row[i] * s;
  } else { /* HS_Q4_0: ggml's blocks, value j's code low and value j + 16's high */
    const uint8_t *block = (const uint8_t *)tab->rows + r * (D / HS_BLOCK) * HS_Q4_BLOCK;
    for (int b = 0; b < D / HS_BLOCK; b++, block += HS_Q4_BLOCK) {
      float d = hs_half(block);
      for (int j = 0; j < 16; j++) {
        out[HS_BLOCK * b + j] = (float)((block[2 + j] & 0x0F) - 8) * d;
        out[HS_BLOCK * b + j + 16] = (float)((block[2 + j] >> 4) - 8) * d;
      }
    }
  }
}

/* x[t] = LayerNorm(x[t] + y[t]) over each of T rows of D (y NULL: LayerNorm(x[t])). */
static void add_norm(float *x, const float *y, const float *weight, const float *bias, int T,
                     int D, float eps) {
  for (int t = 0; t < T; t++) {
    float *row = x + (size_t)t * D;
    if (y)
      for (int i = 0; i < D; i++) row[i] += y[(size_t)t * D + i];
    double sum = 0, squares = 0;
    for (int i = 0; i < D; i++) sum += row[i];
    float mean = (float)(sum / D);
    for (int i = 0; i < D; i++) squares += (double)(row[i] - mean) * (row[i] - mean);
    float inv = (float)(1.0 / sqrt(squares / D + eps));
    for (int i = 0; i < D; i++) row[i] = (row[i] - mean) * inv * weight[i] + bias[i];
  }
}

/* What one window's pass needs, allocated per call: a model is shared by threads. */
typedef struct {
  float *x;    /* [T][dims] the hidden state */
  float *xb;   /* [T][dims] a branch's output */
  float *q;    /* [T][dims] */
  float *k;    /* [T][dims] */
  float *v;    /* [T][dims] */
  float *h;    /* [T][ffn] */
  float *kt;   /* [head_dim][T rounded up to HS_KEYS] one head's keys, transposed */
  float *att;  /* [T rounded up to HS_KEYS] one query's scores */
  float *wide; /* [max(dims, ffn)][32] a block of weights widened by matmul */
  float *row;  /* [dims] an embedding's row */
} RunState;

static int alloc_state(RunState *s, const HsModel *m, int T) {
  size_t d = (size_t)T * m->dims, S = (size_t)(T + HS_KEYS - 1) / HS_KEYS * HS_KEYS;
  size_t wide = (size_t)(m->ffn > m->dims ? m->ffn : m->dims) * HS_BLOCK;
  size_t floats = 5 * d + (size_t)T * m->ffn + S * (size_t)(m->dims / m->heads) + S + wide + m->dims;
  float *all = malloc(sizeof(float) * floats);
  if (!all) return 0;
  s->x = all;
  s->xb = s->x + d;
  s->q = s->xb + d;
  s->k = s->q + d;
  s->v = s->k + d;
  s->h = s->v + d;
  s->kt = s->h + (size_t)T * m->ffn;
  s->att = s->kt + S * (size_t)(m->dims / m->heads);
  s->wide = s->att + S;
  s->row = s->wide + wide;
  return 1;
}

/* One window of T token ids through the network; its hidden states are left in s->x. */
static void forward(const HsModel *m, const HsOps *op, RunState *s, const int32_t *ids, int T) {
  int D = m->dims, F = m->ffn;
  for (int t = 0; t < T; t++) {
    float *x = s->x + (size_t)t * D;
    table_row(&m->word, ids[t], D, x);
    if (m->token_type.rows) /* the same sum, in the same order, as the ONNX graph of MiniLM */
      for (int i = 0; i < D; i++) x[i] += ((const float *)m->token_type.rows)[i];
    table_row(&m->position, m->position_offset + t, D, s->row);
    for (int i = 0; i < D; i++) x[i] += s->row[i];
  }
  add_norm(s->x, NULL, m->norm_weight, m->norm_bias, T, D, m->eps);
  for (int l = 0; l < m->layers; l++) {
    const Layer *w = &m->layer[l];
    op->matmul(s->q, s->x, &w->query, T, D, D, s->wide);
    op->matmul(s->k, s->x, &w->key, T, D, D, s->wide);
    op->matmul(s->v, s->x, &w->value, T, D, D, s->wide);
    op->attention(s->xb, s->q, s->k, s->v, s->kt, s->att, T, D, m->heads);
    op->matmul(s->q, s->xb, &w->output, T, D, D, s->wide);
    add_norm(s->x, s->q, w->norm1_weight, w->norm1_bias, T, D, m->eps);
    op->matmul(s->h, s->x, &w->up, T, D, F, s->wide);
    op->gelu(s->h, (int64_t)T * F);
    op->matmul(s->xb, s->h, &w->down, T, F, D, s->wide);
    add_norm(s->x, s->xb, w->norm2_weight, w->norm2_bias, T, D, m->eps);
  }
}

/*
** The vector of n ids (no cls/sep): windows of window - 2 ids between cls and sep, at most
** HS_MAX_WINDOWS; the pooling over all of them; L2-normalised where the model says so.
*/
static int embed_pieces(const HsModel *m, const int32_t *pieces, int64_t n, float *out,
                        int (*stop)(void *), void *arg) {
  const int per = m->window - 2;
  int64_t windows = n == 0 ? 1 : (n + per - 1) / per;
  if (windows > HS_MAX_WINDOWS) windows = HS_MAX_WINDOWS;
  int longest = (int)(n < per ? n : per) + 2;
  HsOps op = hs_ops();
  RunState s;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)m->window);
  double *sum = calloc((size_t)m->dims, sizeof(double));
  if (!ids || !sum || !alloc_state(&s, m, longest)) {
    free(ids);
    free(sum);
    return HS_MODEL_NOMEM;
  }
  int64_t pooled = 0; /* the states summed */
  int rc = HS_MODEL_OK;
  for (int64_t w = 0; w < windows; w++) {
    if (w > 0 && stop && stop(arg)) {
      rc = HS_MODEL_STOPPED;
      break;
    }
    int64_t from = w * per, count = n - from < per ? n - from : per;
    ids[0] = m->cls;
    memcpy(ids + 1, pieces + from, sizeof(int32_t) * (size_t)count);
    ids[count + 1] = m->sep;
    int T = (int)count + 2;
    forward(m, &op, &s, ids, T);
    int first = m->pooling == HS_POOL_CLS ? 1 : T; /* the window's states pooled */
    for (int t = 0; t < first; t++)
      for (int i = 0; i < m->dims; i++) sum[i] += s.x[(size_t)t * m->dims + i];
    pooled += first;
  }
  if (rc == HS_MODEL_OK) {
    double norm = 0;
    for (int i = 0; i < m->dims; i++) {
      sum[i] /= (double)pooled;
      norm += sum[i] * sum[i];
    }
    norm = m->normalise ? sqrt(norm) : 1.0;
    if (norm < 1e-12) norm = 1e-12;
    for (int i = 0; i < m->dims; i++) out[i] = (float)(sum[i] / norm);
  }
  free(s.x);
  free(sum);
  free(ids);
  return rc;
}

/* The ids of prefix + text for `most` windows (at most cap), into ids: their count, -1 on no
** memory. */
static int64_t text_ids(const HsModel *m, const char *prefix, int64_t plen, const char *text,
                        int64_t len, int most, int32_t *ids, int64_t cap) {
  return hs_tokenizer_ids(m->tokenizer, prefix, plen, text, len, m->window - 2, most, ids, cap);
}

int64_t hs_model_tokens(const HsModel *m, const char *text, int64_t len, int role, int most,
                        int32_t *ids, int64_t cap) {
  if (role != HS_MODEL_QUERY && role != HS_MODEL_DOCUMENT) return -1;
  return text_ids(m, m->prefix[role], m->prefix_bytes[role], text, len, most, ids, cap);
}

int hs_model_embed(const HsModel *m, const char *text, int64_t len, int role, float *out,
                   int (*stop)(void *), void *arg) {
  if (role != HS_MODEL_QUERY && role != HS_MODEL_DOCUMENT) role = HS_MODEL_QUERY;
  int64_t cap = (int64_t)HS_MAX_WINDOWS * (m->window - 2);
  int32_t *pieces = malloc(sizeof(int32_t) * (size_t)cap);
  if (!pieces) return HS_MODEL_NOMEM;
  int64_t n = text_ids(m, m->prefix[role], m->prefix_bytes[role], text, len, HS_MAX_WINDOWS,
                       pieces, cap);
  int rc = n < 0 ? HS_MODEL_NOMEM : HS_MODEL_OK;
  int unreadable = 0;
  if (n >= 0 && m->readable > 0) {
    /* The text's own pieces are judged, not the prefix's: a prefix in English would make any
    ** text readable enough. */
    if (m->prefix_bytes[role] == 0) {
      unreadable = hs_tokenizer_readable(m->tokenizer, pieces, n) < m->readable;
    } else {
      int32_t *own = malloc(sizeof(int32_t) * (size_t)cap);
      int64_t k = own ? text_ids(m, "", 0, text, len, HS_MAX_WINDOWS, own, cap) : -1;
      if (k < 0) rc = HS_MODEL_NOMEM;
      else unreadable = hs_tokenizer_readable(m->tokenizer, own, k) < m->readable;
      free(own);
    }
  }
  if (rc == HS_MODEL_OK && unreadable) {
    memset(out, 0, sizeof(float) * (size_t)m->dims);
  } else if (rc == HS_MODEL_OK) {
    rc = embed_pieces(m, pieces, n, out, stop, arg);
  }
  free(pieces);
  return rc;
}

/* The vector of ids as hs_model_embed makes it from a text's (readability aside); -1 when an id
** is not a row of the word table.  For the tests, which compare it with their oracles. */
int hs_model_embed_ids(const HsModel *m, const int32_t *ids, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= m->vocab) return -1;
  return embed_pieces(m, ids, n, out, NULL, NULL);
}

const char *hs_model_id(const HsModel *m) { return m->id; }

int hs_model_dims(const HsModel *m) { return m->dims; }

int hs_model_window(const HsModel *m) { return m->window; }

const char *hs_model_simd(void) { return hs_ops().name; }
