#pragma once
// Qwen3 chat format: ChatML renderer (the official Qwen3 chat template) and the streaming output parser.
//
// Prompt: [<|im_start|>system\n[system text\n\n]# Tools ...<tools>\n{tool json}...\n</tools>...<|im_end|>\n]
//         <|im_start|>user\ntext<|im_end|>\n<|im_start|>assistant\n[<think>\n...\n</think>\n\n]content
//         [\n<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>]<|im_end|>\n
//         <|im_start|>user\n<tool_response>\n...\n</tool_response><|im_end|>\n<|im_start|>assistant\n
//         [<think>\n\n</think>\n\n when thinking is off]
// Model output: [<think>\nreasoning\n</think>\n\n]content[<tool_call>\n{json}\n</tool_call>]...
#include <optional>
#include <string>
#include <string_view>

#include "chat/parser.h"
#include "chat/renderer.h"
#include "chat/tagged_format.h"

namespace vatic::chat {

class Qwen3Renderer final : public Renderer {
 public:
  std::string_view name() const override { return "qwen3"; }
  std::string render(const std::vector<Message>& messages, const std::vector<Tool>& tools,
                     const RenderOptions& options) const override;
  bool default_think() const override { return true; }
  bool prompt_opens_thinking(std::string_view) const override { return false; }
};

class Qwen3Parser final : public ThinkToolParser {
 public:
  explicit Qwen3Parser(const ParserOptions& options);

 private:
  std::optional<ToolCall> parse_call(std::string_view body) const override;
};

namespace qwen3 {
// The JSON between <tool_call> and </tool_call>: {"name": ..., "arguments": {...}} (arguments may also be a
// string holding a JSON object, or "parameters"). nullopt if malformed.
std::optional<ToolCall> parse_call(std::string_view text);
}  // namespace qwen3

}  // namespace vatic::chat
