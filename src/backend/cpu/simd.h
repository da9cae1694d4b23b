#pragma once
// Inner loops of the CPU backend, compiled for several instruction sets and chosen once at run time.
#include <cstdint>

namespace vatic::cpu {

struct Kernels {
  const char* isa;
  // sum_i x[i] * w[i]
  float (*dot_f32)(const float* x, const float* w, int64_t n);
  float (*dot_bf16)(const float* x, const uint16_t* w, int64_t n);
  // y[r] = dot(x + r*ldx, w) for r < 4 rows of x sharing one weight row (prefill reuse of a loaded row).
  void (*dot4_bf16)(const float* x, int64_t ldx, const uint16_t* w, int64_t n, float* y);
  void (*dot4_f32)(const float* x, int64_t ldx, const float* w, int64_t n, float* y);
  // y[i] += a * x[i]
  void (*axpy)(float a, const float* x, float* y, int64_t n);
};

const Kernels& kernels();

}  // namespace vatic::cpu
