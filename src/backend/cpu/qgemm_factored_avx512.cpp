// AVX-512 quantized matmul in the factored form (see qgemm_factored.h), for decode and verification.
//
// Per 64-input block and weight row: one load of the block's words (int8: 64 bytes; int4: 32 bytes, twice), and per
// vector of 16 codes an AND (the code in place, q·2^p), an unsigned convert and one FMA with the prepared
// activation x·2^-p, whose product is exactly x·q. The four products of a lane are summed in a partial that is
// scaled once per block (fma(partial, s, acc)); the biases meet the group sums of the activations, 16 groups per
// FMA. Against the per-weight form (convert, dequantizing FMA, FMA) this saves the dequantizing FMA and the
// byte-to-lane shuffles (int8) or the shuffles of the int4 table lookup, which bound the old kernels on this core.
//
// Every row's sum depends only on its own codes and the token's activations, in an order fixed by K and the group
// size: the same for any number of tokens below kFactoredMaxT and any split of the rows, so a decode step equals the
// same token's row of a verification bit for bit.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backend/cpu/qgemm_factored.h"
#include "backend/cpu/decode_avx512.h"

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,fma")

namespace vatic::cpu {

namespace {

// Per bits and vector j of a block: the source of each lane in the two-register permute of inputs [0, 32) or
// [32, 64) (index & 31), the lanes that take the second pair, and each lane's 2^-p.
struct FactoredOrder {
  int32_t index[4][16];
  uint16_t upper[4];
  float scale[4][16];
  explicit constexpr FactoredOrder(int bits) : index{}, upper{}, scale{} {
    for (int j = 0; j < 4; j++)
      for (int i = 0; i < 16; i++) {
        const int in = factored_input(bits, j, i);
        index[j][i] = in & 31;
        if (in >= 32) upper[j] = static_cast<uint16_t>(upper[j] | (1u << i));
        scale[j][i] = 1.0f / static_cast<float>(1u << factored_shift(bits, j, i));
      }
  }
};
constexpr FactoredOrder kOrder8(8), kOrder4(4);

}  // namespace

void factored_x(const float* x, int64_t ldx, int64_t T, int64_t K, int bits, int group, float* out) {
  const int64_t L = factored_width(K, group), G = K / group;
  const FactoredOrder& ord = bits == 8 ? kOrder8 : kOrder4;
  __m512i idx[4];
  __m512 scl[4];
  for (int j = 0; j < 4; j++) {
    idx[j] = _mm512_loadu_si512(ord.index[j]);
    scl[j] = _mm512_loadu_ps(ord.scale[j]);
  }
  for (int64_t t = 0; t < T; t++) {
    const float* xr = x + t * ldx;
    float* o = out + t * L;
    for (int64_t b = 0; b < K; b += kFactoredBlock) {
      const __m512 x0 = _mm512_loadu_ps(xr + b), x1 = _mm512_loadu_ps(xr + b + 16);
      const __m512 x2 = _mm512_loadu_ps(xr + b + 32), x3 = _mm512_loadu_ps(xr + b + 48);
      for (int j = 0; j < 4; j++) {
        const __m512 lo = _mm512_permutex2var_ps(x0, idx[j], x1), hi = _mm512_permutex2var_ps(x2, idx[j], x3);
        _mm512_storeu_ps(o + b + 16 * j, _mm512_mul_ps(_mm512_mask_blend_ps(ord.upper[j], lo, hi), scl[j]));
      }
    }
    // Group sums: 16 lanes per step, then the lanes.
    for (int64_t g = 0; g < G; g++) {
      __m512 s = _mm512_setzero_ps();
      for (int64_t k = g * group; k < (g + 1) * group; k += 16) s = _mm512_add_ps(s, _mm512_loadu_ps(xr + k));
      o[K + g] = _mm512_reduce_add_ps(s);
    }
    for (int64_t g = K + G; g < L; g++) o[g] = 0.0f;
  }
}

namespace {

template <int BITS>
inline __m512i code_mask(int j) {
  if constexpr (BITS == 8) return _mm512_set1_epi32(0xFF << (8 * j));
  return _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(0xF << (4 * j)), _mm512_set1_epi32(0xF << (4 * j + 16)));
}

// NR rows × TR tokens. SPLIT: the group size is not a multiple of 64, so the two 32-input halves of a block can
// belong to different groups (lanes of the second half: 0xFF00 for int8, 0xF0F0 for int4). No row's sum depends on
// its neighbours.
template <int NR, int TR, int BITS, bool SPLIT>
void factored_tile(const QGemmArgs& A, const float* x, const uint8_t* q, const uint16_t* s, const uint16_t* b,
                   float* y, bool acc) {
  const int64_t K = A.K, ldx = A.ldx, ldq = A.ldq, lds = A.lds, group = A.group, G = K / group;
  constexpr __mmask16 kHigh = BITS == 8 ? 0xFF00 : 0xF0F0;
  const __m512i m0 = code_mask<BITS>(0), m1 = code_mask<BITS>(1), m2 = code_mask<BITS>(2), m3 = code_mask<BITS>(3);
  __m512 a[NR][TR];
#pragma GCC unroll 8
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
    for (int t = 0; t < TR; t++) a[r][t] = _mm512_setzero_ps();
  alignas(64) float sf[NR][16];
  for (int64_t gb = 0; gb < G; gb += 16) {
    const int64_t ng = std::min<int64_t>(16, G - gb);
    const __mmask16 gm = static_cast<__mmask16>((1u << ng) - 1);
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
      _mm512_store_ps(sf[r], widen16(s + r * lds + gb, gm));
      const __m512 bv = widen16(b + r * lds + gb, gm);
#pragma GCC unroll 8
      for (int t = 0; t < TR; t++) a[r][t] = _mm512_fmadd_ps(bv, _mm512_loadu_ps(x + t * ldx + K + gb), a[r][t]);
    }
    const int64_t k1 = (gb + ng) * group;
    for (int64_t k = gb * group; k < k1; k += kFactoredBlock) {
      const int64_t g0 = k / group - gb;
      __m512 sv[NR];
      __m512i wd[NR];
#pragma GCC unroll 8
      for (int r = 0; r < NR; r++) {
        sv[r] = _mm512_set1_ps(sf[r][g0]);
        if constexpr (SPLIT) sv[r] = _mm512_mask_blend_ps(kHigh, sv[r], _mm512_set1_ps(sf[r][(k + 32) / group - gb]));
        const uint8_t* p = q + r * ldq + k * BITS / 8;
        if constexpr (BITS == 8)
          wd[r] = _mm512_loadu_si512(p);
        else
          wd[r] = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        // The same inputs of the next tile's rows, into L2 only (locality 2: prefetcht1). Into L1 as well (t0)
        // held the int8 kernel to half the DRAM rate of the bf16 rows on a matrix that comes from memory (E2B's
        // 400 MB int8 head: 7.3-8.8 ms per 64 MB against 3.9-4.6 with t1).
        if constexpr (TR <= 2) __builtin_prefetch(p + NR * ldq, 0, 2);
      }
      __m512 pr[NR][TR];
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) {
        const __m512i mj = j == 0 ? m0 : j == 1 ? m1 : j == 2 ? m2 : m3;
        __m512 xv[TR];
#pragma GCC unroll 8
        for (int t = 0; t < TR; t++) xv[t] = _mm512_loadu_ps(x + t * ldx + k + 16 * j);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
          const __m512 qf = _mm512_cvtepu32_ps(_mm512_and_si512(wd[r], mj));
#pragma GCC unroll 8
          for (int t = 0; t < TR; t++) pr[r][t] = j == 0 ? _mm512_mul_ps(qf, xv[t]) : _mm512_fmadd_ps(qf, xv[t], pr[r][t]);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int t = 0; t < TR; t++) a[r][t] = _mm512_fmadd_ps(pr[r][t], sv[r], a[r][t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < TR; t++) {
    float* o = y + t * A.ldy;
    if constexpr (NR % 4 == 0) {
#pragma GCC unroll 4
      for (int r = 0; r < NR; r += 4) {
        const __m128 v = reduce4(a[r][t], a[r + 1][t], a[r + 2][t], a[r + 3][t]);
        float* op = o + r;
        _mm_storeu_ps(op, acc ? _mm_add_ps(_mm_loadu_ps(op), v) : v);
      }
    } else {
#pragma GCC unroll 8
      for (int r = 0; r < NR; r++) {
        const float v = _mm512_reduce_add_ps(a[r][t]);
        o[r] = acc ? o[r] + v : v;
      }
    }
  }
}

// Decode (one token) over S streams far apart (row r of the tile at r·span from the first), one row of each, two
// blocks of every row per step: eight independent chains of four multiply-adds, and each stream read in address
// order (a row, then the next row of its part), as the four-stream read sweep reads, each stream prefetched
// kDecodePrefetchBytes ahead into L1 (simd.h; on a Zen 5 core a prefetch 2 KB ahead into L2 only had been slower
// than none: 64 MB int8 block at K = 1536, one thread, 29.8 against 35.0 GB/s). Each row's sum is the one
// factored_tile computes for it, operation for operation (the bias terms at each 16-group step, then per block the
// four products in order and the block's scale), so this changes no bit.
template <int S, int BITS>
void factored_streams(const QGemmArgs& A, const float* x, const uint8_t* q, const uint16_t* s, const uint16_t* b,
                      float* y, bool acc, int64_t span) {
  static_assert(S == 2 || S == 4, "the tile's sums are reduced four at a time");
  const int64_t K = A.K, ldq = A.ldq, lds = A.lds, group = A.group, G = K / group;
  const __m512i m0 = code_mask<BITS>(0), m1 = code_mask<BITS>(1), m2 = code_mask<BITS>(2), m3 = code_mask<BITS>(3);
  __m512 a[S];
#pragma GCC unroll 4
  for (int r = 0; r < S; r++) a[r] = _mm512_setzero_ps();
  alignas(64) float sf[S][16];
  // The scales and biases of each stream's row kDecodeScalesAhead on (short runs beside the codes' streams).
#pragma GCC unroll 4
  for (int r = 0; r < S; r++) {
    __builtin_prefetch(s + (r * span + kDecodeScalesAhead) * lds, 0, 3);
    __builtin_prefetch(b + (r * span + kDecodeScalesAhead) * lds, 0, 3);
  }
  for (int64_t gb = 0; gb < G; gb += 16) {
    const int64_t ng = std::min<int64_t>(16, G - gb);
    const __mmask16 gm = static_cast<__mmask16>((1u << ng) - 1);
    const __m512 xs = _mm512_loadu_ps(x + K + gb);
#pragma GCC unroll 4
    for (int r = 0; r < S; r++) {
      _mm512_store_ps(sf[r], widen16(s + r * span * lds + gb, gm));
      a[r] = _mm512_fmadd_ps(widen16(b + r * span * lds + gb, gm), xs, a[r]);
    }
    const int64_t k1 = (gb + ng) * group;
    int64_t k = gb * group;
    // NB blocks of every row from k on.
    auto step = [&](auto nb) {
      constexpr int NB = decltype(nb)::value;
      __m512i wd[S][NB];
      __m512 pr[S][NB];
#pragma GCC unroll 4
      for (int r = 0; r < S; r++) {
        const uint8_t* p = q + r * span * ldq + k * BITS / 8;
        __builtin_prefetch(p + kDecodePrefetchBytes, 0, 3);  // this step's cache lines, further on (simd.h)
        if constexpr (BITS * NB * kFactoredBlock / 8 > 64) __builtin_prefetch(p + kDecodePrefetchBytes + 64, 0, 3);
#pragma GCC unroll 2
        for (int i = 0; i < NB; i++) {
          const uint8_t* pi = p + i * kFactoredBlock * BITS / 8;
          if constexpr (BITS == 8)
            wd[r][i] = _mm512_loadu_si512(pi);
          else
            wd[r][i] = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pi)));
        }
      }
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) {
        const __m512i mj = j == 0 ? m0 : j == 1 ? m1 : j == 2 ? m2 : m3;
#pragma GCC unroll 2
        for (int i = 0; i < NB; i++) {
          const __m512 xv = _mm512_loadu_ps(x + k + i * kFactoredBlock + 16 * j);
#pragma GCC unroll 4
          for (int r = 0; r < S; r++) {
            const __m512 qf = _mm512_cvtepu32_ps(_mm512_and_si512(wd[r][i], mj));
            pr[r][i] = j == 0 ? _mm512_mul_ps(qf, xv) : _mm512_fmadd_ps(qf, xv, pr[r][i]);
          }
        }
      }
#pragma GCC unroll 2
      for (int i = 0; i < NB; i++) {
        const int64_t g = (k + i * kFactoredBlock) / group - gb;
#pragma GCC unroll 4
        for (int r = 0; r < S; r++) a[r] = _mm512_fmadd_ps(pr[r][i], _mm512_set1_ps(sf[r][g]), a[r]);
      }
      k += NB * kFactoredBlock;
    };
    while (k + 2 * kFactoredBlock <= k1) step(std::integral_constant<int, 2>{});
    if (k < k1) step(std::integral_constant<int, 1>{});
  }
  alignas(16) float v[4];
  _mm_store_ps(v, reduce4(a[0], a[1], a[S - 2], a[S - 1]));  // (S = 2: rows 0 and 1 twice)
  for (int r = 0; r < S; r++) {
    float& o = y[r * span];
    o = acc ? o + v[r] : v[r];
  }
}

// Decode (one token) takes 8 rows per tile: a row's block is a chain of four dependent multiply-adds, and with 4 rows
// a one-token tile waited on those chains (a 768 × 256 int4 matrix from L2 took 8.7 µs, with 8 rows 7.9). Two or more
// tokens keep 4 rows: 8 × 2 accumulators, partials and code words no longer fit the 32 registers. Which rows share a
// tile changes no row's sum.
template <int BITS, bool SPLIT>
void factored_rows(const QGemmArgs& a, int64_t n0, int64_t n1) {
  int64_t n = n0;
  if (!SPLIT && a.T == 1) {  // (group sizes that split a block keep 4 rows: group 32 was 3 % slower with 8)
    // The rows as decode_streams() streams far apart, one row of each per tile (as the bf16 decode rows,
    // gemm_impl.h).
    auto streams = [&](auto count) {
      constexpr int S = decltype(count)::value;
      const int64_t per = (n1 - n0) * a.ldq >= kDecodeStreamsMinBytes ? (n1 - n0) / S : 0;
      for (int64_t i = 0; i < per; i++)
        factored_streams<S, BITS>(a, a.x, a.q + (n + i) * a.ldq, a.scales + (n + i) * a.lds,
                                  a.biases + (n + i) * a.lds, a.y + n + i, a.accumulate, per);
      n += S * per;
    };
    with_decode_streams(streams);
    for (; n + 8 <= n1; n += 8)
      factored_tile<8, 1, BITS, SPLIT>(a, a.x, a.q + n * a.ldq, a.scales + n * a.lds, a.biases + n * a.lds, a.y + n,
                                       a.accumulate);
  }
  quant_tiles(a.T, n, n1, [&](auto nr, auto tr, int64_t m, int64_t t) {
    factored_tile<decltype(nr)::value, decltype(tr)::value, BITS, SPLIT>(
        a, a.x + t * a.ldx, a.q + m * a.ldq, a.scales + m * a.lds, a.biases + m * a.lds, a.y + t * a.ldy + m,
        a.accumulate);
  });
}

}  // namespace

void qgemm_factored_avx512(const QGemmArgs& a, int64_t n0, int64_t n1) {
  const bool split = a.group % kFactoredBlock != 0;
  if (a.bits == 4)
    split ? factored_rows<4, true>(a, n0, n1) : factored_rows<4, false>(a, n0, n1);
  else
    split ? factored_rows<8, true>(a, n0, n1) : factored_rows<8, false>(a, n0, n1);
}

}  // namespace vatic::cpu
