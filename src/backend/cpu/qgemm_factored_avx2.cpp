// AVX2 quantized matmul in the factored form (see qgemm_factored.h), for decode and verification.
//
// The AVX-512 kernel's scheme on 8 lanes. A block is 8 words of codes, one 32-byte load per row: int8, 32 inputs
// (lane i of vector j = byte j of word i, input 4i + j, j = 0..3); int4, 64 inputs (lane i of vector j = nibble j
// of word i, input 8i + j, j = 0..7). Per vector of 8 codes an AND leaves each code in place (q·2^p), a convert
// and one FMA with the activation prepared as x·2^-p (exactly x·q); the last vector of a block takes its codes with
// a logical shift instead (q itself, p = 0), because AVX2 converts signed words only and the top code in place
// could set the sign bit. The products of a block meet its group's scale in one FMA per row; the biases meet the
// group sums of the activations, 8 groups per FMA. The per-weight form this replaces did a widening load, a
// convert, a dequantizing FMA and an FMA per 8 weights (int4: a shift or an AND more).
//
// A row's sum depends only on its codes and the token's activations, in an order fixed by K and the group size:
// the same for any number of tokens below kFactoredMaxT, any row split and any tile shape, so a decode step equals
// the same token's row of a verification bit for bit.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backend/cpu/hsum_avx2.h"
#include "backend/cpu/qgemm_factored.h"

#pragma GCC target("avx2,fma")

namespace vatic::cpu {

namespace {

constexpr int kLanes = 8;
constexpr int block_inputs(int bits) { return bits == 8 ? 32 : 64; }
constexpr int block_vectors(int bits) { return bits == 8 ? 4 : 8; }

// Per position p = 8j + i of a prepared block: the input it holds and the power of two that undoes its code's
// position in the word.
struct Avx2Order {
  int32_t input[64];
  float scale[64];
  explicit constexpr Avx2Order(int bits) : input{}, scale{} {
    const int nv = block_vectors(bits);
    for (int j = 0; j < nv; j++)
      for (int i = 0; i < kLanes; i++) {
        input[kLanes * j + i] = bits == 8 ? 4 * i + j : 8 * i + j;
        const int p = j == nv - 1 ? 0 : bits * j;
        scale[kLanes * j + i] = 1.0f / static_cast<float>(1u << p);
      }
  }
};
constexpr Avx2Order kAvx2Order8(8), kAvx2Order4(4);

// 8 bf16 values (the first n; the rest 0) -> f32, never reading past the n values: whole words by a masked load,
// an odd last value blended in (a copy through memory would stall the vector load that reads it back).
constexpr int32_t kWordMask[8] = {-1, -1, -1, -1, 0, 0, 0, 0};
constexpr int16_t kLaneMask[16] = {0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0};
inline __m256 widen8(const uint16_t* p, int64_t n) {
  __m128i h;
  if (n == kLanes) {
    h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  } else {
    const __m128i words = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kWordMask + 4 - n / 2));
    h = _mm_maskload_epi32(reinterpret_cast<const int*>(p), words);
    if (n & 1) {
      const __m128i lane = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kLaneMask + 8 - n));  // lane n - 1
      h = _mm_blendv_epi8(h, _mm_set1_epi16(static_cast<int16_t>(p[n - 1])), lane);
    }
  }
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Codes of vector j of a block, as floats: q·2^p (AND in place) or, for the last vector, q (logical shift).
template <int BITS>
inline __m256 codes(__m256i w, int j) {
  constexpr int NV = block_vectors(BITS);
  if (j == NV - 1) return _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 32 - BITS));
  const int mask = ((1 << BITS) - 1) << (BITS * j);
  return _mm256_cvtepi32_ps(_mm256_and_si256(w, _mm256_set1_epi32(mask)));
}

// NR rows × TR tokens. SPLIT (int4 only): the group size is not a multiple of 64, so the two 32-input halves of a
// block (lanes 0-3 and 4-7) can belong to different groups.
template <int NR, int TR, int BITS, bool SPLIT>
void factored_tile(const QGemmArgs& A, const float* x, const uint8_t* q, const uint16_t* s, const uint16_t* b,
                   float* y, bool acc) {
  constexpr int B = block_inputs(BITS), NV = block_vectors(BITS);
  const int64_t K = A.K, ldx = A.ldx, ldq = A.ldq, lds = A.lds, group = A.group, G = K / group;
  __m256 a[NR][TR];
#pragma GCC unroll 8
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
    for (int t = 0; t < TR; t++) a[r][t] = _mm256_setzero_ps();
  alignas(32) float sf[NR][kLanes];
  for (int64_t gb = 0; gb < G; gb += kLanes) {
    const int64_t ng = std::min<int64_t>(kLanes, G - gb);
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
      _mm256_store_ps(sf[r], widen8(s + r * lds + gb, ng));
      const __m256 bv = widen8(b + r * lds + gb, ng);
#pragma GCC unroll 8
      for (int t = 0; t < TR; t++) a[r][t] = _mm256_fmadd_ps(bv, _mm256_loadu_ps(x + t * ldx + K + gb), a[r][t]);
    }
    const int64_t k1 = (gb + ng) * group;
    int64_t g0 = 0, left = group;  // without SPLIT: the group of block k (relative to gb), its inputs from k on
    for (int64_t k = gb * group; k < k1; k += B) {
      __m256i wd[NR];
#pragma GCC unroll 8
      for (int r = 0; r < NR; r++) {
        const uint8_t* p = q + r * ldq + k * BITS / 8;
        wd[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        // The same inputs of the next tile's rows, into L2 only (prefetcht1), as on AVX-512: a matrix read from
        // memory streams 1.3-1.9x faster than with prefetcht0.
        if constexpr (TR <= 2) __builtin_prefetch(p + NR * ldq, 0, 2);
      }
      __m256 pr[NR][TR];
#pragma GCC unroll 8
      for (int j = 0; j < NV; j++) {
        __m256 xv[TR];
#pragma GCC unroll 8
        for (int t = 0; t < TR; t++) xv[t] = _mm256_loadu_ps(x + t * ldx + k + kLanes * j);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
          const __m256 qf = codes<BITS>(wd[r], j);
#pragma GCC unroll 8
          for (int t = 0; t < TR; t++)
            pr[r][t] = j == 0 ? _mm256_mul_ps(qf, xv[t]) : _mm256_fmadd_ps(qf, xv[t], pr[r][t]);
        }
      }
      int64_t g1 = g0;
      if constexpr (SPLIT) {
        g0 = k / group - gb;
        g1 = (k + 32) / group - gb;
      }
#pragma GCC unroll 8
      for (int r = 0; r < NR; r++) {
        __m256 sv = _mm256_set1_ps(sf[r][g0]);
        if constexpr (SPLIT) sv = _mm256_blend_ps(sv, _mm256_set1_ps(sf[r][g1]), 0xF0);
#pragma GCC unroll 8
        for (int t = 0; t < TR; t++) a[r][t] = _mm256_fmadd_ps(pr[r][t], sv, a[r][t]);
      }
      if constexpr (!SPLIT) {
        left -= B;
        if (left == 0) {
          g0++;
          left = group;
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < TR; t++)
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
      const float v = hsum_avx2(a[r][t]);
      float& o = y[t * A.ldy + r];
      o = acc ? o + v : v;
    }
}

// Rows in tiles of NR (then one at a time); tokens one at a time for decode, in pairs for verification (two rows
// per tile then, as sixteen registers allow).
template <int NR, int TR, int BITS, bool SPLIT>
void factored_rows(const QGemmArgs& a, int64_t t, int64_t n0, int64_t n1) {
  auto rows = [&](auto nr, int64_t n) {
    constexpr int R = decltype(nr)::value;
    factored_tile<R, TR, BITS, SPLIT>(a, a.x + t * a.ldx, a.q + n * a.ldq, a.scales + n * a.lds,
                                      a.biases + n * a.lds, a.y + t * a.ldy + n, a.accumulate);
  };
  int64_t n = n0;
  for (; n + NR <= n1; n += NR) rows(std::integral_constant<int, NR>{}, n);
  for (; n < n1; n++) rows(std::integral_constant<int, 1>{}, n);
}

template <int BITS, bool SPLIT>
void factored_all(const QGemmArgs& a, int64_t n0, int64_t n1) {
  if (a.T == 1) return factored_rows<4, 1, BITS, SPLIT>(a, 0, n0, n1);
  int64_t t = 0;
  for (; t + 2 <= a.T; t += 2) factored_rows<2, 2, BITS, SPLIT>(a, t, n0, n1);
  if (t < a.T) factored_rows<2, 1, BITS, SPLIT>(a, t, n0, n1);
}

}  // namespace

void factored_x_avx2(const float* x, int64_t ldx, int64_t T, int64_t K, int bits, int group, float* out) {
  const int64_t L = factored_width(K, group), G = K / group, B = block_inputs(bits);
  const Avx2Order& ord = bits == 8 ? kAvx2Order8 : kAvx2Order4;
  for (int64_t t = 0; t < T; t++) {
    const float* xr = x + t * ldx;
    float* o = out + t * L;
    for (int64_t b = 0; b < K; b += B)
      for (int64_t p = 0; p < B; p++) o[b + p] = xr[b + ord.input[p]] * ord.scale[p];
    // Group sums: 8 lanes per step, then the lanes.
    for (int64_t g = 0; g < G; g++) {
      __m256 s = _mm256_setzero_ps();
      for (int64_t k = g * group; k < (g + 1) * group; k += kLanes) s = _mm256_add_ps(s, _mm256_loadu_ps(xr + k));
      o[K + g] = hsum_avx2(s);
    }
    for (int64_t g = K + G; g < L; g++) o[g] = 0.0f;
  }
}

void qgemm_factored_avx2(const QGemmArgs& a, int64_t n0, int64_t n1) {
  if (a.bits == 4) {
    if (a.group % 64 != 0)
      factored_all<4, true>(a, n0, n1);
    else
      factored_all<4, false>(a, n0, n1);
  } else {
    factored_all<8, false>(a, n0, n1);
  }
}

}  // namespace vatic::cpu
