#include "chat/format.h"

#include "chat/gemma4.h"
#include "chat/glm47.h"
#include "chat/parser.h"
#include "chat/renderer.h"
#include "util/error.h"

namespace vatic::chat {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::vector<std::string> renderer_names() { return {"gemma4", "gemma4-small", "gemma4-large", "glm-4.7"}; }

std::vector<std::string> parser_names() { return {"gemma4", "glm-4.7"}; }

std::unique_ptr<Renderer> make_renderer(std::string_view name) {
  if (name == "gemma4" || name == "gemma4-small") return std::make_unique<Gemma4Renderer>(std::string(name), false);
  if (name == "gemma4-large") return std::make_unique<Gemma4Renderer>(std::string(name), true);
  if (name == "glm-4.7") return std::make_unique<Glm47Renderer>();
  throw InvalidInput(fmt::format("unknown renderer \"{}\" (valid: {})", name, join(renderer_names())));
}

std::unique_ptr<Parser> make_parser(std::string_view name, const ParserOptions& options) {
  if (name == "gemma4") return std::make_unique<Gemma4Parser>(options);
  if (name == "glm-4.7") return std::make_unique<Glm47Parser>(options);
  throw InvalidInput(fmt::format("unknown parser \"{}\" (valid: {})", name, join(parser_names())));
}

ChatFormat default_chat_format(std::string_view architecture, const json& config) {
  if (architecture == "Gemma4ForConditionalGeneration" || architecture == "Gemma4ForCausalLM") {
    const json* text = &config;
    if (config.is_object()) {
      if (auto it = config.find("text_config"); it != config.end() && it->is_object()) text = &*it;
    }
    bool per_layer_inputs = false;
    if (text->is_object()) {
      auto it = text->find("hidden_size_per_layer_input");
      per_layer_inputs = it != text->end() && it->is_number() && it->get<double>() > 0;
    }
    return {per_layer_inputs ? "gemma4-small" : "gemma4-large", "gemma4"};
  }
  if (architecture == "Glm4MoeLiteForCausalLM") return {"glm-4.7", "glm-4.7"};
  throw InvalidInput(fmt::format(
      "no chat format for architecture \"{}\" (supported: Gemma4ForConditionalGeneration, Gemma4ForCausalLM, "
      "Glm4MoeLiteForCausalLM)",
      architecture));
}

}  // namespace vatic::chat
