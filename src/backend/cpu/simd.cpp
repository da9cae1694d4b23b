#include "backend/cpu/simd.h"

// GCC 12 reports false "uninitialized" warnings inside its own AVX-512 reduction intrinsics.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace vatic::cpu {
namespace {

// ---- portable fallbacks ----
float dot_f32_generic(const float* x, const float* w, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i] * w[i];
  return s;
}
inline float bf(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
float dot_bf16_generic(const float* x, const uint16_t* w, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i] * bf(w[i]);
  return s;
}
void dot4_bf16_generic(const float* x, int64_t ldx, const uint16_t* w, int64_t n, float* y) {
  for (int r = 0; r < 4; r++) y[r] = dot_bf16_generic(x + r * ldx, w, n);
}
void dot4_f32_generic(const float* x, int64_t ldx, const float* w, int64_t n, float* y) {
  for (int r = 0; r < 4; r++) y[r] = dot_f32_generic(x + r * ldx, w, n);
}
void axpy_generic(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

// ---- AVX2 + FMA ----
#define AVX2 __attribute__((target("avx2,fma")))
AVX2 inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
AVX2 inline __m256 load_bf16x8(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
AVX2 float dot_f32_avx2(const float* x, const float* w, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(w + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(w + i + 8), a1);
  }
  float s = hsum256(_mm256_add_ps(a0, a1));
  for (; i < n; i++) s += x[i] * w[i];
  return s;
}
AVX2 float dot_bf16_avx2(const float* x, const uint16_t* w, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), load_bf16x8(w + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), load_bf16x8(w + i + 8), a1);
  }
  float s = hsum256(_mm256_add_ps(a0, a1));
  for (; i < n; i++) s += x[i] * bf(w[i]);
  return s;
}
AVX2 void dot4_bf16_avx2(const float* x, int64_t ldx, const uint16_t* w, int64_t n, float* y) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 wv = load_bf16x8(w + i);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), wv, a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + ldx + i), wv, a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + 2 * ldx + i), wv, a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + 3 * ldx + i), wv, a3);
  }
  y[0] = hsum256(a0);
  y[1] = hsum256(a1);
  y[2] = hsum256(a2);
  y[3] = hsum256(a3);
  for (; i < n; i++) {
    float wv = bf(w[i]);
    for (int r = 0; r < 4; r++) y[r] += x[r * ldx + i] * wv;
  }
}
AVX2 void dot4_f32_avx2(const float* x, int64_t ldx, const float* w, int64_t n, float* y) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 wv = _mm256_loadu_ps(w + i);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), wv, a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + ldx + i), wv, a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + 2 * ldx + i), wv, a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + 3 * ldx + i), wv, a3);
  }
  y[0] = hsum256(a0);
  y[1] = hsum256(a1);
  y[2] = hsum256(a2);
  y[3] = hsum256(a3);
  for (; i < n; i++)
    for (int r = 0; r < 4; r++) y[r] += x[r * ldx + i] * w[i];
}
AVX2 void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += a * x[i];
}

// ---- AVX-512 ----
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
AVX512 inline __m512 load_bf16x16(const uint16_t* p) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
AVX512 inline __m512 load_bf16_mask(const uint16_t* p, __mmask16 m) {
  __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
AVX512 float dot_f32_avx512(const float* x, const float* w, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(w + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(w + i + 16), a1);
  }
  for (; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, w + i), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}
AVX512 float dot_bf16_avx512(const float* x, const uint16_t* w, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), load_bf16x16(w + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), load_bf16x16(w + i + 16), a1);
    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), load_bf16x16(w + i + 32), a2);
    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), load_bf16x16(w + i + 48), a3);
  }
  for (; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), load_bf16_mask(w + i, m), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}
AVX512 void dot4_bf16_avx512(const float* x, int64_t ldx, const uint16_t* w, int64_t n, float* y) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 wv = load_bf16_mask(w + i, m);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), wv, a0);
    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + ldx + i), wv, a1);
    a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + 2 * ldx + i), wv, a2);
    a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + 3 * ldx + i), wv, a3);
  }
  y[0] = _mm512_reduce_add_ps(a0);
  y[1] = _mm512_reduce_add_ps(a1);
  y[2] = _mm512_reduce_add_ps(a2);
  y[3] = _mm512_reduce_add_ps(a3);
}
AVX512 void dot4_f32_avx512(const float* x, int64_t ldx, const float* w, int64_t n, float* y) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 wv = _mm512_maskz_loadu_ps(m, w + i);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), wv, a0);
    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + ldx + i), wv, a1);
    a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + 2 * ldx + i), wv, a2);
    a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + 3 * ldx + i), wv, a3);
  }
  y[0] = _mm512_reduce_add_ps(a0);
  y[1] = _mm512_reduce_add_ps(a1);
  y[2] = _mm512_reduce_add_ps(a2);
  y[3] = _mm512_reduce_add_ps(a3);
}
AVX512 void axpy_avx512(float a, const float* x, float* y, int64_t n) {
  __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}
bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

Kernels make(const std::string& isa) {
  Kernels k{};
  if (isa == "avx512") {
    k = {"avx512", dot_f32_avx512, dot_bf16_avx512, dot4_bf16_avx512, dot4_f32_avx512, axpy_avx512,
         nullptr, nullptr, nullptr, nullptr, nullptr};
    fill_gemm_avx512(k);
    fill_vmath_avx512(k);
  } else if (isa == "avx2") {
    k = {"avx2", dot_f32_avx2, dot_bf16_avx2, dot4_bf16_avx2, dot4_f32_avx2, axpy_avx2, nullptr, nullptr, nullptr,
         nullptr, nullptr};
    fill_gemm_avx2(k);
    fill_vmath_avx2(k);
  } else {
    k = {"generic", dot_f32_generic, dot_bf16_generic, dot4_bf16_generic, dot4_f32_generic, axpy_generic,
         nullptr, nullptr, nullptr, nullptr, nullptr};
    fill_gemm_generic(k);
    fill_vmath_generic(k);
  }
  return k;
}

bool supported(const std::string& isa) {
  if (isa == "generic") return true;
  if (isa == "avx2") return cpu_has_avx2();
  if (isa == "avx512") return cpu_has_avx512();
  return false;
}

// One table per ISA, built once; `current` points at the active one.
const Kernels* table(const std::string& isa) {
  static const Kernels g = make("generic");
  static const Kernels a2 = supported("avx2") ? make("avx2") : g;
  static const Kernels a5 = supported("avx512") ? make("avx512") : a2;
  if (isa == "avx512") return &a5;
  if (isa == "avx2") return &a2;
  return &g;
}

std::atomic<const Kernels*>& current() {
  static std::atomic<const Kernels*> k{[] {
    std::string best = cpu_has_avx512() ? "avx512" : cpu_has_avx2() ? "avx2" : "generic";
    if (const char* env = std::getenv("VATIC_CPU_ISA"); env && *env) {
      if (supported(env)) {
        best = env;
      } else {
        std::fprintf(stderr, "VATIC_CPU_ISA=%s is not supported here (available: generic%s%s); using %s\n", env,
                     cpu_has_avx2() ? ", avx2" : "", cpu_has_avx512() ? ", avx512" : "", best.c_str());
      }
    }
    return table(best);
  }()};
  return k;
}

}  // namespace

const Kernels& kernels() { return *current().load(std::memory_order_acquire); }

std::vector<std::string> available_isas() {
  std::vector<std::string> out{"generic"};
  if (supported("avx2")) out.push_back("avx2");
  if (supported("avx512")) out.push_back("avx512");
  return out;
}

bool set_isa(const std::string& name) {
  if (!supported(name)) return false;
  current().store(table(name), std::memory_order_release);
  return true;
}

void permute_int4_activations(const float* x, int64_t ldx, int64_t T, int64_t K, float* out) {
  for (int64_t t = 0; t < T; t++) {
    const float* xr = x + t * ldx;
    float* o = out + t * K;
    for (int64_t c = 0; c + 32 <= K; c += 32)
      for (int j = 0; j < 16; j++) {
        o[c + j] = xr[c + 2 * j];
        o[c + 16 + j] = xr[c + 2 * j + 1];
      }
  }
}

}  // namespace vatic::cpu
