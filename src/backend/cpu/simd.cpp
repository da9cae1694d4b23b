#include "backend/cpu/simd.h"

#include "backend/cpu/decode_avx512.h"
#include "backend/cpu/hsum_avx2.h"
#include "backend/cpu/parallel.h"

// GCC 12 reports false "uninitialized" warnings inside its own AVX-512 reduction intrinsics.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace vatic::cpu {
namespace {

// ---- portable fallbacks ----
float dot_f32_generic(const float* x, const float* w, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i] * w[i];
  return s;
}
inline float bf(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
float dot_bf16_generic(const float* x, const uint16_t* w, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i] * bf(w[i]);
  return s;
}
void dot4_bf16_generic(const float* x, int64_t ldx, const uint16_t* w, int64_t n, float* y) {
  for (int r = 0; r < 4; r++) y[r] = dot_bf16_generic(x + r * ldx, w, n);
}
void dot4_f32_generic(const float* x, int64_t ldx, const float* w, int64_t n, float* y) {
  for (int r = 0; r < 4; r++) y[r] = dot_f32_generic(x + r * ldx, w, n);
}
void axpy_generic(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}
// One row of permute_int4_activations (the AVX2 table uses it too).
void permute_int4_row_generic(const float* xr, int64_t K, float* o) {
  for (int64_t c = 0; c + 32 <= K; c += 32)
    for (int j = 0; j < 16; j++) {
      o[c + j] = xr[c + 2 * j];
      o[c + 16 + j] = xr[c + 2 * j + 1];
    }
}

// Decode attention over the visible keys of a KV head, for the nq query heads that share it: scores
// out[h·ldo + j] = Σ_i q[h·ldq + i] · rows[j][i].
void dot_rows_generic(const float* q, int64_t ldq, int64_t nq, const float* const* rows, int64_t n, int64_t d,
                      float* out, int64_t ldo) {
  for (int64_t h = 0; h < nq; h++)
    for (int64_t j = 0; j < n; j++) out[h * ldo + j] = dot_f32_generic(q + h * ldq, rows[j], d);
}
// The weighted sums of the values: out[h·ldo + i] = Σ_j p[h·ldp + j] · rows[j][i], summed in row order.
void axpy_rows_generic(const float* p, int64_t ldp, int64_t nq, const float* const* rows, int64_t n, int64_t d,
                       float* out, int64_t ldo) {
  for (int64_t h = 0; h < nq; h++) {
    float* o = out + h * ldo;
    for (int64_t i = 0; i < d; i++) o[i] = 0.0f;
    for (int64_t j = 0; j < n; j++) axpy_generic(p[h * ldp + j], rows[j], o, d);
  }
}

// ---- AVX2 + FMA ----
#define AVX2 __attribute__((target("avx2,fma")))
AVX2 inline __m256 load_bf16x8(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
AVX2 float dot_f32_avx2(const float* x, const float* w, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(w + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(w + i + 8), a1);
  }
  float s = hsum_avx2(_mm256_add_ps(a0, a1));
  for (; i < n; i++) s += x[i] * w[i];
  return s;
}
AVX2 float dot_bf16_avx2(const float* x, const uint16_t* w, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), load_bf16x8(w + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), load_bf16x8(w + i + 8), a1);
  }
  float s = hsum_avx2(_mm256_add_ps(a0, a1));
  for (; i < n; i++) s += x[i] * bf(w[i]);
  return s;
}
AVX2 void dot4_bf16_avx2(const float* x, int64_t ldx, const uint16_t* w, int64_t n, float* y) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 wv = load_bf16x8(w + i);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), wv, a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + ldx + i), wv, a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + 2 * ldx + i), wv, a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + 3 * ldx + i), wv, a3);
  }
  y[0] = hsum_avx2(a0);
  y[1] = hsum_avx2(a1);
  y[2] = hsum_avx2(a2);
  y[3] = hsum_avx2(a3);
  for (; i < n; i++) {
    float wv = bf(w[i]);
    for (int r = 0; r < 4; r++) y[r] += x[r * ldx + i] * wv;
  }
}
AVX2 void dot4_f32_avx2(const float* x, int64_t ldx, const float* w, int64_t n, float* y) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 wv = _mm256_loadu_ps(w + i);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), wv, a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + ldx + i), wv, a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + 2 * ldx + i), wv, a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + 3 * ldx + i), wv, a3);
  }
  y[0] = hsum_avx2(a0);
  y[1] = hsum_avx2(a1);
  y[2] = hsum_avx2(a2);
  y[3] = hsum_avx2(a3);
  for (; i < n; i++)
    for (int r = 0; r < 4; r++) y[r] += x[r * ldx + i] * w[i];
}
AVX2 void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += a * x[i];
}

// Blocks of H query heads × 8/H keys: one accumulator per (key, head) over the head dimension, each key row
// loaded once for all H heads, then the eight sums reduced together (two hadd levels and one lane swap) instead of
// one horizontal reduction per key and head.
template <int H>
AVX2 void dot_rows_avx2_h(const float* q, int64_t ldq, const float* const* rows, int64_t n, int64_t d, float* out,
                          int64_t ldo) {
  constexpr int KB = 8 / H;
  const int64_t dv = d / 8 * 8;
  for (int64_t j = 0; j < n; j += KB) {
    const int m = static_cast<int>(std::min<int64_t>(KB, n - j));
    const float* r[KB];
#pragma GCC unroll 16
    for (int k = 0; k < KB; k++) r[k] = rows[j + (k < m ? k : 0)];  // a short block repeats its first key
    __m256 a[8];
#pragma GCC unroll 16
    for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < dv; i += 8) {
      __m256 qv[H];
#pragma GCC unroll 16
      for (int h = 0; h < H; h++) qv[h] = _mm256_loadu_ps(q + h * ldq + i);
#pragma GCC unroll 16
      for (int k = 0; k < KB; k++) {
        const __m256 kv = _mm256_loadu_ps(r[k] + i);
#pragma GCC unroll 16
        for (int h = 0; h < H; h++) a[k * H + h] = _mm256_fmadd_ps(qv[h], kv, a[k * H + h]);
      }
    }
    const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    alignas(32) float s[8];
    _mm256_store_ps(s, _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31)));
    for (int k = 0; k < m; k++)
#pragma GCC unroll 16
      for (int h = 0; h < H; h++) {
        float v = s[k * H + h];
        for (int64_t i = dv; i < d; i++) v += q[h * ldq + i] * r[k][i];
        out[h * ldo + j + k] = v;
      }
  }
}
AVX2 void dot_rows_avx2(const float* q, int64_t ldq, int64_t nq, const float* const* rows, int64_t n, int64_t d,
                        float* out, int64_t ldo) {
  int64_t h = 0;
  for (; h + 4 <= nq; h += 4) dot_rows_avx2_h<4>(q + h * ldq, ldq, rows, n, d, out + h * ldo, ldo);
  for (; h + 2 <= nq; h += 2) dot_rows_avx2_h<2>(q + h * ldq, ldq, rows, n, d, out + h * ldo, ldo);
  for (; h < nq; h++) dot_rows_avx2_h<1>(q + h * ldq, ldq, rows, n, d, out + h * ldo, ldo);
}
// H heads × up to C vectors of outputs stay in registers across all rows, each value vector loaded once for the
// H heads; the sum runs in row order with one FMA per row and output, as one axpy per row does.
template <int H, int C>
AVX2 void axpy_rows_avx2_h(const float* p, int64_t ldp, const float* const* rows, int64_t n, int64_t d, float* out,
                           int64_t ldo) {
  int64_t i0 = 0;
  while (d - i0 >= 8) {
    const int nv = static_cast<int>(std::min<int64_t>(C, (d - i0) / 8));
    __m256 a[H][C];
#pragma GCC unroll 16
    for (int h = 0; h < H; h++)
#pragma GCC unroll 16
      for (int c = 0; c < C; c++) a[h][c] = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; j++) {
      __m256 pv[H];
#pragma GCC unroll 16
      for (int h = 0; h < H; h++) pv[h] = _mm256_set1_ps(p[h * ldp + j]);
      const float* r = rows[j] + i0;
#pragma GCC unroll 16
      for (int c = 0; c < C; c++) {
        if (c >= nv) break;
        const __m256 vv = _mm256_loadu_ps(r + 8 * c);
#pragma GCC unroll 16
        for (int h = 0; h < H; h++) a[h][c] = _mm256_fmadd_ps(pv[h], vv, a[h][c]);
      }
    }
#pragma GCC unroll 16
    for (int h = 0; h < H; h++)
#pragma GCC unroll 16
      for (int c = 0; c < C; c++)
        if (c < nv) _mm256_storeu_ps(out + h * ldo + i0 + 8 * c, a[h][c]);
    i0 += 8 * nv;
  }
#pragma GCC unroll 16
  for (int h = 0; h < H; h++)
    for (int64_t i = i0; i < d; i++) {
      float a = 0.0f;
      for (int64_t j = 0; j < n; j++) a += p[h * ldp + j] * rows[j][i];
      out[h * ldo + i] = a;
    }
}
AVX2 void axpy_rows_avx2(const float* p, int64_t ldp, int64_t nq, const float* const* rows, int64_t n, int64_t d,
                         float* out, int64_t ldo) {
  int64_t h = 0;
  for (; h + 4 <= nq; h += 4) axpy_rows_avx2_h<4, 2>(p + h * ldp, ldp, rows, n, d, out + h * ldo, ldo);
  for (; h + 2 <= nq; h += 2) axpy_rows_avx2_h<2, 4>(p + h * ldp, ldp, rows, n, d, out + h * ldo, ldo);
  for (; h < nq; h++) axpy_rows_avx2_h<1, 8>(p + h * ldp, ldp, rows, n, d, out + h * ldo, ldo);
}

// ---- AVX-512 ----
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
// One row of permute_int4_activations: per 32-input chunk the 16 even inputs, then the 16 odd ones, two permutes
// of two vectors instead of 32 scalar moves (the scalar loop was 2 % of a one-thread int4 prompt).
AVX512 void permute_int4_row_avx512(const float* xr, int64_t K, float* o) {
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t c = 0; c + 32 <= K; c += 32) {
    const __m512 a = _mm512_loadu_ps(xr + c), b = _mm512_loadu_ps(xr + c + 16);
    _mm512_storeu_ps(o + c, _mm512_permutex2var_ps(a, ie, b));
    _mm512_storeu_ps(o + c + 16, _mm512_permutex2var_ps(a, io, b));
  }
}
AVX512 inline __m512 load_bf16x16(const uint16_t* p) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
AVX512 float dot_f32_avx512(const float* x, const float* w, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(w + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(w + i + 16), a1);
  }
  for (; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, w + i), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}
AVX512 float dot_bf16_avx512(const float* x, const uint16_t* w, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), load_bf16x16(w + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), load_bf16x16(w + i + 16), a1);
    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), load_bf16x16(w + i + 32), a2);
    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), load_bf16x16(w + i + 48), a3);
  }
  for (; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), widen16(w + i, m), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}
AVX512 void dot4_bf16_avx512(const float* x, int64_t ldx, const uint16_t* w, int64_t n, float* y) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 wv = widen16(w + i, m);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), wv, a0);
    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + ldx + i), wv, a1);
    a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + 2 * ldx + i), wv, a2);
    a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + 3 * ldx + i), wv, a3);
  }
  y[0] = _mm512_reduce_add_ps(a0);
  y[1] = _mm512_reduce_add_ps(a1);
  y[2] = _mm512_reduce_add_ps(a2);
  y[3] = _mm512_reduce_add_ps(a3);
}
AVX512 void dot4_f32_avx512(const float* x, int64_t ldx, const float* w, int64_t n, float* y) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 wv = _mm512_maskz_loadu_ps(m, w + i);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), wv, a0);
    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + ldx + i), wv, a1);
    a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + 2 * ldx + i), wv, a2);
    a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + 3 * ldx + i), wv, a3);
  }
  y[0] = _mm512_reduce_add_ps(a0);
  y[1] = _mm512_reduce_add_ps(a1);
  y[2] = _mm512_reduce_add_ps(a2);
  y[3] = _mm512_reduce_add_ps(a3);
}
AVX512 void axpy_avx512(float a, const float* x, float* y, int64_t n) {
  __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

// Sixteen keys at a time: one accumulator per key over the head dimension, then the sixteen sums reduced
// together (about three shuffles and adds per key) instead of one horizontal reduction per key.
AVX512 inline __m512 sum16(const __m512* a) {
  __m512 t[4];
#pragma GCC unroll 16
  for (int g = 0; g < 4; g++) {
    const __m512* b = a + 4 * g;
    // Per 128-bit block: [b0 b1 b2 b3] sums over that block's four lanes.
    const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(b[0], b[1]), _mm512_unpackhi_ps(b[0], b[1]));
    const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(b[2], b[3]), _mm512_unpackhi_ps(b[2], b[3]));
    t[g] = _mm512_add_ps(_mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Then the four blocks of each t[g] into block g of the result.
  const __m512 v01 = _mm512_add_ps(_mm512_shuffle_f32x4(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 v23 = _mm512_add_ps(_mm512_shuffle_f32x4(t[2], t[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(t[2], t[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(v01, v23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(v01, v23, _MM_SHUFFLE(3, 1, 3, 1)));
}
// Blocks of H query heads × 16/H keys: one accumulator per (key, head) over the head dimension, each key row
// loaded once for all H heads, then the sixteen sums reduced together.
template <int H>
AVX512 void dot_rows_avx512_h(const float* q, int64_t ldq, const float* const* rows, int64_t n, int64_t d,
                              float* out, int64_t ldo) {
  constexpr int KB = 16 / H;
  for (int64_t j = 0; j < n; j += KB) {
    const int m = static_cast<int>(std::min<int64_t>(KB, n - j));
    const float* r[KB];
#pragma GCC unroll 16
    for (int k = 0; k < KB; k++) r[k] = rows[j + (k < m ? k : 0)];  // a short block repeats its first key
    __m512 a[16];
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) a[k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 16) {
      const __mmask16 mk = d - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (d - i)) - 1);
      __m512 qv[H];
#pragma GCC unroll 16
      for (int h = 0; h < H; h++) qv[h] = _mm512_maskz_loadu_ps(mk, q + h * ldq + i);
#pragma GCC unroll 16
      for (int k = 0; k < KB; k++) {
        const __m512 kv = _mm512_maskz_loadu_ps(mk, r[k] + i);
#pragma GCC unroll 16
        for (int h = 0; h < H; h++) a[k * H + h] = _mm512_fmadd_ps(qv[h], kv, a[k * H + h]);
      }
    }
    alignas(64) float s[16];
    _mm512_store_ps(s, sum16(a));
    for (int k = 0; k < m; k++)
#pragma GCC unroll 16
      for (int h = 0; h < H; h++) out[h * ldo + j + k] = s[k * H + h];
  }
}
// Keys in chunks of kKeyChunk (a multiple of 16, so each key keeps its slot in the kernels' blocks of 16 / H and
// its score its bits): every group of heads scores a chunk while its rows are in L1, so a key row comes from
// memory once for all the heads rather than once per group of four.
constexpr int64_t kKeyChunk = 16;
AVX512 void dot_rows_avx512(const float* q, int64_t ldq, int64_t nq, const float* const* rows, int64_t n, int64_t d,
                            float* out, int64_t ldo) {
  for (int64_t j0 = 0; j0 < n; j0 += kKeyChunk) {
    const int64_t m = std::min(kKeyChunk, n - j0);
    const float* const* r = rows + j0;
    float* o = out + j0;
    int64_t h = 0;
    for (; h + 4 <= nq; h += 4) dot_rows_avx512_h<4>(q + h * ldq, ldq, r, m, d, o + h * ldo, ldo);
    for (; h + 2 <= nq; h += 2) dot_rows_avx512_h<2>(q + h * ldq, ldq, r, m, d, o + h * ldo, ldo);
    for (; h < nq; h++) dot_rows_avx512_h<1>(q + h * ldq, ldq, r, m, d, o + h * ldo, ldo);
  }
}
// H heads × up to C vectors of outputs stay in registers across all rows, each value vector loaded once for the
// H heads; the sum runs in row order with one FMA per row and output, as one axpy per row does.
// With `acc` the sums go on from the values in out (a chunk of rows after the first): storing and reloading an f32
// sum changes nothing, so a column's FMAs are the same whatever the chunks.
template <int H, int C>
AVX512 void axpy_rows_avx512_h(const float* p, int64_t ldp, const float* const* rows, int64_t n, int64_t d,
                               float* out, int64_t ldo, bool acc) {
  for (int64_t i0 = 0; i0 < d; i0 += 16 * C) {
    const int64_t w = std::min<int64_t>(16 * C, d - i0);
    const int nv = static_cast<int>((w + 15) / 16);
    const __mmask16 last = w % 16 ? static_cast<__mmask16>((1u << (w % 16)) - 1) : 0xffff;
    __m512 a[H][C];
#pragma GCC unroll 16
    for (int h = 0; h < H; h++)
#pragma GCC unroll 16
      for (int c = 0; c < C; c++)
        a[h][c] = acc && c < nv ? _mm512_maskz_loadu_ps(c == nv - 1 ? last : 0xffff, out + h * ldo + i0 + 16 * c)
                                : _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j++) {
      __m512 pv[H];
#pragma GCC unroll 16
      for (int h = 0; h < H; h++) pv[h] = _mm512_set1_ps(p[h * ldp + j]);
      const float* r = rows[j] + i0;
#pragma GCC unroll 16
      for (int c = 0; c < C; c++) {
        if (c >= nv) break;
        const __m512 vv = _mm512_maskz_loadu_ps(c == nv - 1 ? last : 0xffff, r + 16 * c);
#pragma GCC unroll 16
        for (int h = 0; h < H; h++) a[h][c] = _mm512_fmadd_ps(pv[h], vv, a[h][c]);
      }
    }
#pragma GCC unroll 16
    for (int h = 0; h < H; h++)
#pragma GCC unroll 16
      for (int c = 0; c < C; c++)
        if (c < nv) _mm512_mask_storeu_ps(out + h * ldo + i0 + 16 * c, c == nv - 1 ? last : 0xffff, a[h][c]);
  }
}
// Value rows in chunks of kValueChunk (128 KB of rows of 512 floats: L2): every group of heads and block of columns
// sums a chunk while its rows are in L2, so a value row comes from memory once rather than once per group of heads
// and block of 64 or 128 columns. The sums go on across the chunks (acc) in row order: the same bits.
constexpr int64_t kValueChunk = 64;
AVX512 void axpy_rows_avx512(const float* p, int64_t ldp, int64_t nq, const float* const* rows, int64_t n, int64_t d,
                             float* out, int64_t ldo) {
  for (int64_t j0 = 0; j0 < n || j0 == 0; j0 += kValueChunk) {
    const int64_t m = std::min(kValueChunk, n - j0);
    const float* const* r = rows + j0;
    const float* pc = p + j0;
    const bool acc = j0 > 0;
    int64_t h = 0;
    for (; h + 4 <= nq; h += 4) axpy_rows_avx512_h<4, 4>(pc + h * ldp, ldp, r, m, d, out + h * ldo, ldo, acc);
    for (; h + 2 <= nq; h += 2) axpy_rows_avx512_h<2, 8>(pc + h * ldp, ldp, r, m, d, out + h * ldo, ldo, acc);
    for (; h < nq; h++) axpy_rows_avx512_h<1, 8>(pc + h * ldp, ldp, r, m, d, out + h * ldo, ldo, acc);
    if (n == 0) break;
  }
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}
bool cpu_has_avx512_vnni() { return cpu_has_avx512() && __builtin_cpu_supports("avx512vnni"); }
bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

Kernels make(const std::string& isa) {
  Kernels k{};
  if (isa == "avx512" || isa == "avx512vnni" || isa == "amx") {
    k = {"avx512", dot_f32_avx512, dot_bf16_avx512, dot4_bf16_avx512, dot4_f32_avx512, axpy_avx512,
         nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, dot_rows_avx512, axpy_rows_avx512, qgemm_x_permuted,
         permute_int4_row_avx512, nullptr, nullptr, nullptr, nullptr};
    if (isa == "amx") {
      k.isa = "amx";
      fill_gemm_amx(k);
    } else if (isa == "avx512vnni") {
      k.isa = "avx512vnni";
      fill_gemm_avx512_vnni(k);
    } else {
      fill_gemm_avx512(k);
    }
    fill_vmath_avx512(k);
  } else if (isa == "avx2") {
    k = {"avx2", dot_f32_avx2, dot_bf16_avx2, dot4_bf16_avx2, dot4_f32_avx2, axpy_avx2, nullptr, nullptr, nullptr,
         nullptr, nullptr, nullptr, dot_rows_avx2, axpy_rows_avx2, qgemm_x_permuted,
         permute_int4_row_generic, nullptr, nullptr, nullptr, nullptr};
    fill_gemm_avx2(k);
    fill_vmath_avx2(k);
  } else {
    k = {"generic", dot_f32_generic, dot_bf16_generic, dot4_bf16_generic, dot4_f32_generic, axpy_generic,
         nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, dot_rows_generic, axpy_rows_generic, qgemm_x_permuted,
         permute_int4_row_generic, nullptr, nullptr, nullptr, nullptr};
    fill_gemm_generic(k);
    fill_vmath_generic(k);
  }
  return k;
}

bool supported(const std::string& isa) {
  if (isa == "generic") return true;
  if (isa == "avx2") return cpu_has_avx2();
  if (isa == "avx512") return cpu_has_avx512();
  if (isa == "avx512vnni") return cpu_has_avx512_vnni();
  if (isa == "amx") return cpu_has_avx512_vnni() && cpu_has_amx();
  return false;
}

// One table per ISA, built once; `current` points at the active one.
const Kernels* table(const std::string& isa) {
  static const Kernels g = make("generic");
  static const Kernels a2 = supported("avx2") ? make("avx2") : g;
  static const Kernels a5 = supported("avx512") ? make("avx512") : a2;
  static const Kernels a5v = supported("avx512vnni") ? make("avx512vnni") : a5;
  static const Kernels amx = supported("amx") ? make("amx") : a5v;
  if (isa == "amx") return &amx;
  if (isa == "avx512vnni") return &a5v;
  if (isa == "avx512") return &a5;
  if (isa == "avx2") return &a2;
  return &g;
}

std::atomic<const Kernels*>& current() {
  static std::atomic<const Kernels*> k{[] {
    std::string best = supported("amx")          ? "amx"
                       : cpu_has_avx512_vnni() ? "avx512vnni"
                       : cpu_has_avx512()    ? "avx512"
                       : cpu_has_avx2()      ? "avx2"
                                             : "generic";
    if (const char* env = std::getenv("VATIC_CPU_ISA"); env && *env) {
      if (supported(env)) {
        best = env;
      } else {
        std::fprintf(stderr, "VATIC_CPU_ISA=%s is not supported here (available: generic%s%s%s%s); using %s\n",
                     env, cpu_has_avx2() ? ", avx2" : "", cpu_has_avx512() ? ", avx512" : "",
                     cpu_has_avx512_vnni() ? ", avx512vnni" : "", supported("amx") ? ", amx" : "", best.c_str());
      }
    }
    return table(best);
  }()};
  return k;
}

}  // namespace

const Kernels& kernels() { return *current().load(std::memory_order_acquire); }

std::vector<std::string> available_isas() {
  std::vector<std::string> out{"generic"};
  if (supported("avx2")) out.push_back("avx2");
  if (supported("avx512")) out.push_back("avx512");
  if (supported("avx512vnni")) out.push_back("avx512vnni");
  if (supported("amx")) out.push_back("amx");
  return out;
}

bool set_isa(const std::string& name) {
  if (!supported(name)) return false;
  current().store(table(name), std::memory_order_release);
  return true;
}

namespace {

// AMD family 0x19 (Zen 3 and Zen 4; only Zen 4 has the AVX-512 paths that read several streams).
bool cpu_is_amd_family_19h() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "AuthenticAMD"
  if (!amd || !__get_cpuid(1, &a, &b, &c, &d)) return false;
  const unsigned family = ((a >> 8) & 0xF) + (((a >> 8) & 0xF) == 0xF ? (a >> 20) & 0xFF : 0);
  return family == 0x19;
#else
  return false;
#endif
}

std::atomic<int>& decode_stream_count() {
  static std::atomic<int> n{[] {
    int best = cpu_is_amd_family_19h() ? 2 : 4;
    if (const char* env = std::getenv("VATIC_CPU_DECODE_STREAMS"); env && *env) {
      if (std::string(env) == "2" || std::string(env) == "4")
        best = env[0] - '0';
      else
        std::fprintf(stderr, "VATIC_CPU_DECODE_STREAMS=%s is not 2 or 4; using %d\n", env, best);
    }
    return best;
  }()};
  return n;
}

}  // namespace

int decode_streams() { return decode_stream_count().load(std::memory_order_relaxed); }

bool set_decode_streams(int n) {
  if (n != 2 && n != 4) return false;
  decode_stream_count().store(n, std::memory_order_relaxed);
  return true;
}

void permute_int4_activations(const float* x, int64_t ldx, int64_t T, int64_t K, float* out) {
  // A prompt's rows in parallel (it runs before the matmul's own parallel region; 3.5 % of a two-thread int4
  // prefill when one thread did it).
  const auto row = kernels().permute_int4_row;
  parallel_for(T, T * K >= (int64_t{1} << 14), [&](int64_t t) {
    const float* xr = x + t * ldx;
    float* o = out + t * K;
    row(xr, K, o);
  });
}

int64_t qgemm_x_permuted(const float* x, int64_t ldx, int64_t T, int64_t K, int bits, int,
                         std::vector<float>& out) {
  if (bits != 4 || T >= kPanelMinT) return 0;
  out.resize(static_cast<size_t>(T * K));
  permute_int4_activations(x, ldx, T, K, out.data());
  return K;
}

}  // namespace vatic::cpu
