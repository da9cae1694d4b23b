#pragma once
// Which renderer and parser a model uses, decided at model creation from its HF architecture and config.
#include <string>
#include <string_view>

#include "util/json.h"

namespace vatic::chat {

struct ChatFormat {
  std::string renderer;  // a make_renderer() name
  std::string parser;    // a make_parser() name
  bool operator==(const ChatFormat&) const = default;
};

// Gemma4ForConditionalGeneration / Gemma4ForCausalLM: "gemma4-small" for the per-layer-embedding models
// (E2B/E4B: hidden_size_per_layer_input > 0, read from text_config when present), otherwise
// "gemma4-large" (26B-A4B, 31B); parser "gemma4".
// Glm4MoeLiteForCausalLM: renderer and parser "glm-4.7".
// Throws InvalidInput for other architectures, listing the supported ones.
ChatFormat default_chat_format(std::string_view architecture, const json& config);

}  // namespace vatic::chat
