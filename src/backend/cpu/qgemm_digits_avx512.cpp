// AVX-512 VNNI int4 matmul for decode and verification: the activations as integer digits (see qgemm_factored.h).
//
// Per group of inputs the activations share one exponent e, from the group's largest |x| M: e = ilogb(M) - 21, so
// that m = round(x·2^-e) has |m| <= 2^22. Each m is split into three signed bytes, m = d2·2^16 + d1·2^8 + d0
// (d0, d1 in [-128, 127], |d2| <= 64). Then Σ x·q over a group is 2^e·Σ m·q up to the rounding of m (at most 2^-22
// of M per input), and Σ m·q is exact in 32-bit integers: vpdpbusd multiplies 64 unsigned codes with 64 signed
// digits and adds each lane's four products to its int32, so one instruction per digit covers 64 inputs. The three
// digit sums meet in Horner form (v = Σ q·d2; v = v·2^8 + Σ q·d1; v = v·2^8 + Σ q·d0): a lane sums 8 products of a
// 128-input block, |v| <= 8·15·2^22 < 2^31, so every step is exact. Per block and row, v is converted to f32 once
// and scaled by s·2^e (exact: a power of two); the biases meet the group sums of the activations as in the factored
// form, 16 groups per FMA.
//
// Against the factored kernel (per 16 codes an AND, a convert and an FMA) this takes per 128 inputs of a row and
// token six vpdpbusd, two shifts, a convert, a multiply and an FMA; the codes are unpacked (AND, shift, AND) once
// per row for all tokens of a tile. int8 stays with the factored kernel: the same scheme (|m| <= 2^21, Horner per
// 64-input block) decoded no faster there, its weights' reads already near the memory's rate, and a tile of two
// tokens was slower (a 2048 × 8192 matrix: 1.04 against 0.97 ms).
//
// Layout of a prepared activation row (digits_width(K, group) floats): per 128-input block, the digit planes d2,
// d1, d0, each 128 bytes: byte j of the first 64 is the digit of input 2j, byte j of the second 64 that of input
// 2j + 1 (the order of the low and high nibbles of a 64-byte load of packed codes); then per block 16 floats 2^e
// (lanes 0..7: the group of inputs [0, 64) of the block, lanes 8..15: [64, 128)); then the group sums, padded to 16.
//
// Every row's sum depends only on its own codes and the token's activations, in an order fixed by K and the group
// size: the same for any number of tokens below kFactoredMaxT and any split or grouping of the rows.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/decode_avx512.h"
#include "backend/cpu/qgemm_factored.h"

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,fma")

namespace vatic::cpu {

namespace {

constexpr int64_t kBlock = kDigitsBlock;          // inputs per block
constexpr int64_t kPlaneBytes = kBlock;           // bytes per digit plane of a block
constexpr int64_t kBlockBytes = 3 * kPlaneBytes;  // digit bytes per block

// Digits of 16 integers m (|m| <= 2^22), as bytes.
inline void split16(__m512i m, __m128i& d2, __m128i& d1, __m128i& d0) {
  const __m512i e0 = _mm512_srai_epi32(_mm512_slli_epi32(m, 24), 24);  // the low byte, sign-extended
  const __m512i m1 = _mm512_srai_epi32(_mm512_sub_epi32(m, e0), 8);    // exact
  const __m512i e1 = _mm512_srai_epi32(_mm512_slli_epi32(m1, 24), 24);
  const __m512i e2 = _mm512_srai_epi32(_mm512_sub_epi32(m1, e1), 8);
  d2 = _mm512_cvtepi32_epi8(e2);
  d1 = _mm512_cvtepi32_epi8(e1);
  d0 = _mm512_cvtepi32_epi8(e0);
}

}  // namespace

void digits_x(const float* x, int64_t ldx, int64_t T, int64_t K, int group, float* out) {
  const int64_t L = digits_width(K, group), G = K / group, NB = K / kBlock;
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
  std::vector<int> ex(static_cast<size_t>(G));
  for (int64_t t = 0; t < T; t++) {
    const float* xr = x + t * ldx;
    float* o = out + t * L;
    uint8_t* dg = reinterpret_cast<uint8_t*>(o);
    float* pw = o + NB * kBlockBytes / 4;
    float* gs = pw + NB * 16;
    // Per group: the exponent and the sum of the activations (16 lanes per step, then the lanes).
    for (int64_t g = 0; g < G; g++) {
      __m512 mx = _mm512_setzero_ps(), s = _mm512_setzero_ps();
      for (int64_t k = g * group; k < (g + 1) * group; k += 16) {
        const __m512 v = _mm512_loadu_ps(xr + k);
        mx = _mm512_max_ps(mx, _mm512_abs_ps(v));
        s = _mm512_add_ps(s, v);
      }
      // (A NaN or infinite activation leaves its digits meaningless but makes this sum, and so every row's result
      // through the bias term, NaN or infinite, as in the factored form.)
      gs[g] = _mm512_reduce_add_ps(s);
      const float M = _mm512_reduce_max_ps(mx);
      // |m| <= 2^22. Normal powers of two only: activations under 2^-104 keep fewer bits.
      ex[g] = M > 0.0f && std::isfinite(M) ? std::max(std::ilogb(M) - 21, -126) : 0;
    }
    for (int64_t g = G; g < (G + 15) / 16 * 16; g++) gs[g] = 0.0f;
    for (int64_t b = 0; b < NB; b++) {
      uint8_t* d = dg + b * kBlockBytes;
      for (int h = 0; h < 2; h++) {  // inputs [64h, 64h + 64) of the block
        const int e = ex[(b * kBlock + 64 * h) / group];
        const float p = std::ldexp(1.0f, e);
        for (int i = 0; i < 8; i++) pw[b * 16 + 8 * h + i] = p;
        const __m512 ne = _mm512_set1_ps(static_cast<float>(-e));
        const float* xb = xr + b * kBlock + 64 * h;
        for (int c = 0; c < 2; c++) {  // 32 inputs: 16 even, 16 odd
          const __m512 x0 = _mm512_loadu_ps(xb + 32 * c), x1 = _mm512_loadu_ps(xb + 32 * c + 16);
          for (int par = 0; par < 2; par++) {
            const __m512 v = _mm512_permutex2var_ps(x0, par ? od : ev, x1);
            // x·2^-e exactly (scalef), rounded to the nearest integer (the default rounding mode).
            const __m512i m = _mm512_cvtps_epi32(_mm512_scalef_ps(v, ne));
            __m128i d2, d1, d0;
            split16(m, d2, d1, d0);
            const int64_t at = par * 64 + 32 * h + 16 * c;
            _mm_storeu_si128(reinterpret_cast<__m128i*>(d + at), d2);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(d + kPlaneBytes + at), d1);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 2 * kPlaneBytes + at), d0);
          }
        }
      }
    }
  }
}

namespace {

// NR rows (row r at r·rs rows from the first) × TR tokens.
template <int NR, int TR>
void digits_tile(const QGemmArgs& A, const float* x, const uint8_t* q, const uint16_t* s, const uint16_t* b,
                 float* y, bool acc, int64_t rs) {
  const int64_t K = A.K, ldx = A.ldx, ldq = A.ldq * rs, lds = A.lds * rs, group = A.group, G = K / group;
  const int64_t NB = K / kBlock, pwo = NB * kBlockBytes / 4, gso = pwo + NB * 16;
  const __m512i lowmask = _mm512_set1_epi8(0x0F);
  __m512 a[NR][TR];
#pragma GCC unroll 8
  for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
    for (int t = 0; t < TR; t++) a[r][t] = _mm512_setzero_ps();
  if (TR <= 2 && rs != 1)  // streams: their rows' scales and biases kDecodeScalesAhead on (simd.h)
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
      __builtin_prefetch(s + r * lds + kDecodeScalesAhead * A.lds, 0, 3);
      __builtin_prefetch(b + r * lds + kDecodeScalesAhead * A.lds, 0, 3);
    }
  for (int64_t gb = 0; gb < G; gb += 16) {
    const int64_t ng = std::min<int64_t>(16, G - gb);
    const __mmask16 gm = static_cast<__mmask16>((1u << ng) - 1);
    __m512 sv[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
      sv[r] = widen16(s + r * lds + gb, gm);
      const __m512 bv = widen16(b + r * lds + gb, gm);
#pragma GCC unroll 8
      for (int t = 0; t < TR; t++) a[r][t] = _mm512_fmadd_ps(bv, _mm512_loadu_ps(x + t * ldx + gso + gb), a[r][t]);
    }
    const int64_t k1 = (gb + ng) * group;
    for (int64_t k = gb * group; k < k1; k += kBlock) {
      const int64_t blk = k / kBlock;
      // Each lane's group among the 16 of this step: lanes 0..7 the block's first 64 inputs, 8..15 the rest.
      const __m512i gi = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(static_cast<int>(k / group - gb)),
                                                 _mm512_set1_epi32(static_cast<int>((k + 64) / group - gb)));
      __m512i lo[NR], hi[NR];
      __m512 sc[NR];
#pragma GCC unroll 8
      for (int r = 0; r < NR; r++) {
        const uint8_t* p = q + r * ldq + k / 2;
        const __m512i w = _mm512_loadu_si512(p);
        if (TR <= 2 && rs == 1) __builtin_prefetch(p + NR * ldq, 0, 2);
        if (TR <= 2 && rs != 1) __builtin_prefetch(p + kDecodePrefetchBytes, 0, 3);  // a stream (simd.h)
        lo[r] = _mm512_and_si512(w, lowmask);
        hi[r] = _mm512_and_si512(_mm512_srli_epi16(w, 4), lowmask);
        sc[r] = _mm512_permutexvar_ps(gi, sv[r]);
      }
#pragma GCC unroll 8
      for (int t = 0; t < TR; t++) {
        const uint8_t* d = reinterpret_cast<const uint8_t*>(x + t * ldx) + blk * kBlockBytes;
        const __m512 pw = _mm512_loadu_ps(x + t * ldx + pwo + blk * 16);
        const __m512i d2l = _mm512_loadu_si512(d), d2h = _mm512_loadu_si512(d + 64);
        const __m512i d1l = _mm512_loadu_si512(d + kPlaneBytes), d1h = _mm512_loadu_si512(d + kPlaneBytes + 64);
        const __m512i d0l = _mm512_loadu_si512(d + 2 * kPlaneBytes);
        const __m512i d0h = _mm512_loadu_si512(d + 2 * kPlaneBytes + 64);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
          __m512i v = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[r], d2l);
          v = _mm512_dpbusd_epi32(v, hi[r], d2h);
          v = _mm512_slli_epi32(v, 8);
          v = _mm512_dpbusd_epi32(v, lo[r], d1l);
          v = _mm512_dpbusd_epi32(v, hi[r], d1h);
          v = _mm512_slli_epi32(v, 8);
          v = _mm512_dpbusd_epi32(v, lo[r], d0l);
          v = _mm512_dpbusd_epi32(v, hi[r], d0h);
          a[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(sc[r], pw), a[r][t]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < TR; t++) {
    float* o = y + t * A.ldy;
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
      const float v = _mm512_reduce_add_ps(a[r][t]);
      float& or_ = o[r * rs];
      or_ = acc ? or_ + v : v;
    }
  }
}

}  // namespace

// Decode (one token): a thread's rows as decode_streams() streams far apart when they are large (as the factored
// kernel); the rest, and every row of two or more tokens, in quant_tiles' tiles (qgemm_factored.h).
void qgemm_digits_avx512(const QGemmArgs& a, int64_t n0, int64_t n1) {
  int64_t n = n0;
  if (a.T == 1) {
    auto streams = [&](auto count) {
      constexpr int S = decltype(count)::value;
      const int64_t per = (n1 - n0) * a.ldq >= kDecodeStreamsMinBytes ? (n1 - n0) / S : 0;
      for (int64_t i = 0; i < per; i++)
        digits_tile<S, 1>(a, a.x, a.q + (n + i) * a.ldq, a.scales + (n + i) * a.lds, a.biases + (n + i) * a.lds,
                          a.y + n + i, a.accumulate, per);
      n += S * per;
    };
    with_decode_streams(streams);
  }
  quant_tiles(a.T, n, n1, [&](auto nr, auto tr, int64_t m, int64_t t) {
    digits_tile<decltype(nr)::value, decltype(tr)::value>(a, a.x + t * a.ldx, a.q + m * a.ldq, a.scales + m * a.lds,
                                                          a.biases + m * a.lds, a.y + t * a.ldy + m, a.accumulate, 1);
  });
}

}  // namespace vatic::cpu
