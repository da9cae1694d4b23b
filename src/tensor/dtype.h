#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "tensor/device.h"

namespace vatic {

// Element types. Packed quantized weights are stored as U32 words with separate scale/bias tensors
// (see quant/), so the element types here stay plain.
enum class DType : uint8_t { F32, BF16, F16, I32, I64, U8, I8, U32, F8_E4M3 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // safetensors spelling: "F32", "BF16", ...
// Parses a safetensors dtype name; returns false when unknown.
bool parse_dtype(const std::string& name, DType* out);


// Scalar conversions used by kernels and loaders.
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round-to-nearest-even, as PyTorch does.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float f8e4m3_to_f32(uint8_t v);

}  // namespace vatic
