#include "chat/format.h"

#include "chat/gemma3.h"
#include "chat/gemma4.h"
#include "chat/glm47.h"
#include "chat/llama3.h"
#include "chat/parser.h"
#include "chat/qwen3.h"
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

std::vector<std::string> renderer_names() {
  return {"gemma4", "gemma4-small", "gemma4-large", "glm-4.7", "llama3", "qwen3", "gemma3"};
}

std::vector<std::string> parser_names() {
  return {"gemma4", "glm-4.7", "llama3", "qwen3", "gemma3", "raw"};
}

std::unique_ptr<Renderer> make_renderer(std::string_view name) {
  if (name == "gemma4" || name == "gemma4-small")
    return std::make_unique<Gemma4Renderer>(std::string(name), false);
  if (name == "gemma4-large") return std::make_unique<Gemma4Renderer>(std::string(name), true);
  if (name == "glm-4.7") return std::make_unique<Glm47Renderer>();
  if (name == "llama3") return std::make_unique<Llama3Renderer>();
  if (name == "qwen3") return std::make_unique<Qwen3Renderer>();
  if (name == "gemma3") return std::make_unique<Gemma3Renderer>();
  throw InvalidInput(fmt::format("unknown renderer \"{}\" (valid: {})", name, join(renderer_names())));
}

std::unique_ptr<Parser> make_parser(std::string_view name, const ParserOptions& options) {
  if (name == "gemma4") return std::make_unique<Gemma4Parser>(options);
  if (name == "glm-4.7") return std::make_unique<Glm47Parser>(options);
  if (name == "llama3") return std::make_unique<Llama3Parser>(options);
  if (name == "qwen3") return std::make_unique<Qwen3Parser>(options);
  // gemma3 has no thinking or tool-call markup to split out; raw (plain completion models) none at all.
  if (name == "gemma3" || name == "raw") return std::make_unique<TextParser>();
  throw InvalidInput(fmt::format("unknown parser \"{}\" (valid: {})", name, join(parser_names())));
}

ParserCapabilities parser_capabilities(std::string_view parser) {
  if (parser == "gemma4" || parser == "glm-4.7" || parser == "qwen3") return {true, true};
  if (parser == "llama3") return {true, false};
  return {};
}

bool template_matches_renderer(std::string_view renderer, std::string_view chat_template) {
  // A marker each format's official template writes; a template without it follows some other format.
  std::string_view marker;
  if (renderer == "gemma4" || renderer == "gemma4-small" || renderer == "gemma4-large")
    marker = "<|turn>";
  else if (renderer == "glm-4.7")
    marker = "[gMASK]";
  else if (renderer == "llama3")
    marker = "<|start_header_id|>";
  else if (renderer == "qwen3")
    marker = "<|im_start|>";
  else if (renderer == "gemma3")
    marker = "<start_of_turn>";
  else
    return false;
  return chat_template.find(marker) != std::string_view::npos;
}

}  // namespace vatic::chat
