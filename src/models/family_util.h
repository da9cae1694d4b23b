#pragma once
// Config reading the Llama-like families share (models/<family>/ build their DecoderSpec with these).
#include <string>

#include "models/decoder.h"

namespace vatic {

// The fields every Llama-like config has: sizes, heads (head_dim defaults to hidden / heads), norms, token
// ids, context length, tie_word_embeddings; layers all full attention and dense.
DecoderSpec common_decoder_spec(const Fields& f, const std::string& architecture);
// "silu" / "gelu_pytorch_tanh" (InvalidInput for others).
Unary parse_activation(const Fields& f, const std::string& key, const std::string& def);
// The model's RoPE: `rope_parameters` (transformers 5, possibly per layer type under `layer_type`), or
// `rope_theta` + `rope_scaling`.
blocks::Rope parse_model_rope(const Fields& f, const std::string& layer_type = "",
                              double default_theta = 10000.0);

}  // namespace vatic
