// Vector tanh (and the RMS norm's sum of squares) for the CPU backend: glibc's libmvec (at most 4 ulp, the same bound as its scalar tanhf) for the AVX2
// and AVX-512 paths, std::tanh for the generic one. GELU (tanh form) and the logit soft-cap spend most of their time
// here: the scalar libm call costs about 20 ns an element.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/simd.h"

namespace vatic::cpu {
namespace {

void tanh_generic(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = std::tanh(x[i]);
}
double sumsq_generic(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace
}  // namespace vatic::cpu

#pragma GCC push_options
#pragma GCC target("avx2,fma")
extern "C" __m256 _ZGVdN8v_tanhf(__m256);
namespace vatic::cpu {
namespace {
void tanh_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _ZGVdN8v_tanhf(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float buf[8] = {};
    std::memcpy(buf, x + i, static_cast<size_t>(n - i) * 4);
    _mm256_store_ps(buf, _ZGVdN8v_tanhf(_mm256_load_ps(buf)));
    std::memcpy(y + i, buf, static_cast<size_t>(n - i) * 4);
  }
}
double sumsq_avx2(const float* x, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    a0 = _mm256_fmadd_pd(lo, lo, a0);
    a1 = _mm256_fmadd_pd(hi, hi, a1);
  }
  alignas(32) double t[4];
  _mm256_store_pd(t, _mm256_add_pd(a0, a1));
  double s = (t[0] + t[1]) + (t[2] + t[3]);
  for (; i < n; i++) s += static_cast<double>(x[i]) * x[i];
  return s;
}
}  // namespace
}  // namespace vatic::cpu
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma")
// GCC 12 reports false "uninitialized" warnings inside its own AVX-512 conversion and reduction intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
extern "C" __m512 _ZGVeN16v_tanhf(__m512);
namespace vatic::cpu {
namespace {
void tanh_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _ZGVeN16v_tanhf(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _ZGVeN16v_tanhf(_mm512_maskz_loadu_ps(m, x + i)));
  }
}
double sumsq_avx512(const float* x, int64_t n) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(x + i)), hi = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
    a0 = _mm512_fmadd_pd(lo, lo, a0);
    a1 = _mm512_fmadd_pd(hi, hi, a1);
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    a0 = _mm512_fmadd_pd(lo, lo, a0);
    a1 = _mm512_fmadd_pd(hi, hi, a1);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}
}  // namespace
}  // namespace vatic::cpu
#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace vatic::cpu {
void fill_vmath_generic(Kernels& k) {
  k.tanh = tanh_generic;
  k.sumsq = sumsq_generic;
}
void fill_vmath_avx2(Kernels& k) {
  k.tanh = tanh_avx2;
  k.sumsq = sumsq_avx2;
}
void fill_vmath_avx512(Kernels& k) {
  k.tanh = tanh_avx512;
  k.sumsq = sumsq_avx512;
}
}  // namespace vatic::cpu
