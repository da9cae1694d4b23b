#pragma once
// AVX-512 pieces shared by the decode kernels: the horizontal sums of four vectors, bit for bit as four
// _mm512_reduce_add_ps (dense and factored quantized rows), and up to 16 bf16 values widened to f32 (scales in the
// factored and digits kernels, the tails of the bf16 dot products).
#include <immintrin.h>

#include <cstdint>

namespace vatic::cpu {

// _mm512_reduce_add_ps of four vectors at once, with the same pairs added at every step (lane i + 8 to lane i,
// then i + 4, then i + 2, then i + 1; a + b is b + a exactly), so each sum is the one-vector reduction's bit for
// bit. One shuffle tree for four rows instead of four trees of extracts (14 instructions instead of 32), which at
// the demo's K = 256 (four blocks per row of a quantized tile, eight vectors of a bf16 row) were a large part of
// each row's time.
__attribute__((target("avx512f"))) inline __m128 reduce4(__m512 r0, __m512 r1, __m512 r2, __m512 r3) {
  // [r0 lo 256 | r1 lo 256] + [r0 hi | r1 hi]: lanes 0..7 row 0, 8..15 row 1.
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(r0, r1, 0x44), _mm512_shuffle_f32x4(r0, r1, 0xEE));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(r2, r3, 0x44), _mm512_shuffle_f32x4(r2, r3, 0xEE));
  // 128-bit lane j: row j, its lanes i + 4 added to lanes i.
  const __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88), _mm512_shuffle_f32x4(s01, s23, 0xDD));
  const __m512 u = _mm512_add_ps(s, _mm512_permute_ps(s, 0x4E));
  const __m512 w = _mm512_add_ps(u, _mm512_permute_ps(u, 0xB1));
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), w));
}

// 16 bf16 values (the first n of the mask; the rest 0) -> f32, exactly.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 widen16(const uint16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

}  // namespace vatic::cpu
