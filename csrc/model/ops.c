/*
** The forward pass's kernels (csrc/model/ops.h is their contract): the matmul, for each weight
** type and instruction set, attention and GELU.  Nothing here knows a model file or SQLite.
**
** A matmul runs a block of 32 output columns at a time in two steps: widen, which turns the
** block's weights into float32 in a scratch block wide[K][32] (the size of L1 or L2), and rows,
** which multiplies every row of x by it with the accumulators in registers, then adds the bias.
** Only widen knows the weight type:
**   int8   the codes as floats; rows multiplies each sum by its column's scale at the end.
**   Q4_0   (code - 8) * d, d the float16 scale of the column's block of 32 inputs: the exact
**          value of the dequantized weight, so the pass is the float forward of those weights.
** The weights stay small in memory (a short query mostly streams them: MiniLM's int8 22.5 MB,
** multilingual-e5-small's Q4_0 layers 11.9 MB) and are widened once a call, then read T times.
** Each path (AVX-512, AVX2+FMA, NEON, portable C) is chosen at run time with the other kernels'
** (hs_simd_path(), HYBRIDSQL_SIMD); attention and GELU are portable C that the AVX2 path
** compiles a second time for AVX2.  AVX-512 pays here, unlike in the dot products of kernels/:
** a window's matmuls are compute-bound.
*/
#include "ops.h"

#include "kernels/simd.h" /* hs_simd_path(): the path the other kernels run */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HS_X86 1
#include <immintrin.h>
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define HS_NEON 1
#include <arm_neon.h>
#endif

/* ------------------------------------------------------------------------
** Where a block's weights are.  An int8 matrix is [out / 32][in][32]: block n's row k is 32
** bytes.  A Q4_0 matrix is tiles [out / 32][in / 32] of HS_Q4_TILE bytes: 32 float16 scales,
** then 32 rows of 16 bytes, byte c holding column c's code low and column c + 16's high.
*/
static inline const int8_t *int8_row(const Linear *l, int K, int k, int n) {
  return (const int8_t *)l->w + (size_t)(n / HS_BLOCK) * K * HS_BLOCK + (size_t)k * HS_BLOCK;
}

static inline const uint8_t *q4_tile(const Linear *l, int K, int k, int n) {
  return (const uint8_t *)l->w + ((size_t)(n / HS_BLOCK) * (K / HS_BLOCK) + k / HS_BLOCK) * HS_Q4_TILE;
}

/* A tile's 32 scales as float32. */
static inline void q4_scales(const uint8_t *tile, float *d) {
  for (int c = 0; c < HS_BLOCK; c++) d[c] = hs_half(tile + 2 * c);
}

/* ------------------------------------------------------------------------
** Portable C.
*/
static void widen_generic(float *wide, const Linear *l, int K, int n) {
  if (l->type == HS_INT8) {
    for (int k = 0; k < K; k++) {
      const int8_t *w = int8_row(l, K, k, n);
      for (int j = 0; j < HS_BLOCK; j++) wide[HS_BLOCK * k + j] = (float)w[j];
    }
    return;
  }
  for (int k0 = 0; k0 < K; k0 += HS_BLOCK) {
    const uint8_t *tile = q4_tile(l, K, k0, n);
    float d[HS_BLOCK];
    q4_scales(tile, d);
    for (int k = 0; k < HS_BLOCK; k++) {
      const uint8_t *codes = tile + 2 * HS_BLOCK + 16 * k;
      float *o = wide + HS_BLOCK * (k0 + k);
      for (int c = 0; c < 16; c++) {
        o[c] = (float)((codes[c] & 0x0F) - 8) * d[c];
        o[c + 16] = (float)((codes[c] >> 4) - 8) * d[c + 16];
      }
    }
  }
}

/* out[t][n + j] for t < T, j < 32, from the widened block: four rows of x by sixteen columns
** at a time, sums over all of K in order. */
static void rows_generic(float *out, const float *x, const float *wide, const Linear *l, int T,
                         int K, int N, int n) {
  for (int t = 0; t < T; t += 4) {
    int rows = T - t < 4 ? T - t : 4;
    for (int h = 0; h < HS_BLOCK; h += 16) {
      float acc[4][16] = {{0}};
      for (int k = 0; k < K; k++) {
        const float *w = wide + HS_BLOCK * k + h;
        for (int r = 0; r < rows; r++) {
          float xv = x[(size_t)(t + r) * K + k];
          for (int j = 0; j < 16; j++) acc[r][j] += xv * w[j];
        }
      }
      for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)(t + r) * N + n + h;
        const float *bias = l->bias + n + h;
        if (l->scale)
          for (int j = 0; j < 16; j++) o[j] = acc[r][j] * l->scale[n + h + j] + bias[j];
        else
          for (int j = 0; j < 16; j++) o[j] = acc[r][j] + bias[j];
      }
    }
  }
}

static void matmul_generic(float *out, const float *x, const Linear *l, int T, int K, int N,
                           float *wide) {
  for (int n = 0; n < N; n += HS_BLOCK) {
    widen_generic(wide, l, K, n);
    rows_generic(out, x, wide, l, T, K, N, n);
  }
}

#ifdef HS_X86
/* ------------------------------------------------------------------------
** AVX2+FMA: eight floats a register.
*/
__attribute__((target("avx2,fma"))) static void widen_avx2(float *wide, const Linear *l, int K,
                                                            int n) {
  if (l->type == HS_INT8) {
    for (int k = 0; k < K; k++) {
      const int8_t *w = int8_row(l, K, k, n);
      for (int j = 0; j < HS_BLOCK; j += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(w + j));
        _mm256_storeu_ps(wide + HS_BLOCK * k + j, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)));
        _mm256_storeu_ps(wide + HS_BLOCK * k + j + 8,
                         _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8))));
      }
    }
    return;
  }
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m256i eight = _mm256_set1_epi32(8);
  for (int k0 = 0; k0 < K; k0 += HS_BLOCK) {
    const uint8_t *tile = q4_tile(l, K, k0, n);
    float d[HS_BLOCK];
    q4_scales(tile, d);
    __m256 d0 = _mm256_loadu_ps(d), d1 = _mm256_loadu_ps(d + 8);
    __m256 d2 = _mm256_loadu_ps(d + 16), d3 = _mm256_loadu_ps(d + 24);
    for (int k = 0; k < HS_BLOCK; k++) {
      __m128i b = _mm_loadu_si128((const __m128i *)(tile + 2 * HS_BLOCK + 16 * k));
      __m128i lo = _mm_and_si128(b, low), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
      float *o = wide + HS_BLOCK * (k0 + k);
      __m256i c0 = _mm256_sub_epi32(_mm256_cvtepu8_epi32(lo), eight);
      __m256i c1 = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)), eight);
      __m256i c2 = _mm256_sub_epi32(_mm256_cvtepu8_epi32(hi), eight);
      __m256i c3 = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)), eight);
      _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_cvtepi32_ps(c0), d0));
      _mm256_storeu_ps(o + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(c1), d1));
      _mm256_storeu_ps(o + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(c2), d2));
      _mm256_storeu_ps(o + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(c3), d3));
    }
  }
}

/* Four rows of x at a time against sixteen columns of the widened block, with eight
** accumulators held in registers over all of K.  Rows past T repeat the last row and are not
** stored. */
__attribute__((target("avx2,fma"))) static void rows_avx2(float *out, const float *x,
                                                           const float *wide, const Linear *l,
                                                           int T, int K, int N, int n) {
  for (int h = 0; h < HS_BLOCK; h += 16) {
    __m256 b0 = _mm256_loadu_ps(l->bias + n + h), b1 = _mm256_loadu_ps(l->bias + n + h + 8);
    __m256 s0 = _mm256_set1_ps(1), s1 = s0;
    if (l->scale) {
      s0 = _mm256_loadu_ps(l->scale + n + h);
      s1 = _mm256_loadu_ps(l->scale + n + h + 8);
    }
    for (int t = 0; t < T; t += 4) {
      const float *x0 = x + (size_t)t * K;
      const float *x1 = x + (size_t)(t + 1 < T ? t + 1 : T - 1) * K;
      const float *x2 = x + (size_t)(t + 2 < T ? t + 2 : T - 1) * K;
      const float *x3 = x + (size_t)(t + 3 < T ? t + 3 : T - 1) * K;
      __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00;
      __m256 a20 = a00, a21 = a00, a30 = a00, a31 = a00;
      for (int k = 0; k < K; k++) {
        const float *w = wide + HS_BLOCK * k + h;
        __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
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
      for (int r = 0; r < 4 && t + r < T; r++) { /* a scale of 1: acc * 1 + b is acc + b */
        float *o = out + (size_t)(t + r) * N + n + h;
        _mm256_storeu_ps(o, _mm256_fmadd_ps(acc[r][0], s0, b0));
        _mm256_storeu_ps(o + 8, _mm256_fmadd_ps(acc[r][1], s1, b1));
      }
    }
  }
}

__attribute__((target("avx2,fma"))) static void matmul_avx2(float *out, const float *x,
                                                             const Linear *l, int T, int K,
                                                             int N, float *wide) {
  for (int n = 0; n < N; n += HS_BLOCK) {
    widen_avx2(wide, l, K, n);
    rows_avx2(out, x, wide, l, T, K, N, n);
  }
}

/* ------------------------------------------------------------------------
** AVX-512: sixteen floats a register, the block's 32 columns in two, up to six rows at a time:
** twelve accumulators.  Chosen where the CPU and the OS have it (avx512f), unless
** HYBRIDSQL_SIMD names a path.  A query's few tokens are spread evenly over the tiles (10 as 5
** and 5, not 6 and 4 padded to 6), each tile compiled for its row count.
*/
__attribute__((target("avx512f,avx2,fma"))) static void widen_avx512(float *wide, const Linear *l,
                                                                      int K, int n) {
  if (l->type == HS_INT8) {
    for (int k = 0; k < K; k++) {
      const __m128i *w = (const __m128i *)int8_row(l, K, k, n);
      _mm512_storeu_ps(wide + HS_BLOCK * k,
                       _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(w))));
      _mm512_storeu_ps(wide + HS_BLOCK * k + 16,
                       _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(w + 1))));
    }
    return;
  }
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m512i eight = _mm512_set1_epi32(8);
  for (int k0 = 0; k0 < K; k0 += HS_BLOCK) {
    const uint8_t *tile = q4_tile(l, K, k0, n);
    float d[HS_BLOCK];
    q4_scales(tile, d);
    __m512 d0 = _mm512_loadu_ps(d), d1 = _mm512_loadu_ps(d + 16);
    for (int k = 0; k < HS_BLOCK; k++) {
      __m128i b = _mm_loadu_si128((const __m128i *)(tile + 2 * HS_BLOCK + 16 * k));
      __m512i lo = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(b, low)), eight);
      __m512i hi = _mm512_sub_epi32(
          _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(b, 4), low)), eight);
      _mm512_storeu_ps(wide + HS_BLOCK * (k0 + k), _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d0));
      _mm512_storeu_ps(wide + HS_BLOCK * (k0 + k) + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d1));
    }
  }
}

__attribute__((target("avx512f,avx2,fma"), always_inline)) static inline void tile_avx512(
    float *out, const float *x, const float *wide, const Linear *l, int R, int t, int K, int N,
    int n) {
  __m512 a[6][2];
  for (int r = 0; r < R; r++) a[r][0] = a[r][1] = _mm512_setzero_ps();
  for (int k = 0; k < K; k++) {
    __m512 w0 = _mm512_loadu_ps(wide + HS_BLOCK * k), w1 = _mm512_loadu_ps(wide + HS_BLOCK * k + 16);
    for (int r = 0; r < R; r++) {
      __m512 v = _mm512_set1_ps(x[(size_t)(t + r) * K + k]);
      a[r][0] = _mm512_fmadd_ps(v, w0, a[r][0]);
      a[r][1] = _mm512_fmadd_ps(v, w1, a[r][1]);
    }
  }
  __m512 s0 = _mm512_set1_ps(1), s1 = s0; /* a scale of 1: acc * 1 + b is acc + b */
  if (l->scale) {
    s0 = _mm512_loadu_ps(l->scale + n);
    s1 = _mm512_loadu_ps(l->scale + n + 16);
  }
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
  for (int n = 0; n < N; n += HS_BLOCK) {
    widen_avx512(wide, l, K, n);
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
/* ------------------------------------------------------------------------
** NEON: four floats a register.
*/
static void widen_neon(float *wide, const Linear *l, int K, int n) {
  if (l->type == HS_INT8) {
    for (int k = 0; k < K; k++) {
      const int8_t *w = int8_row(l, K, k, n);
      for (int j = 0; j < HS_BLOCK; j += 16) {
        int8x16_t b = vld1q_s8(w + j);
        int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_high_s8(b);
        float *o = wide + HS_BLOCK * k + j;
        vst1q_f32(o, vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))));
        vst1q_f32(o + 4, vcvtq_f32_s32(vmovl_high_s16(lo)));
        vst1q_f32(o + 8, vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))));
        vst1q_f32(o + 12, vcvtq_f32_s32(vmovl_high_s16(hi)));
      }
    }
    return;
  }
  for (int k0 = 0; k0 < K; k0 += HS_BLOCK) {
    const uint8_t *tile = q4_tile(l, K, k0, n);
    float d[HS_BLOCK];
    q4_scales(tile, d);
    for (int k = 0; k < HS_BLOCK; k++) {
      uint8x16_t b = vld1q_u8(tile + 2 * HS_BLOCK + 16 * k);
      /* codes - 8 as int8, columns 0-15 then 16-31 */
      int8x16_t half[2] = {vsubq_s8(vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(0x0F))), vdupq_n_s8(8)),
                           vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(b, 4)), vdupq_n_s8(8))};
      float *o = wide + HS_BLOCK * (k0 + k);
      for (int h = 0; h < 2; h++) {
        int16x8_t lo = vmovl_s8(vget_low_s8(half[h])), hi = vmovl_high_s8(half[h]);
        const float *s = d + 16 * h;
        vst1q_f32(o + 16 * h, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), vld1q_f32(s)));
        vst1q_f32(o + 16 * h + 4, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), vld1q_f32(s + 4)));
        vst1q_f32(o + 16 * h + 8,
                  vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), vld1q_f32(s + 8)));
        vst1q_f32(o + 16 * h + 12, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), vld1q_f32(s + 12)));
      }
    }
  }
}

/* Four rows of x by sixteen columns of the widened block: sixteen accumulators held in
** registers over all of K. */
static void rows_neon(float *out, const float *x, const float *wide, const Linear *l, int T,
                      int K, int N, int n) {
  for (int h = 0; h < HS_BLOCK; h += 16) {
    for (int t = 0; t < T; t += 4) {
      int rows = T - t < 4 ? T - t : 4;
      float32x4_t acc[4][4];
      for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) acc[r][c] = vdupq_n_f32(0);
      for (int k = 0; k < K; k++) {
        const float *w = wide + HS_BLOCK * k + h;
        float32x4_t wv[4] = {vld1q_f32(w), vld1q_f32(w + 4), vld1q_f32(w + 8), vld1q_f32(w + 12)};
        for (int r = 0; r < rows; r++) {
          float xv = x[(size_t)(t + r) * K + k];
          for (int c = 0; c < 4; c++) acc[r][c] = vfmaq_n_f32(acc[r][c], wv[c], xv);
        }
      }
      for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)(t + r) * N + n + h;
        for (int c = 0; c < 4; c++) {
          float32x4_t b = vld1q_f32(l->bias + n + h + 4 * c);
          float32x4_t s = l->scale ? vld1q_f32(l->scale + n + h + 4 * c) : vdupq_n_f32(1);
          vst1q_f32(o + 4 * c, vfmaq_f32(b, acc[r][c], s));
        }
      }
    }
  }
}

static void matmul_neon(float *out, const float *x, const Linear *l, int T, int K, int N,
                        float *wide) {
  for (int n = 0; n < N; n += HS_BLOCK) {
    widen_neon(wide, l, K, n);
    rows_neon(out, x, wide, l, T, K, N, n);
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
  if (D / H == 32) /* MiniLM's, e5-small's, bge-small's: a constant, so the loops unroll */
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
  if (D / H == 32) /* MiniLM's, e5-small's, bge-small's: a constant, so the loops unroll */
    attention_body(out, q, k, v, kt, att, T, D, H, 32);
  else
    attention_body(out, q, k, v, kt, att, T, D, H, D / H);
}

__attribute__((target("avx2,fma"))) static void gelu_avx2(float *h, int64_t n) {
  gelu_body(h, n);
}
#endif

/* The path hs_simd_path() chose for the other kernels (HYBRIDSQL_SIMD included), and on x86_64
** AVX-512 for matmul where the CPU has it and HYBRIDSQL_SIMD names no path. */
static HsOps choose_ops(void) {
  HsOps k = {matmul_generic, attention_generic, gelu_generic, "generic"};
  const char *path = hs_simd_path();
#ifdef HS_X86
  if (strcmp(path, "avx2+fma") == 0) {
    k = (HsOps){matmul_avx2, attention_avx2, gelu_avx2, "avx2+fma"};
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

HsOps hs_ops(void) {
  static HsOps chosen; /* once a process: a benign race, every thread stores the same */
  if (!chosen.matmul) chosen = choose_ops();
  return chosen;
}
