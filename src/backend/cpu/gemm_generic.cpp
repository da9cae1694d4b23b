// Portable (scalar) instantiation of the tiled matmul kernels: the reference every SIMD path is tested against
// besides the double-precision references of tests/backend.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backend/cpu/simd.h"

namespace vatic::cpu {
namespace {

struct V {
  using vec = float;
  static constexpr int W = 1, NR = 4, TR_DENSE = 4, TR_QUANT = 4, TR_ROW = 4;
  static constexpr int PC = 4, PT = 4;
  static vec zero() { return 0.0f; }
  static vec set1(float f) { return f; }
  static vec loadx(const float* p) { return *p; }
  static void store(float* p, vec v) { *p = v; }
  static vec load_w(const float* p) { return *p; }
  static vec load_w(const uint16_t* p) {
    uint32_t u = static_cast<uint32_t>(*p) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
  }
  static vec add(vec a, vec b) { return a + b; }
  static vec fma(vec a, vec b, vec c) { return a * b + c; }
  // 2W floats -> the even one at out, the odd one at out + W.
  static void deinterleave(const float* p, float* out) {
    out[0] = p[0];
    out[1] = p[1];
  }
  // 2W bf16 values: the even one and the odd one.
  static void load_w2(const uint16_t* p, vec& even, vec& odd) {
    even = load_w(p);
    odd = load_w(p + 1);
  }
  // 2W bf16 values as one 32-bit word, and such a word split into the even value (low half) and the odd one.
  static vec load_pairs(const uint16_t* p) {
    float f;
    __builtin_memcpy(&f, p, 4);
    return f;
  }
  static void split_pairs(vec v, vec& even, vec& odd) {
    uint32_t u, e, o;
    __builtin_memcpy(&u, &v, 4);
    e = u << 16;
    o = u & 0xFFFF0000u;
    __builtin_memcpy(&even, &e, 4);
    __builtin_memcpy(&odd, &o, 4);
  }
  // A 32-bit word of codes, and the code (w >> shift) & mask of such a word as a float.
  static vec load_words(const uint8_t* p) {
    float f;
    __builtin_memcpy(&f, p, 4);
    return f;
  }
  static vec code(vec w, int shift, uint32_t mask) {
    uint32_t u;
    __builtin_memcpy(&u, &w, 4);
    return static_cast<float>((u >> shift) & mask);
  }
  static float reduce(vec v) { return v; }
  static void reduce4(vec a, vec b, vec c, vec d, float* out) {
    out[0] = reduce(a), out[1] = reduce(b), out[2] = reduce(c), out[3] = reduce(d);
  }
  static void transpose(vec*) {}
  static vec q8(const uint8_t* p) { return static_cast<float>(*p); }
  static vec q4lo(const uint8_t* p) { return static_cast<float>(*p & 15); }
  static vec q4hi(const uint8_t* p) { return static_cast<float>(*p >> 4); }
  static constexpr bool LUT4 = false;
  static vec lut4(vec s, vec) { return s; }
  static vec q4lo_lut(const uint8_t* p, vec) { return q4lo(p); }
  static vec q4hi_lut(const uint8_t* p, vec) { return q4hi(p); }
};

#include "backend/cpu/gemm_impl.h"

}  // namespace

void fill_gemm_generic(Kernels& k) {
  k.gemm_bf16 = gemm_bf16;
  k.gemm_f32 = gemm_f32;
  k.qgemm = qgemm;
}

}  // namespace vatic::cpu
