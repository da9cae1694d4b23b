#pragma once
// Group-wise affine quantization (the MLX "affine" format), int8 and int4.
//
// For a weight W with last dimension K and group size g (64 by default; 32 accepted), each run of g consecutive
// elements of a row shares a scale s and a bias b, and
//     w ≈ s · q + b,        q ∈ [0, 2^bits − 1].
// Stored tensors for a weight whose base name is X (X = the weight name without a trailing ".weight"):
//     X.weight  U32   [..., N, K*bits/32]   packed q, little-endian within each u32 word: element i of a row
//                                          sits at bits (i % (32/bits))·bits of word i / (32/bits)
//     X.scales  BF16  [..., N, K/g]
//     X.biases  BF16  [..., N, K/g]
// (for a tensor not named "*.weight", e.g. Gemma 4's stacked "experts.gate_up_proj", the packed tensor keeps its
// name Y and the others are Y.scales / Y.biases). Leading dimensions (stacked experts [E, N, K]) are kept.
//
// The safetensors file (store blob) holding quantized tensors says so in its "__metadata__" (string values):
//     "quantization": "int8" | "int4"     when every quantized tensor of the file uses that type,
//     "group_size":   "64" | "32"         and that group size;
//     "<packed tensor name>": "int8:64"   per tensor, always written too, so files mixing widths are exact.
// A reader recognises a quantized tensor by its dtype (U32) and its X.scales / X.biases siblings, then takes the
// per-tensor key, falling back to the file-wide pair. The writer always writes both.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "tensor/tensor.h"

namespace vatic {

enum class QuantType : uint8_t { None, Int8, Int4 };

int quant_bits(QuantType t);              // 8, 4; 0 for None
const char* quant_type_name(QuantType t);  // "int8", "int4", "" for None
// Parses a user-given type, case-insensitive: int8 / q8 / fp8 (an alias kept from ollama: it means int8 affine),
// int4 / q4 / fp4; "" and "none" → None. Throws vatic::InvalidInput listing the supported types otherwise.
// `what` names the option in the message ("--quantize").
QuantType parse_quant_type(const std::string& text, const std::string& what = "quantization type");
// The supported types, for messages: "int8, int4 (aliases q8, q4)".
std::string supported_quant_types();

constexpr int kDefaultGroupSize = 64;
bool valid_group_size(int g);  // 32 or 64

struct QuantizedTensor {
  Tensor packed;  // U32 [..., N, K*bits/32]
  Tensor scales;  // BF16 [..., N, K/group]
  Tensor biases;  // BF16 [..., N, K/group]
  int bits = 0;
  int group_size = 0;
  Shape logical_shape() const;  // [..., N, K]
};

// Quantizes a F32, BF16 or F16 host tensor of rank >= 2 (any strides). K must be a multiple of group_size.
// Throws vatic::InvalidInput for non-finite values, unsupported dtypes or shapes.
QuantizedTensor quantize(const Tensor& w, int bits, int group_size = kDefaultGroupSize);

// Reference dequantization to F32 (slow path; also what tests compare against).
Tensor dequantize(const QuantizedTensor& q);
Tensor dequantize(const Tensor& packed, const Tensor& scales, const Tensor& biases, int bits, int group_size);

// Reads the quantization of the packed tensor `tensor` from a safetensors __metadata__ map following the
// convention above (per-tensor key, else the file-wide pair). Returns nullopt when the metadata says nothing about
// it. Throws InvalidInput for a malformed entry.
struct TensorQuant {
  QuantType type = QuantType::None;
  int group_size = 0;
};
std::optional<TensorQuant> tensor_quant_from_metadata(const std::map<std::string, std::string>& metadata,
                                                      const std::string& tensor);
// The base name of a quantizable weight: "a.b.weight" → "a.b"; other names unchanged.
std::string quant_base_name(const std::string& weight_name);

}  // namespace vatic
