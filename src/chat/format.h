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

// Which format a model uses is its family's default (models/registry.h) unless the Modelfile names one.
// Whether a checkpoint's own chat template (chat_template.jinja or tokenizer_config.json's chat_template)
// follows the format of `renderer` (a make_renderer name). False for unknown renderers.
bool template_matches_renderer(std::string_view renderer, std::string_view chat_template);

// What a parser recognises in the output: tool calls, thinking. Both false for unknown names.
struct ParserCapabilities {
  bool tools = false;
  bool thinking = false;
};
ParserCapabilities parser_capabilities(std::string_view parser);

}  // namespace vatic::chat
