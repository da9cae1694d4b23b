// AVX-512 instantiation of the tiled matmul kernels (16 lanes, 32 registers: 4 rows × 6 tokens per dense tile,
// 4 × 4 per quantized tile, whose scales and biases take 8 more registers).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backend/cpu/qgemm_factored.h"
#include "backend/cpu/decode_avx512.h"
#include "backend/cpu/simd.h"

// GCC 12 reports false "uninitialized" warnings inside its own AVX-512 reduction intrinsics.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,fma")

#include "backend/cpu/transpose_avx512.h"  // after the target: its inline functions use AVX-512

namespace vatic::cpu {
namespace {

struct V {
  using vec = __m512;
  static constexpr int W = 16, NR = 4, TR_DENSE = 6, TR_QUANT = 4, TR_ROW = 5;
  static constexpr int PC = 2, PT = 12;
  static vec zero() { return _mm512_setzero_ps(); }
  static vec set1(float f) { return _mm512_set1_ps(f); }
  static vec loadx(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, vec v) { _mm512_storeu_ps(p, v); }
  static vec load_w(const float* p) { return _mm512_loadu_ps(p); }
  static vec load_w(const uint16_t* p) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static vec add(vec a, vec b) { return _mm512_add_ps(a, b); }
  static vec fma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
  // 2W floats -> the even ones at out, the odd ones at out + W.
  static void deinterleave(const float* p, float* out) {
    const __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16);
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    _mm512_storeu_ps(out, _mm512_permutex2var_ps(a, ie, b));
    _mm512_storeu_ps(out + 16, _mm512_permutex2var_ps(a, io, b));
  }
  // 2W bf16 values in one load: the even ones (low halves of the 32-bit words) and the odd ones.
  static void load_w2(const uint16_t* p, vec& even, vec& odd) {
    __m512i d = _mm512_loadu_si512(p);
    // Into a register once: GCC otherwise folds the load into both the shift and the AND, two loads of the same
    // 64 bytes, and with the activation loads a bf16 decode row was bound by the load ports (a 768 × 256 matrix from
    // L2: 9.5 µs, 6.8 with one load).
    asm("" : "+v"(d));
    even = _mm512_castsi512_ps(_mm512_slli_epi32(d, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(d, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  // 2W bf16 values as W 32-bit words (a pair each), and a vector of such words split into the even values (low
  // halves) and the odd ones.
  static vec load_pairs(const uint16_t* p) { return _mm512_castsi512_ps(_mm512_loadu_si512(p)); }
  static void split_pairs(vec v, vec& even, vec& odd) {
    const __m512i d = _mm512_castps_si512(v);
    even = _mm512_castsi512_ps(_mm512_slli_epi32(d, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(d, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  // W 32-bit words of codes as a vector, and the codes (w >> shift) & mask of such a vector as floats.
  static vec load_words(const uint8_t* p) { return _mm512_castsi512_ps(_mm512_loadu_si512(p)); }
  static vec code(vec w, int shift, uint32_t mask) {
    const __m512i c = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(w), static_cast<unsigned>(shift)),
                                       _mm512_set1_epi32(static_cast<int>(mask)));
    return _mm512_cvtepi32_ps(c);
  }
  static float reduce(vec v) { return _mm512_reduce_add_ps(v); }
  static void reduce4(vec a, vec b, vec c, vec d, float* out) { _mm_storeu_ps(out, cpu::reduce4(a, b, c, d)); }

  // 16 × 16 (transpose_avx512.h).
  static void transpose(vec* r) {
    __m512i v[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) v[i] = _mm512_castps_si512(r[i]);
    transpose16(v);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = _mm512_castsi512_ps(v[i]);
  }
  static __m512i bytes(const uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static vec q8(const uint8_t* p) { return _mm512_cvtepi32_ps(bytes(p)); }
  static vec q4lo(const uint8_t* p) { return _mm512_cvtepi32_ps(_mm512_and_si512(bytes(p), _mm512_set1_epi32(15))); }
  static vec q4hi(const uint8_t* p) { return _mm512_cvtepi32_ps(_mm512_srli_epi32(bytes(p), 4)); }
  // int4 by table: vpermps reads only the low 4 bits of each index lane, so the high nibble needs a shift and
  // the low one no mask. lut4 computes exactly the fma(q, s, b) that q4lo / q4hi + fma would.
  static constexpr bool LUT4 = true;
  static vec lut4(vec s, vec b) {
    return _mm512_fmadd_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), s, b);
  }
  static vec q4lo_lut(const uint8_t* p, vec lut) { return _mm512_permutexvar_ps(bytes(p), lut); }
  static vec q4hi_lut(const uint8_t* p, vec lut) {
    return _mm512_permutexvar_ps(_mm512_srli_epi32(bytes(p), 4), lut);
  }
};

#include "backend/cpu/gemm_impl.h"

// Decode and verification in the factored form (qgemm_factored.h); prefill and odd widths as on the other paths.
void qgemm_avx512(const QGemmArgs& a, int64_t n0, int64_t n1) {
  if (factored_layout(a.T, a.K)) return qgemm_factored_avx512(a, n0, n1);
  qgemm(a, n0, n1);
}

int64_t qgemm_x_avx512(const float* x, int64_t ldx, int64_t T, int64_t K, int bits, int group,
                       std::vector<float>& out) {
  if (!factored_layout(T, K)) return qgemm_x_permuted(x, ldx, T, K, bits, group, out);
  const int64_t L = factored_width(K, group);
  out.resize(static_cast<size_t>(T * L));
  factored_x(x, ldx, T, K, bits, group, out.data());
  return L;
}

// With VNNI: int4 decode and verification as integer dot products of codes and activation digits
// (qgemm_digits_avx512.cpp); everything else as above.
void qgemm_avx512_vnni(const QGemmArgs& a, int64_t n0, int64_t n1) {
  if (digits_layout(a.T, a.K, a.bits, a.group)) return qgemm_digits_avx512(a, n0, n1);
  qgemm_avx512(a, n0, n1);
}

int64_t qgemm_x_avx512_vnni(const float* x, int64_t ldx, int64_t T, int64_t K, int bits, int group,
                            std::vector<float>& out) {
  if (!digits_layout(T, K, bits, group)) return qgemm_x_avx512(x, ldx, T, K, bits, group, out);
  const int64_t L = digits_width(K, group);
  out.resize(static_cast<size_t>(T * L));
  digits_x(x, ldx, T, K, group, out.data());
  return L;
}

}  // namespace

void fill_gemm_avx512_vnni(Kernels& k) {
  fill_gemm_avx512(k);
  k.qgemm = qgemm_avx512_vnni;
  k.qgemm_x = qgemm_x_avx512_vnni;
}

void fill_gemm_avx512(Kernels& k) {
  k.gemm_bf16 = gemm_bf16;
  k.gemm_f32 = gemm_f32;
  k.qgemm = qgemm_avx512;
  k.qgemm_x = qgemm_x_avx512;
}

}  // namespace vatic::cpu
