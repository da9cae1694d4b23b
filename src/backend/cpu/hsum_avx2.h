#pragma once
// Sum of the 8 lanes of an AVX2 vector, shared by every AVX2 kernel. The order of the additions is part of the
// results (decode rows are compared bit for bit across tile shapes and against stored outputs), so it is fixed
// here once: the two 128-bit halves lane by lane, then lanes {0,1} + {2,3}, then lane 0 + lane 1.
#include <immintrin.h>

namespace vatic::cpu {

__attribute__((target("avx2,fma"), always_inline)) inline float hsum_avx2(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

}  // namespace vatic::cpu
