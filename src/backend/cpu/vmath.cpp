// Vector tanh for the CPU backend: glibc's libmvec (at most 4 ulp, the same bound as its scalar tanhf) for the AVX2
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
}  // namespace
}  // namespace vatic::cpu
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma")
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
}  // namespace
}  // namespace vatic::cpu
#pragma GCC pop_options

namespace vatic::cpu {
void fill_vmath_generic(Kernels& k) { k.tanh = tanh_generic; }
void fill_vmath_avx2(Kernels& k) { k.tanh = tanh_avx2; }
void fill_vmath_avx512(Kernels& k) { k.tanh = tanh_avx512; }
}  // namespace vatic::cpu
