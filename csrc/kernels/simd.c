/*
** The kernels and their run-time dispatch: the dot products (double and float32 sums of float32
** vectors, int8 sums of int8 codes) and the chunk sums of vector_index's checksum, each in one
** path per instruction set, and the one function that chooses the paths for the process
** (choose_simd).  On x86_64 AVX2+FMA when cpuid and xgetbv say the CPU and the OS support it,
** else SSE2 (the x86-64 baseline); NEON on aarch64 (always present there); a generic loop
** elsewhere.  HYBRIDSQL_SIMD=generic|sse2 forces a lesser path, for testing.  The AVX2 functions
** carry __attribute__((target("avx2,fma"))), so that the file compiles for the baseline and no
** flag such as -march=native is needed; the model's matmul (model/model.c) follows the path
** chosen here (hs_simd_path).
**
** Nothing here knows SQLite.  kernels/simd.h is what crosses: the chosen paths, the cosine
** (Requirement 4 of functions/scalar.c) and the checksum sums (format 3, vector_index/storage.c).
*/
#include "kernels/simd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HS_X86 1
#include <immintrin.h>
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define HS_NEON 1 /* NEON is part of every aarch64 CPU: no run-time check is needed */
#include <arm_neon.h>
#endif

/*
** ab = a.b and bb = b.b, four partial sums so the compiler can pipeline.  a
** and b may be unaligned.  bb is finite exactly when every value of b is (a
** float32 squared cannot overflow a double), which spares a separate pass.
*/
static void dot2_generic(const float *a, const float *b, int64_t d, double *ab, double *bb) {
  double s[4] = {0, 0, 0, 0}, n[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= d; i += 4) {
    for (int j = 0; j < 4; j++) {
      double x = loadf(a + i + j), y = loadf(b + i + j);
      s[j] += x * y;
      n[j] += y * y;
    }
  }
  for (; i < d; i++) {
    double x = loadf(a + i), y = loadf(b + i);
    s[0] += x * y;
    n[0] += y * y;
  }
  *ab = (s[0] + s[1]) + (s[2] + s[3]);
  *bb = (n[0] + n[1]) + (n[2] + n[3]);
}

#ifdef HS_X86
static void dot2_sse2(const float *a, const float *b, int64_t d, double *ab, double *bb) {
  __m128d s0 = _mm_setzero_pd(), s1 = _mm_setzero_pd();
  __m128d n0 = _mm_setzero_pd(), n1 = _mm_setzero_pd();
  int64_t i = 0;
  for (; i + 4 <= d; i += 4) {
    __m128 va = _mm_loadu_ps(a + i), vb = _mm_loadu_ps(b + i);
    __m128d alo = _mm_cvtps_pd(va), ahi = _mm_cvtps_pd(_mm_movehl_ps(va, va));
    __m128d blo = _mm_cvtps_pd(vb), bhi = _mm_cvtps_pd(_mm_movehl_ps(vb, vb));
    s0 = _mm_add_pd(s0, _mm_mul_pd(alo, blo));
    s1 = _mm_add_pd(s1, _mm_mul_pd(ahi, bhi));
    n0 = _mm_add_pd(n0, _mm_mul_pd(blo, blo));
    n1 = _mm_add_pd(n1, _mm_mul_pd(bhi, bhi));
  }
  double s[2], n[2];
  _mm_storeu_pd(s, _mm_add_pd(s0, s1));
  _mm_storeu_pd(n, _mm_add_pd(n0, n1));
  double sa = s[0] + s[1], na = n[0] + n[1];
  for (; i < d; i++) {
    double x = loadf(a + i), y = loadf(b + i);
    sa += x * y;
    na += y * y;
  }
  *ab = sa;
  *bb = na;
}

__attribute__((target("avx2,fma")))
static double hsum256(__m256d v) {
  __m128d lo = _mm256_castpd256_pd128(v), hi = _mm256_extractf128_pd(v, 1);
  lo = _mm_add_pd(lo, hi);
  return _mm_cvtsd_f64(_mm_add_sd(lo, _mm_unpackhi_pd(lo, lo)));
}

__attribute__((target("avx2,fma")))
static void dot2_avx2(const float *a, const float *b, int64_t d, double *ab, double *bb) {
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  __m256d n0 = _mm256_setzero_pd(), n1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    __m256 va = _mm256_loadu_ps(a + i), vb = _mm256_loadu_ps(b + i);
    __m256d alo = _mm256_cvtps_pd(_mm256_castps256_ps128(va));
    __m256d ahi = _mm256_cvtps_pd(_mm256_extractf128_ps(va, 1));
    __m256d blo = _mm256_cvtps_pd(_mm256_castps256_ps128(vb));
    __m256d bhi = _mm256_cvtps_pd(_mm256_extractf128_ps(vb, 1));
    s0 = _mm256_fmadd_pd(alo, blo, s0);
    s1 = _mm256_fmadd_pd(ahi, bhi, s1);
    n0 = _mm256_fmadd_pd(blo, blo, n0);
    n1 = _mm256_fmadd_pd(bhi, bhi, n1);
  }
  double sa = hsum256(_mm256_add_pd(s0, s1)), na = hsum256(_mm256_add_pd(n0, n1));
  for (; i < d; i++) {
    double x = loadf(a + i), y = loadf(b + i);
    sa += x * y;
    na += y * y;
  }
  *ab = sa;
  *bb = na;
}
#endif

static void dot2f_generic(const float *a, const float *b, int64_t d, float *ab, float *bb) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, n[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    for (int j = 0; j < 8; j++) {
      float x = (float)loadf(a + i + j), y = (float)loadf(b + i + j);
      s[j] += x * y;
      n[j] += y * y;
    }
  }
  for (; i < d; i++) {
    float x = (float)loadf(a + i), y = (float)loadf(b + i);
    s[0] += x * y;
    n[0] += y * y;
  }
  *ab = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  *bb = ((n[0] + n[1]) + (n[2] + n[3])) + ((n[4] + n[5]) + (n[6] + n[7]));
}

/* The packed scan's first pass: float32 accumulation (dotf_fn), and int8 with int32 sums. */
typedef float (*DotFFn)(const float *a, const float *b, int64_t d);

static float dotf_generic(const float *a, const float *b, int64_t d) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
  }
  for (; i < d; i++) s[0] += a[i] * b[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static int32_t doti8_generic(const int8_t *a, const int8_t *b, int64_t d) {
  int32_t s = 0;
  for (int64_t i = 0; i < d; i++) s += (int32_t)a[i] * (int32_t)b[i];
  return s;
}

#ifdef HS_X86
__attribute__((target("avx2,fma")))
static float dotf_avx2(const float *a, const float *b, int64_t d) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= d; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= d; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  __m256 t = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  float sum = _mm_cvtss_f32(h);
  for (; i < d; i++) sum += a[i] * b[i];
  return sum;
}

__attribute__((target("avx2,fma")))
static float hsum256_ps(__m256 t) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

__attribute__((target("avx2,fma")))
static void dot2f_avx2(const float *a, const float *b, int64_t d, float *ab, float *bb) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  __m256 n0 = _mm256_setzero_ps(), n1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    __m256 a0 = _mm256_loadu_ps(a + i), a1 = _mm256_loadu_ps(a + i + 8);
    __m256 b0 = _mm256_loadu_ps(b + i), b1 = _mm256_loadu_ps(b + i + 8);
    s0 = _mm256_fmadd_ps(a0, b0, s0);
    s1 = _mm256_fmadd_ps(a1, b1, s1);
    n0 = _mm256_fmadd_ps(b0, b0, n0);
    n1 = _mm256_fmadd_ps(b1, b1, n1);
  }
  float sa = hsum256_ps(_mm256_add_ps(s0, s1)), na = hsum256_ps(_mm256_add_ps(n0, n1));
  for (; i < d; i++) {
    float x = (float)loadf(a + i), y = (float)loadf(b + i);
    sa += x * y;
    na += y * y;
  }
  *ab = sa;
  *bb = na;
}

__attribute__((target("avx2")))
/*
** a.b with maddubs (unsigned x signed bytes): |a| times b with a's sign, so that
** pairs of products, at most 2 x 127 x 128, never saturate 16 bits.  a is the
** query's codes, within [-127, 127] (quantize).
*/
static int32_t doti8_avx2(const int8_t *a, const int8_t *b, int64_t d) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= d; i += 32) {
    __m256i va = _mm256_loadu_si256((const __m256i *)(a + i));
    __m256i vb = _mm256_loadu_si256((const __m256i *)(b + i));
    __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(va), _mm256_sign_epi8(vb, va));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
  }
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
  int32_t sum = _mm_cvtsi128_si32(h);
  for (; i < d; i++) sum += (int32_t)a[i] * (int32_t)b[i];
  return sum;
}
#endif

#ifdef HS_NEON
static void dot2_neon(const float *a, const float *b, int64_t d, double *ab, double *bb) {
  float64x2_t s0 = vdupq_n_f64(0), s1 = vdupq_n_f64(0), n0 = vdupq_n_f64(0), n1 = vdupq_n_f64(0);
  int64_t i = 0;
  for (; i + 4 <= d; i += 4) {
    float32x4_t va = vld1q_f32(a + i), vb = vld1q_f32(b + i);
    float64x2_t alo = vcvt_f64_f32(vget_low_f32(va)), ahi = vcvt_high_f64_f32(va);
    float64x2_t blo = vcvt_f64_f32(vget_low_f32(vb)), bhi = vcvt_high_f64_f32(vb);
    s0 = vfmaq_f64(s0, alo, blo);
    s1 = vfmaq_f64(s1, ahi, bhi);
    n0 = vfmaq_f64(n0, blo, blo);
    n1 = vfmaq_f64(n1, bhi, bhi);
  }
  double sa = vaddvq_f64(vaddq_f64(s0, s1)), na = vaddvq_f64(vaddq_f64(n0, n1));
  for (; i < d; i++) {
    double x = loadf(a + i), y = loadf(b + i);
    sa += x * y;
    na += y * y;
  }
  *ab = sa;
  *bb = na;
}

static float dotf_neon(const float *a, const float *b, int64_t d) {
  float32x4_t s0 = vdupq_n_f32(0), s1 = vdupq_n_f32(0), s2 = vdupq_n_f32(0), s3 = vdupq_n_f32(0);
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
    s2 = vfmaq_f32(s2, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8));
    s3 = vfmaq_f32(s3, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12));
  }
  for (; i + 4 <= d; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
  float sum = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
  for (; i < d; i++) sum += a[i] * b[i];
  return sum;
}

static void dot2f_neon(const float *a, const float *b, int64_t d, float *ab, float *bb) {
  float32x4_t s0 = vdupq_n_f32(0), s1 = vdupq_n_f32(0), n0 = vdupq_n_f32(0), n1 = vdupq_n_f32(0);
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    float32x4_t a0 = vld1q_f32(a + i), a1 = vld1q_f32(a + i + 4);
    float32x4_t b0 = vld1q_f32(b + i), b1 = vld1q_f32(b + i + 4);
    s0 = vfmaq_f32(s0, a0, b0);
    s1 = vfmaq_f32(s1, a1, b1);
    n0 = vfmaq_f32(n0, b0, b0);
    n1 = vfmaq_f32(n1, b1, b1);
  }
  float sa = vaddvq_f32(vaddq_f32(s0, s1)), na = vaddvq_f32(vaddq_f32(n0, n1));
  for (; i < d; i++) {
    float x = (float)loadf(a + i), y = (float)loadf(b + i);
    sa += x * y;
    na += y * y;
  }
  *ab = sa;
  *bb = na;
}

/* Exact: each product of two int8 fits int16 (vmull), and pairs are summed into int32. */
static int32_t doti8_neon(const int8_t *a, const int8_t *b, int64_t d) {
  int32x4_t acc = vdupq_n_s32(0);
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    int8x16_t va = vld1q_s8(a + i), vb = vld1q_s8(b + i);
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(va), vget_low_s8(vb)));
    acc = vpadalq_s16(acc, vmull_high_s8(va, vb));
  }
  int32_t sum = vaddvq_s32(acc);
  for (; i < d; i++) sum += (int32_t)a[i] * (int32_t)b[i];
  return sum;
}
#endif

#ifdef HS_X86
/*
** Whether the CPU has AVX2 and FMA and the OS saves the YMM registers, asked of
** cpuid and xgetbv directly: __builtin_cpu_supports() needs a runtime that some
** toolchains stub (zig cc's always answers 0).
*/
static void hs_cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
  __asm__ __volatile__("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

static int hs_has_avx2_fma(void) {
  unsigned r[4];
  hs_cpuid(0, 0, r);
  if (r[0] < 7) return 0;
  hs_cpuid(1, 0, r);
  int fma = (r[2] >> 12) & 1, osxsave = (r[2] >> 27) & 1, avx = (r[2] >> 28) & 1;
  if (!fma || !osxsave || !avx) return 0;
  unsigned lo, hi;
  __asm__ __volatile__(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0)); /* xgetbv */
  (void)hi;
  if ((lo & 6) != 6) return 0; /* the OS saves XMM and YMM state */
  hs_cpuid(7, 0, r);
  return (r[1] >> 5) & 1;
}
#endif

/* The checksum of m whole 256-byte chunks of a T_codes row, the first one its chunk c0 (format
** 3: see codes_sum). */
typedef uint64_t (*ChunksFn)(const uint8_t *p, int64_t m, uint64_t c0);
static uint64_t chunks_sum_generic(const uint8_t *p, int64_t m, uint64_t c0);
#ifdef HS_X86
static uint64_t chunks_sum_sse2(const uint8_t *p, int64_t m, uint64_t c0);
static uint64_t chunks_sum_avx2(const uint8_t *p, int64_t m, uint64_t c0);
#elif defined(HS_NEON)
static uint64_t chunks_sum_neon(const uint8_t *p, int64_t m, uint64_t c0);
#endif

Dot2Fn dot2_fn;
static ChunksFn chunks_fn = chunks_sum_generic;
Dot2FFn dot2f_fn = dot2f_generic;
static DotFFn dotf_fn = dotf_generic;
DotI8Fn doti8_fn = doti8_generic;
static const char *simd_name = "unchosen";

static void choose_simd(void) {
  const char *force = getenv("HYBRIDSQL_SIMD");
  int generic = force && strcmp(force, "generic") == 0;
  Dot2Fn fn = dot2_generic;
  const char *name = "generic";
#ifdef HS_X86
  if (generic) {
    /* keep the generic path */
  } else if ((force && strcmp(force, "sse2") == 0) || !hs_has_avx2_fma()) {
    fn = dot2_sse2;
    name = "sse2";
    chunks_fn = chunks_sum_sse2;
  } else {
    fn = dot2_avx2;
    name = "avx2+fma";
    chunks_fn = chunks_sum_avx2;
    dot2f_fn = dot2f_avx2;
    dotf_fn = dotf_avx2;
    doti8_fn = doti8_avx2;
  }
#elif defined(HS_NEON)
  if (!generic) {
    fn = dot2_neon;
    name = "neon";
    chunks_fn = chunks_sum_neon;
    dot2f_fn = dot2f_neon;
    dotf_fn = dotf_neon;
    doti8_fn = doti8_neon;
  }
#else
  (void)generic;
#endif
  simd_name = name;
  dot2_fn = fn; /* a benign race: every thread stores the same values */
}

Dot2Fn dot2(void) {
  if (!dot2_fn) choose_simd();
  return dot2_fn;
}

HS_EXPORT const char *hs_simd_path(void) {
  dot2();
  return simd_name;
}

/* Requirement 4, with the query's squared norm qq already known. */
static double cosine_with(double qq, const float *q, const float *v, int64_t d, Dot2Fn fn) {
  double ab, bb;
  fn(q, v, d, &ab, &bb);
  return cosine_from(ab, qq, bb);
}

double squared_norm(const float *v, int64_t d, Dot2Fn fn) {
  double ab, bb;
  fn(v, v, d, &ab, &bb);
  return bb;
}

HS_EXPORT double hs_cosine(const float *a, const float *b, int64_t d) {
  Dot2Fn fn = dot2();
  return cosine_with(squared_norm(a, d, fn), a, b, d, fn);
}

HS_EXPORT int64_t hs_first_nonfinite(const float *v, int64_t d) {
  for (int64_t i = 0; i < d; i++) {
    if (!isfinite(loadf(v + i))) return i;
  }
  return -1;
}

/*
** Format 3's checksum of `n` bytes (a multiple of 8) of a T_codes row that
** start at its byte `first` (a multiple of HS_SUM_CHUNK).  The row is summed
** in chunks of HS_SUM_CHUNK bytes (the last one shorter), each multiplied by
** an odd number of its position.  In a chunk each 32-bit word w_i adds
** w_i * (2i + 1) (a change of one word always changes this term), and the
** words of its two halves are multiplied pairwise, each xor'd with a key of
** its place (so that changes which cancel in the first term do not cancel in
** the second).  Whole chunks are summed by the SIMD path chosen at run time
** (chunks_fn); a write adds the sums of the chunks it changes and takes away
** what they were.  It finds damage; it is
** not a cryptographic hash.
**
** The SIMD paths sum a run of m chunks without a horizontal sum or a
** multiply of each: with V_i the vector of chunk i's products (its sum is the
** sum of its lanes), A the running sum of the V_i and B the sum of the A after
** each chunk, sum (2 (c0 + i) + 1) V_i = (2 c0 + 1) A + 2 (m A - B), lane by
** lane, modulo 2^64 as every sum here is.
*/

/* A chunk's weights (2i + 1) and keys (j in each byte, xor'd with a constant), as tables: loads
** where a vectorised loop would compute them. */
static const uint32_t SUM_WEIGHTS[HS_SUM_CHUNK / 4] = {
    1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
    33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63,
    65, 67, 69, 71, 73, 75, 77, 79, 81, 83, 85, 87, 89, 91, 93, 95,
    97, 99, 101, 103, 105, 107, 109, 111, 113, 115, 117, 119, 121, 123, 125, 127,
};
static const uint32_t SUM_KEYS[2][HS_SUM_CHUNK / 8] = {
  {
    0x9e3779b9u, 0x9f3678b8u, 0x9c357bbbu, 0x9d347abau, 0x9a337dbdu, 0x9b327cbcu,
    0x98317fbfu, 0x99307ebeu, 0x963f71b1u, 0x973e70b0u, 0x943d73b3u, 0x953c72b2u,
    0x923b75b5u, 0x933a74b4u, 0x903977b7u, 0x913876b6u, 0x8e2769a9u, 0x8f2668a8u,
    0x8c256babu, 0x8d246aaau, 0x8a236dadu, 0x8b226cacu, 0x88216fafu, 0x89206eaeu,
    0x862f61a1u, 0x872e60a0u, 0x842d63a3u, 0x852c62a2u, 0x822b65a5u, 0x832a64a4u,
    0x802967a7u, 0x812866a6u,
  },
  {
    0x7f4a7c15u, 0x7e4b7d14u, 0x7d487e17u, 0x7c497f16u, 0x7b4e7811u, 0x7a4f7910u,
    0x794c7a13u, 0x784d7b12u, 0x7742741du, 0x7643751cu, 0x7540761fu, 0x7441771eu,
    0x73467019u, 0x72477118u, 0x7144721bu, 0x7045731au, 0x6f5a6c05u, 0x6e5b6d04u,
    0x6d586e07u, 0x6c596f06u, 0x6b5e6801u, 0x6a5f6900u, 0x695c6a03u, 0x685d6b02u,
    0x6752640du, 0x6653650cu, 0x6550660fu, 0x6451670eu, 0x63566009u, 0x62576108u,
    0x6154620bu, 0x6055630au,
  },
};

/* A chunk of fewer than HS_SUM_CHUNK bytes (a row's last). */
static uint64_t chunk_sum(const uint8_t *p, int64_t bytes) {
  uint32_t w[HS_SUM_CHUNK / 4];
  int64_t nw = bytes / 4, half = nw / 2;
  uint64_t lin = 0, nh = 0;
  memcpy(w, p, (size_t)bytes);
  for (int64_t i = 0; i < nw; i++) lin += (uint64_t)w[i] * SUM_WEIGHTS[i];
  for (int64_t i = 0; i < half; i++) {
    nh += (uint64_t)(w[i] ^ SUM_KEYS[0][i]) * (uint64_t)(w[i + half] ^ SUM_KEYS[1][i]);
  }
  return lin + nh;
}

/* A whole chunk, the same sum; the SIMD paths below must give it to the bit. */
static uint64_t chunk_sum_generic(const uint8_t *p) {
  uint32_t w[HS_SUM_CHUNK / 4];
  uint64_t lin = 0, nh = 0;
  memcpy(w, p, sizeof(w));
  for (int i = 0; i < HS_SUM_CHUNK / 4; i++) lin += (uint64_t)w[i] * SUM_WEIGHTS[i];
  for (int i = 0; i < HS_SUM_CHUNK / 8; i++) {
    nh += (uint64_t)(w[i] ^ SUM_KEYS[0][i]) * (uint64_t)(w[i + HS_SUM_CHUNK / 8] ^ SUM_KEYS[1][i]);
  }
  return lin + nh;
}

static uint64_t chunks_sum_generic(const uint8_t *p, int64_t m, uint64_t c0) {
  uint64_t sum = 0;
  for (int64_t i = 0; i < m; i++) sum += chunk_sum_generic(p + i * HS_SUM_CHUNK) * (2 * (c0 + i) + 1);
  return sum;
}

/* What A and B of m chunks make (above). */
static uint64_t chunks_total(uint64_t a, uint64_t b, int64_t m, uint64_t c0) {
  return (2 * c0 + 1) * a + 2 * ((uint64_t)m * a - b);
}

/*
** The same with 32x32 -> 64-bit multiplies of the even and odd words of each
** vector (pmuludq): compilers widen every word to 64 bits first, which halves
** the throughput of the baseline x86-64 build.
*/
#ifdef HS_X86
/* The weights of the even words of a chunk, and of the odd ones, each in a 64-bit lane: a
** 32x32 -> 64-bit multiply takes a lane's low word. */
static const uint64_t SUM_EVEN[HS_SUM_CHUNK / 8] = {
    1,  5,  9,  13, 17, 21, 25, 29, 33,  37,  41,  45,  49,  53,  57,  61,
    65, 69, 73, 77, 81, 85, 89, 93, 97, 101, 105, 109, 113, 117, 121, 125,
};
static const uint64_t SUM_ODD[HS_SUM_CHUNK / 8] = {
    3,  7,  11, 15, 19, 23, 27, 31, 35,  39,  43,  47,  51,  55,  59,  63,
    67, 71, 75, 79, 83, 87, 91, 95, 99, 103, 107, 111, 115, 119, 123, 127,
};

static uint64_t chunks_sum_sse2(const uint8_t *p, int64_t m, uint64_t c0) {
  __m128i a = _mm_setzero_si128(), b = _mm_setzero_si128();
  for (int64_t c = 0; c < m; c++, p += HS_SUM_CHUNK) {
    __m128i v = _mm_setzero_si128();
    for (int i = 0; i < HS_SUM_CHUNK / 4; i += 4) {
      __m128i w = _mm_loadu_si128((const __m128i *)(p + 4 * i));
      v = _mm_add_epi64(v, _mm_mul_epu32(w, _mm_loadu_si128((const __m128i *)(SUM_EVEN + i / 2))));
      v = _mm_add_epi64(v, _mm_mul_epu32(_mm_srli_epi64(w, 32),
                                         _mm_loadu_si128((const __m128i *)(SUM_ODD + i / 2))));
    }
    for (int i = 0; i < HS_SUM_CHUNK / 8; i += 4) {
      __m128i x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(p + 4 * i)),
                                _mm_loadu_si128((const __m128i *)(SUM_KEYS[0] + i)));
      __m128i y = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(p + HS_SUM_CHUNK / 2 + 4 * i)),
                                _mm_loadu_si128((const __m128i *)(SUM_KEYS[1] + i)));
      v = _mm_add_epi64(v, _mm_mul_epu32(x, y));
      v = _mm_add_epi64(v, _mm_mul_epu32(_mm_srli_epi64(x, 32), _mm_srli_epi64(y, 32)));
    }
    a = _mm_add_epi64(a, v);
    b = _mm_add_epi64(b, a);
  }
  uint64_t ra[2], rb[2];
  _mm_storeu_si128((__m128i *)ra, a);
  _mm_storeu_si128((__m128i *)rb, b);
  return chunks_total(ra[0] + ra[1], rb[0] + rb[1], m, c0);
}

__attribute__((target("avx2")))
static uint64_t chunks_sum_avx2(const uint8_t *p, int64_t m, uint64_t c0) {
  __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
  for (int64_t c = 0; c < m; c++, p += HS_SUM_CHUNK) {
    __m256i v = _mm256_setzero_si256();
    for (int i = 0; i < HS_SUM_CHUNK / 4; i += 8) {
      __m256i w = _mm256_loadu_si256((const __m256i *)(p + 4 * i));
      v = _mm256_add_epi64(
          v, _mm256_mul_epu32(w, _mm256_loadu_si256((const __m256i *)(SUM_EVEN + i / 2))));
      v = _mm256_add_epi64(v, _mm256_mul_epu32(_mm256_srli_epi64(w, 32),
                                               _mm256_loadu_si256((const __m256i *)(SUM_ODD + i / 2))));
    }
    for (int i = 0; i < HS_SUM_CHUNK / 8; i += 8) {
      __m256i x = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + 4 * i)),
                                   _mm256_loadu_si256((const __m256i *)(SUM_KEYS[0] + i)));
      __m256i y =
          _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + HS_SUM_CHUNK / 2 + 4 * i)),
                           _mm256_loadu_si256((const __m256i *)(SUM_KEYS[1] + i)));
      v = _mm256_add_epi64(v, _mm256_mul_epu32(x, y));
      v = _mm256_add_epi64(v, _mm256_mul_epu32(_mm256_srli_epi64(x, 32), _mm256_srli_epi64(y, 32)));
    }
    a = _mm256_add_epi64(a, v);
    b = _mm256_add_epi64(b, a);
  }
  uint64_t ra[4], rb[4];
  _mm256_storeu_si256((__m256i *)ra, a);
  _mm256_storeu_si256((__m256i *)rb, b);
  return chunks_total((ra[0] + ra[1]) + (ra[2] + ra[3]), (rb[0] + rb[1]) + (rb[2] + rb[3]), m, c0);
}
#elif defined(HS_NEON)
static uint64_t chunks_sum_neon(const uint8_t *p, int64_t m, uint64_t c0) {
  uint64x2_t a = vdupq_n_u64(0), b = vdupq_n_u64(0);
  for (int64_t c = 0; c < m; c++, p += HS_SUM_CHUNK) {
    uint64x2_t v = vdupq_n_u64(0);
    for (int i = 0; i < HS_SUM_CHUNK / 4; i += 4) {
      uint32x4_t w = vreinterpretq_u32_u8(vld1q_u8(p + 4 * i)), x = vld1q_u32(SUM_WEIGHTS + i);
      v = vmlal_u32(v, vget_low_u32(w), vget_low_u32(x));
      v = vmlal_u32(v, vget_high_u32(w), vget_high_u32(x));
    }
    for (int i = 0; i < HS_SUM_CHUNK / 8; i += 4) {
      uint32x4_t x = veorq_u32(vreinterpretq_u32_u8(vld1q_u8(p + 4 * i)), vld1q_u32(SUM_KEYS[0] + i));
      uint32x4_t y = veorq_u32(vreinterpretq_u32_u8(vld1q_u8(p + HS_SUM_CHUNK / 2 + 4 * i)),
                               vld1q_u32(SUM_KEYS[1] + i));
      v = vmlal_u32(v, vget_low_u32(x), vget_low_u32(y));
      v = vmlal_u32(v, vget_high_u32(x), vget_high_u32(y));
    }
    a = vaddq_u64(a, v);
    b = vaddq_u64(b, a);
  }
  return chunks_total(vgetq_lane_u64(a, 0) + vgetq_lane_u64(a, 1),
                      vgetq_lane_u64(b, 0) + vgetq_lane_u64(b, 1), m, c0);
}
#endif

uint64_t codes_sum(const uint8_t *p, int64_t n, int64_t first) {
  uint64_t c = (uint64_t)(first / HS_SUM_CHUNK);
  int64_t m = n / HS_SUM_CHUNK, at = m * HS_SUM_CHUNK;
  dot2(); /* chooses chunks_fn with the other kernels */
  uint64_t sum = m ? chunks_fn(p, m, c) : 0;
  if (at < n) sum += chunk_sum(p + at, n - at) * (2 * (c + (uint64_t)m) + 1);
  return sum;
}

/* The checksum of a T_codes row of `n` zero bytes: a new block's. */
uint64_t zeros_sum(int64_t n) {
  uint8_t zero[16 * HS_SUM_CHUNK] = {0};
  uint64_t sum = 0;
  for (int64_t at = 0; at < n; at += (int64_t)sizeof(zero)) {
    int64_t part = n - at < (int64_t)sizeof(zero) ? n - at : (int64_t)sizeof(zero);
    sum += codes_sum(zero, part, at);
  }
  return sum;
}
