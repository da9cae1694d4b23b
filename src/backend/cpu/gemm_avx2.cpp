// AVX2 + FMA instantiation of the tiled matmul kernels (8 lanes, 16 registers: 4 rows × 2 tokens per tile).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backend/cpu/hsum_avx2.h"
#include "backend/cpu/qgemm_factored.h"
#include "backend/cpu/simd.h"

#pragma GCC target("avx2,fma")

namespace vatic::cpu {
namespace {

struct V {
  using vec = __m256;
  static constexpr int W = 8, NR = 4, TR_DENSE = 2, TR_QUANT = 2, TR_ROW = 2;
  static constexpr int PC = 2, PT = 6;
  static vec zero() { return _mm256_setzero_ps(); }
  static vec set1(float f) { return _mm256_set1_ps(f); }
  static vec loadx(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, vec v) { _mm256_storeu_ps(p, v); }
  static vec load_w(const float* p) { return _mm256_loadu_ps(p); }
  static vec load_w(const uint16_t* p) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static vec add(vec a, vec b) { return _mm256_add_ps(a, b); }
  static vec fma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
  // 2W floats -> the even ones at out, the odd ones at out + W.
  static void deinterleave(const float* p, float* out) {
    const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    const __m256 e = _mm256_shuffle_ps(a, b, 0x88), o = _mm256_shuffle_ps(a, b, 0xDD);  // per 128-bit half
    _mm256_storeu_ps(out, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8)));
    _mm256_storeu_ps(out + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xD8)));
  }
  // 2W bf16 values in one load: the even ones (low halves of the 32-bit words) and the odd ones.
  static void load_w2(const uint16_t* p, vec& even, vec& odd) {
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    asm("" : "+x"(d));  // one load into a register, not one folded into each of the two uses (gemm_avx512.cpp)
    even = _mm256_castsi256_ps(_mm256_slli_epi32(d, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(d, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  // 2W bf16 values as W 32-bit words (a pair each), and a vector of such words split into the even values (low
  // halves) and the odd ones.
  static vec load_pairs(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void split_pairs(vec v, vec& even, vec& odd) {
    const __m256i d = _mm256_castps_si256(v);
    even = _mm256_castsi256_ps(_mm256_slli_epi32(d, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(d, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  // W 32-bit words of codes as a vector, and the codes (w >> shift) & mask of such a vector as floats.
  static vec load_words(const uint8_t* p) {
    return _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static vec code(vec w, int shift, uint32_t mask) {
    const __m256i c = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(w), shift),
                                       _mm256_set1_epi32(static_cast<int>(mask)));
    return _mm256_cvtepi32_ps(c);
  }
  static float reduce(vec v) { return hsum_avx2(v); }
  static void reduce4(vec a, vec b, vec c, vec d, float* out) {
    out[0] = reduce(a), out[1] = reduce(b), out[2] = reduce(c), out[3] = reduce(d);
  }
  static void transpose(vec* r) {  // 8 × 8: unpack pairs, then 64-bit pairs, then 128-bit halves
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
      u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
      u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
      u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
      r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
      r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
  }
  static __m256i bytes(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static vec q8(const uint8_t* p) { return _mm256_cvtepi32_ps(bytes(p)); }
  static vec q4lo(const uint8_t* p) { return _mm256_cvtepi32_ps(_mm256_and_si256(bytes(p), _mm256_set1_epi32(15))); }
  static vec q4hi(const uint8_t* p) { return _mm256_cvtepi32_ps(_mm256_srli_epi32(bytes(p), 4)); }
  static constexpr bool LUT4 = false;
  static vec lut4(vec s, vec) { return s; }
  static vec q4lo_lut(const uint8_t* p, vec) { return q4lo(p); }
  static vec q4hi_lut(const uint8_t* p, vec) { return q4hi(p); }
};

#include "backend/cpu/gemm_impl.h"

// Decode and verification in the factored form (qgemm_factored.h); prefill and odd widths as on the other paths.
void qgemm_avx2(const QGemmArgs& a, int64_t n0, int64_t n1) {
  if (factored_layout(a.T, a.K)) return qgemm_factored_avx2(a, n0, n1);
  qgemm(a, n0, n1);
}

int64_t qgemm_x_avx2(const float* x, int64_t ldx, int64_t T, int64_t K, int bits, int group,
                     std::vector<float>& out) {
  if (!factored_layout(T, K)) return qgemm_x_permuted(x, ldx, T, K, bits, group, out);
  const int64_t L = factored_width(K, group);
  out.resize(static_cast<size_t>(T * L));
  factored_x_avx2(x, ldx, T, K, bits, group, out.data());
  return L;
}

}  // namespace

void fill_gemm_avx2(Kernels& k) {
  k.gemm_bf16 = gemm_bf16;
  k.gemm_f32 = gemm_f32;
  k.qgemm = qgemm_avx2;
  k.qgemm_x = qgemm_x_avx2;
}

}  // namespace vatic::cpu
