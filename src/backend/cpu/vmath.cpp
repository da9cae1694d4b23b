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
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)
void gelu_tanh_generic(const float* a, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float z = std::tanh(kGeluC * (a[i] + 0.044715f * a[i] * a[i] * a[i]));
    y[i] = u ? 0.5f * a[i] * (1.0f + z) * u[i] : 0.5f * a[i] * (1.0f + z);
  }
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
// The scalar expression's order, one intrinsic per operation. GCC contracts a multiply feeding an add into an FMA
// in C++ (-ffp-contract=fast is its default there), which the scalar code, built without FMA, never does: the
// empty asm hides the product from that.
inline __m256 gelu8(__m256 x) {
  const __m256 c = _mm256_set1_ps(kGeluC), k = _mm256_set1_ps(0.044715f);
  __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(k, x), x), x);
  __asm__("" : "+x"(x3));
  const __m256 z = _mm256_mul_ps(c, _mm256_add_ps(x, x3));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.0f), _ZGVdN8v_tanhf(z)));
}
void gelu_tanh_avx2(const float* a, const float* u, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 r = gelu8(_mm256_loadu_ps(a + i));
    if (u) r = _mm256_mul_ps(r, _mm256_loadu_ps(u + i));
    _mm256_storeu_ps(y + i, r);
  }
  if (i < n) {
    alignas(32) float buf[8] = {}, ub[8] = {};
    std::memcpy(buf, a + i, static_cast<size_t>(n - i) * 4);
    __m256 r = gelu8(_mm256_load_ps(buf));
    if (u) {
      std::memcpy(ub, u + i, static_cast<size_t>(n - i) * 4);
      r = _mm256_mul_ps(r, _mm256_load_ps(ub));
    }
    _mm256_store_ps(buf, r);
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
inline __m512 gelu16(__m512 x) {
  const __m512 c = _mm512_set1_ps(kGeluC), k = _mm512_set1_ps(0.044715f);
  __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(k, x), x), x);
  __asm__("" : "+v"(x3));  // no FMA contraction (see gelu8)
  const __m512 z = _mm512_mul_ps(c, _mm512_add_ps(x, x3));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), _ZGVeN16v_tanhf(z)));
}
void gelu_tanh_avx512(const float* a, const float* u, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 r = gelu16(_mm512_loadu_ps(a + i));
    if (u) r = _mm512_mul_ps(r, _mm512_loadu_ps(u + i));
    _mm512_storeu_ps(y + i, r);
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 r = gelu16(_mm512_maskz_loadu_ps(m, a + i));
    if (u) r = _mm512_mul_ps(r, _mm512_maskz_loadu_ps(m, u + i));
    _mm512_mask_storeu_ps(y + i, m, r);
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
  k.gelu_tanh = gelu_tanh_generic;
  k.sumsq = sumsq_generic;
}
void fill_vmath_avx2(Kernels& k) {
  k.tanh = tanh_avx2;
  k.gelu_tanh = gelu_tanh_avx2;
  k.sumsq = sumsq_avx2;
}
void fill_vmath_avx512(Kernels& k) {
  k.tanh = tanh_avx512;
  k.gelu_tanh = gelu_tanh_avx512;
  k.sumsq = sumsq_avx512;
}
}  // namespace vatic::cpu
