#pragma once
// A 16 × 16 block of 32-bit values transposed in AVX-512 registers (lane i of r[j] <-> lane j of r[i]): four rounds
// of two-source permutes; round b (8, 4, 2, 1) swaps the off-diagonal b × b blocks of every 2b × 2b block
// (registers i and i + b, lanes grouped by 2b). For files compiled with AVX-512 enabled.
#include <immintrin.h>

#include <cstdint>

namespace vatic::cpu {

// The index vectors of the four rounds, fixed at compile time. Built inside the transpose they were 16 scalar
// stores read back by one vector load, twice per round of every transpose (a failed store-to-load forward each).
struct TransposeIndex16 {
  alignas(64) int32_t lo[4][16];
  alignas(64) int32_t hi[4][16];
  constexpr TransposeIndex16() : lo{}, hi{} {
    for (int b = 8, stage = 0; b >= 1; b /= 2, stage++)
      for (int l = 0; l < 16; l++) {
        const int g = l / (2 * b) * 2 * b, q = l % (2 * b);
        lo[stage][l] = q < b ? g + q : 16 + g + q - b;
        hi[stage][l] = q < b ? g + b + q : 16 + g + q;
      }
  }
};
inline constexpr TransposeIndex16 kTransposeIndex16;

inline void transpose16(__m512i* r) {
#pragma GCC unroll 4
  for (int b = 8, stage = 0; b >= 1; b /= 2, stage++) {
    const __m512i il = _mm512_load_si512(kTransposeIndex16.lo[stage]);
    const __m512i ih = _mm512_load_si512(kTransposeIndex16.hi[stage]);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
      if (i & b) continue;
      const __m512i a = r[i], c = r[i + b];
      r[i] = _mm512_permutex2var_epi32(a, il, c);
      r[i + b] = _mm512_permutex2var_epi32(a, ih, c);
    }
  }
}

}  // namespace vatic::cpu
