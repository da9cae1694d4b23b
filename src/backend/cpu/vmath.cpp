// Vector tanh (and the RMS norm's sum of squares) for the CPU backend: glibc's libmvec (at most 4 ulp, the same bound as its scalar tanhf) for the AVX2
// and AVX-512 paths, std::tanh for the generic one. GELU (tanh form) and the logit soft-cap spend most of their time
// here: the scalar libm call costs about 20 ns an element.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/decode_avx512.h"
#include "backend/cpu/simd.h"

namespace vatic::cpu {
namespace {

inline float bf16_value(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void tanh_generic(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = std::tanh(x[i]);
}
void softcap_generic(const float* x, float* y, int64_t n, float cap) {
  for (int64_t i = 0; i < n; i++) y[i] = cap * std::tanh(x[i] / cap);
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
// Four rows at a time, each summed as sumsq_generic sums it.
void sumsq_rows_generic(const float* x, int64_t ldx, int64_t R, int64_t n, double* out) {
  int64_t r = 0;
  for (; r + 4 <= R; r += 4) {
    const float* x0 = x + r * ldx;
    const float* x1 = x0 + ldx;
    const float* x2 = x1 + ldx;
    const float* x3 = x2 + ldx;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t i = 0; i < n; i++) {
      s0 += static_cast<double>(x0[i]) * x0[i];
      s1 += static_cast<double>(x1[i]) * x1[i];
      s2 += static_cast<double>(x2[i]) * x2[i];
      s3 += static_cast<double>(x3[i]) * x3[i];
    }
    out[r] = s0;
    out[r + 1] = s1;
    out[r + 2] = s2;
    out[r + 3] = s3;
  }
  for (; r < R; r++) out[r] = sumsq_generic(x + r * ldx, n);
}
// This file is compiled for the baseline instruction set, which has no fused multiply-add: every expression below
// rounds each product.
void norm_rows_generic(const NormRows& a) {
  for (int64_t r = 0; r < a.R; r++) {
    const float* x = a.x + r * a.ldx;
    float* y = a.y + r * a.ldy;
    const float inv = a.inv[r];
    if (!a.res) {
      if (a.wf)
        for (int64_t i = 0; i < a.n; i++) y[i] = x[i] * inv * a.wf[i];
      else if (a.wb)
        for (int64_t i = 0; i < a.n; i++) y[i] = x[i] * inv * bf16_value(a.wb[i]);
      else
        for (int64_t i = 0; i < a.n; i++) y[i] = x[i] * inv;
      continue;
    }
    const float* res = a.res + r * a.ldr;
    for (int64_t i = 0; i < a.n; i++) {
      const float n = a.wf ? x[i] * inv * a.wf[i] : a.wb ? x[i] * inv * bf16_value(a.wb[i]) : x[i] * inv;
      const float v = res[i] + n;
      y[i] = a.s != 1.0f ? v * a.s : v;
    }
  }
}
void rope_neox_generic(float* v, int64_t ldv, int64_t rows, int64_t half, const float* c, const float* s, int64_t n) {
  for (int64_t r = 0; r < rows; r++) {
    float* p = v + r * ldv;
    for (int64_t i = 0; i < n; i++) {
      const float x0 = p[i], x1 = p[i + half];
      p[i] = x0 * c[i] - x1 * s[i];
      p[i + half] = x1 * c[i] + x0 * s[i];
    }
  }
}

}  // namespace
}  // namespace vatic::cpu

#pragma GCC push_options
#pragma GCC target("avx2,fma")
extern "C" __m256 _ZGVdN8v_tanhf(__m256);
namespace vatic::cpu {
namespace {
// y[i] = f(x[i]) over eight floats at a time, the tail through a zero-padded buffer.
template <typename F>
inline void map8(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float buf[8] = {};
    std::memcpy(buf, x + i, static_cast<size_t>(n - i) * 4);
    _mm256_store_ps(buf, f(_mm256_load_ps(buf)));
    std::memcpy(y + i, buf, static_cast<size_t>(n - i) * 4);
  }
}
void tanh_avx2(const float* x, float* y, int64_t n) {
  map8(x, y, n, _ZGVdN8v_tanhf);
}
void softcap_avx2(const float* x, float* y, int64_t n, float cap) {
  const __m256 c = _mm256_set1_ps(cap);
  map8(x, y, n, [c](__m256 v) { return _mm256_mul_ps(c, _ZGVdN8v_tanhf(_mm256_div_ps(v, c))); });
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
// Four rows side by side, each with sumsq_avx2's accumulators, additions and tail.
void sumsq_rows_avx2(const float* x, int64_t ldx, int64_t R, int64_t n, double* out) {
  int64_t r = 0;
  for (; r + 4 <= R; r += 4) {
    const float* p[4] = {x + r * ldx, x + (r + 1) * ldx, x + (r + 2) * ldx, x + (r + 3) * ldx};
    __m256d a0[4], a1[4];
    for (int g = 0; g < 4; g++) a0[g] = a1[g] = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
#pragma GCC unroll 4
      for (int g = 0; g < 4; g++) {
        const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(p[g] + i)), hi = _mm256_cvtps_pd(_mm_loadu_ps(p[g] + i + 4));
        a0[g] = _mm256_fmadd_pd(lo, lo, a0[g]);
        a1[g] = _mm256_fmadd_pd(hi, hi, a1[g]);
      }
    for (int g = 0; g < 4; g++) {
      alignas(32) double t[4];
      _mm256_store_pd(t, _mm256_add_pd(a0[g], a1[g]));
      double s = (t[0] + t[1]) + (t[2] + t[3]);
      for (int64_t j = i; j < n; j++) s += static_cast<double>(p[g][j]) * p[g][j];
      out[r + g] = s;
    }
  }
  for (; r < R; r++) out[r] = sumsq_avx2(x + r * ldx, n);
}
// The masks of the first m < 8 lanes.
inline __m256i lanes8(int64_t m) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(m)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline __m256 widen8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
// One vector of norm_rows: x·inv·w (w the weights' vector, or none), then the residual step. The empty asm keeps
// GCC from fusing the product into the add (it contracts vector intrinsics too).
inline __m256 norm8(__m256 x, __m256 inv, const __m256* w, const __m256* res, __m256 s, bool scaled) {
  __m256 v = _mm256_mul_ps(x, inv);
  if (w) v = _mm256_mul_ps(v, *w);
  if (!res) return v;
  __asm__("" : "+x"(v));
  v = _mm256_add_ps(*res, v);
  return scaled ? _mm256_mul_ps(v, s) : v;
}
void norm_rows_avx2(const NormRows& a) {
  const __m256 s = _mm256_set1_ps(a.s);
  const bool scaled = a.s != 1.0f;
  for (int64_t r = 0; r < a.R; r++) {
    const float* x = a.x + r * a.ldx;
    const float* res = a.res ? a.res + r * a.ldr : nullptr;
    float* y = a.y + r * a.ldy;
    const __m256 inv = _mm256_set1_ps(a.inv[r]);
    int64_t i = 0;
    for (; i + 8 <= a.n; i += 8) {
      __m256 w = _mm256_setzero_ps(), rv = _mm256_setzero_ps();
      if (a.wf) w = _mm256_loadu_ps(a.wf + i);
      else if (a.wb) w = widen8(a.wb + i);
      if (res) rv = _mm256_loadu_ps(res + i);
      _mm256_storeu_ps(y + i, norm8(_mm256_loadu_ps(x + i), inv, a.wf || a.wb ? &w : nullptr, res ? &rv : nullptr,
                                    s, scaled));
    }
    if (i < a.n) {
      const __m256i m = lanes8(a.n - i);
      __m256 w = _mm256_setzero_ps(), rv = _mm256_setzero_ps();
      if (a.wf) {
        w = _mm256_maskload_ps(a.wf + i, m);
      } else if (a.wb) {
        alignas(16) uint16_t b[8] = {};
        std::memcpy(b, a.wb + i, static_cast<size_t>(a.n - i) * 2);
        w = widen8(b);
      }
      if (res) rv = _mm256_maskload_ps(res + i, m);
      _mm256_maskstore_ps(y + i, m, norm8(_mm256_maskload_ps(x + i, m), inv, a.wf || a.wb ? &w : nullptr,
                                          res ? &rv : nullptr, s, scaled));
    }
  }
}
// Each product rounded on its own (the empty asm), as in the scalar expression built without FMA.
inline void rope8(float* p, float* q, __m256 c, __m256 s) {
  const __m256 x0 = _mm256_loadu_ps(p), x1 = _mm256_loadu_ps(q);
  __m256 a = _mm256_mul_ps(x0, c), b = _mm256_mul_ps(x1, s), e = _mm256_mul_ps(x1, c), f = _mm256_mul_ps(x0, s);
  __asm__("" : "+x"(a), "+x"(b), "+x"(e), "+x"(f));
  _mm256_storeu_ps(p, _mm256_sub_ps(a, b));
  _mm256_storeu_ps(q, _mm256_add_ps(e, f));
}
void rope_neox_avx2(float* v, int64_t ldv, int64_t rows, int64_t half, const float* c, const float* s, int64_t n) {
  for (int64_t r = 0; r < rows; r++) {
    float* p = v + r * ldv;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) rope8(p + i, p + i + half, _mm256_loadu_ps(c + i), _mm256_loadu_ps(s + i));
    if (i < n) {
      // The tail through buffers.
      alignas(32) float b0[8] = {}, b1[8] = {}, bc[8] = {}, bs[8] = {};
      const size_t m = static_cast<size_t>(n - i) * 4;
      std::memcpy(b0, p + i, m);
      std::memcpy(b1, p + i + half, m);
      std::memcpy(bc, c + i, m);
      std::memcpy(bs, s + i, m);
      rope8(b0, b1, _mm256_load_ps(bc), _mm256_load_ps(bs));
      std::memcpy(p + i, b0, m);
      std::memcpy(p + i + half, b1, m);
    }
  }
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
// y[i] = f(x[i]) over sixteen floats at a time, the tail masked.
template <typename F>
inline void map16(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
  }
}
void tanh_avx512(const float* x, float* y, int64_t n) {
  map16(x, y, n, _ZGVeN16v_tanhf);
}
void softcap_avx512(const float* x, float* y, int64_t n, float cap) {
  const __m512 c = _mm512_set1_ps(cap);
  map16(x, y, n, [c](__m512 v) { return _mm512_mul_ps(c, _ZGVeN16v_tanhf(_mm512_div_ps(v, c))); });
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
// G rows side by side, each with sumsq_avx512's accumulators, tail and reduction.
template <int G>
inline void sumsq_group_avx512(const float* x, int64_t ldx, int64_t n, double* out) {
  __m512d a0[G], a1[G];
#pragma GCC unroll 4
  for (int g = 0; g < G; g++) a0[g] = a1[g] = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
      const float* p = x + g * ldx + i;
      const __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(p)), hi = _mm512_cvtps_pd(_mm256_loadu_ps(p + 8));
      a0[g] = _mm512_fmadd_pd(lo, lo, a0[g]);
      a1[g] = _mm512_fmadd_pd(hi, hi, a1[g]);
    }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
      const __m512 v = _mm512_maskz_loadu_ps(m, x + g * ldx + i);
      const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
      const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
      a0[g] = _mm512_fmadd_pd(lo, lo, a0[g]);
      a1[g] = _mm512_fmadd_pd(hi, hi, a1[g]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; g++) out[g] = _mm512_reduce_add_pd(_mm512_add_pd(a0[g], a1[g]));
}
void sumsq_rows_avx512(const float* x, int64_t ldx, int64_t R, int64_t n, double* out) {
  int64_t r = 0;
  for (; r + 4 <= R; r += 4) sumsq_group_avx512<4>(x + r * ldx, ldx, n, out + r);
  for (; r + 2 <= R; r += 2) sumsq_group_avx512<2>(x + r * ldx, ldx, n, out + r);
  if (r < R) sumsq_group_avx512<1>(x + r * ldx, ldx, n, out + r);
}
// One vector of norm_rows (see norm8 in the AVX2 part).
inline __m512 norm16(__m512 x, __m512 inv, const __m512* w, const __m512* res, __m512 s, bool scaled) {
  __m512 v = _mm512_mul_ps(x, inv);
  if (w) v = _mm512_mul_ps(v, *w);
  if (!res) return v;
  __asm__("" : "+v"(v));
  v = _mm512_add_ps(*res, v);
  return scaled ? _mm512_mul_ps(v, s) : v;
}
void norm_rows_avx512(const NormRows& a) {
  const __m512 s = _mm512_set1_ps(a.s);
  const bool scaled = a.s != 1.0f, weighted = a.wf || a.wb;
  for (int64_t r = 0; r < a.R; r++) {
    const float* x = a.x + r * a.ldx;
    const float* res = a.res ? a.res + r * a.ldr : nullptr;
    float* y = a.y + r * a.ldy;
    const __m512 inv = _mm512_set1_ps(a.inv[r]);
    for (int64_t i = 0; i < a.n; i += 16) {
      const __mmask16 m = a.n - i >= 16 ? static_cast<__mmask16>(0xFFFF)
                                        : static_cast<__mmask16>((1u << (a.n - i)) - 1);
      __m512 w = _mm512_setzero_ps(), rv = _mm512_setzero_ps();
      if (a.wf) w = _mm512_maskz_loadu_ps(m, a.wf + i);
      else if (a.wb) w = widen16(a.wb + i, m);
      if (res) rv = _mm512_maskz_loadu_ps(m, res + i);
      _mm512_mask_storeu_ps(y + i, m, norm16(_mm512_maskz_loadu_ps(m, x + i), inv, weighted ? &w : nullptr,
                                             res ? &rv : nullptr, s, scaled));
    }
  }
}
// rope8's operations, 16 lanes; m: the lanes to write.
inline void rope16(float* p, float* q, __m512 c, __m512 s, __mmask16 m) {
  const __m512 x0 = _mm512_maskz_loadu_ps(m, p), x1 = _mm512_maskz_loadu_ps(m, q);
  __m512 a = _mm512_mul_ps(x0, c), b = _mm512_mul_ps(x1, s), e = _mm512_mul_ps(x1, c), f = _mm512_mul_ps(x0, s);
  __asm__("" : "+v"(a), "+v"(b), "+v"(e), "+v"(f));
  _mm512_mask_storeu_ps(p, m, _mm512_sub_ps(a, b));
  _mm512_mask_storeu_ps(q, m, _mm512_add_ps(e, f));
}
// A vector's lanes i.. and i + half.. never overlap: n <= half.
void rope_neox_avx512(float* v, int64_t ldv, int64_t rows, int64_t half, const float* c, const float* s, int64_t n) {
  for (int64_t r = 0; r < rows; r++) {
    float* p = v + r * ldv;
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
      rope16(p + i, p + i + half, _mm512_maskz_loadu_ps(m, c + i), _mm512_maskz_loadu_ps(m, s + i), m);
    }
  }
}
}  // namespace
}  // namespace vatic::cpu
#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace vatic::cpu {
void fill_vmath_generic(Kernels& k) {
  k.tanh = tanh_generic;
  k.softcap = softcap_generic;
  k.gelu_tanh = gelu_tanh_generic;
  k.sumsq = sumsq_generic;
  k.sumsq_rows = sumsq_rows_generic;
  k.norm_rows = norm_rows_generic;
  k.rope_neox = rope_neox_generic;
}
void fill_vmath_avx2(Kernels& k) {
  k.tanh = tanh_avx2;
  k.softcap = softcap_avx2;
  k.gelu_tanh = gelu_tanh_avx2;
  k.sumsq = sumsq_avx2;
  k.sumsq_rows = sumsq_rows_avx2;
  k.norm_rows = norm_rows_avx2;
  k.rope_neox = rope_neox_avx2;
}
void fill_vmath_avx512(Kernels& k) {
  k.tanh = tanh_avx512;
  k.softcap = softcap_avx512;
  k.gelu_tanh = gelu_tanh_avx512;
  k.sumsq = sumsq_avx512;
  k.sumsq_rows = sumsq_rows_avx512;
  k.norm_rows = norm_rows_avx512;
  k.rope_neox = rope_neox_avx512;
}
}  // namespace vatic::cpu
