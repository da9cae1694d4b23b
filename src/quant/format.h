#pragma once
// How quantized tensors are described inside safetensors files.
#include <string>

#include "formats/safetensors.h"

namespace vatic {

struct QuantSpec {
  int bits = 0;        // 8 or 4
  int group_size = 0;  // 64 or 32
};

// The quantization of tensor NAME (a packed U32 weight) from its file's __metadata__.
QuantSpec quant_spec_of(const TensorStore& ts, const std::string& name);

}  // namespace vatic
