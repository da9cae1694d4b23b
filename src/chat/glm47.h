#pragma once
// GLM-4.7 (GLM-4.7-Flash, Glm4MoeLiteForCausalLM) chat format: renderer (the official chat_template.jinja)
// and the streaming output parser.
//
// Prompt: [gMASK]<sop>[<|system|>\n# Tools ...<tools>\n{json}\n</tools>...][<|system|>text]<|user|>text
//         <|assistant|>(<think>reasoning</think>|</think>)content[<tool_call>NAME<arg_key>k</arg_key>
//         <arg_value>v</arg_value></tool_call>]<|observation|><tool_response>...</tool_response>...
//         <|assistant|>(<think>|</think>)
// Model output (thinking on, prompt ends with <think>): reasoning</think>content[<tool_call>...</tool_call>]
#include <string>
#include <string_view>

#include "chat/parser.h"
#include "chat/renderer.h"
#include "chat/tagged_format.h"

namespace vatic::chat {

class Glm47Renderer final : public Renderer {
 public:
  std::string_view name() const override { return "glm-4.7"; }
  std::string render(const std::vector<Message>& messages, const std::vector<Tool>& tools,
                     const RenderOptions& options) const override;
  bool default_think() const override { return true; }
  bool prompt_opens_thinking(std::string_view prompt) const override;
};

class Glm47Parser final : public ThinkToolParser {
 public:
  explicit Glm47Parser(const ParserOptions& options);

 private:
  std::optional<ToolCall> parse_call(std::string_view body) const override;

  std::vector<Tool> tools_;  // their parameter schemas type the argument values
};

namespace glm47 {

// Parses the text between <tool_call> and </tool_call>: NAME<arg_key>k</arg_key><arg_value>v</arg_value>...
// (whitespace allowed between elements). Argument values are typed by the declared parameter schema when
// the tool and parameter are known (string/integer/number/boolean/array/object, as ollama does); otherwise a
// value that is valid JSON becomes that JSON value and anything else a string. nullopt if malformed.
std::optional<ToolCall> parse_call(std::string_view text, const std::vector<Tool>& tools);

}  // namespace glm47
}  // namespace vatic::chat
