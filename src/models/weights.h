#pragma once
// Loading weights from a TensorStore into the forms model code uses.
#include <string>

#include "backend/linear.h"
#include "formats/safetensors.h"

namespace vatic {

// A linear map named BASE (tensor BASE.weight, dense [out, in], or quantized: BASE.weight packed U32 with
// BASE.scales / BASE.biases; see quant/quantize.h for the convention). Checks the logical shape.
Linear load_linear(const TensorStore& ts, const std::string& base, int64_t out, int64_t in);
// Stacked experts: NAME is the full tensor name (no ".weight" suffix in Gemma 4's layout); shape [E, out, in].
Linear load_stacked(const TensorStore& ts, const std::string& name, int64_t experts, int64_t out, int64_t in);
// Small tensors used elementwise (norm weights, scalars) as F32 copies.
Tensor load_f32(const TensorStore& ts, const std::string& name, const Shape& shape);
float load_scalar(const TensorStore& ts, const std::string& name);

}  // namespace vatic
