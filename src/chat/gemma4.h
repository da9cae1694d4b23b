#pragma once
// Gemma 4 chat format: renderer (the official chat_template.jinja, E2B/E4B and 26B/31B variants) and the
// streaming output parser.
//
// Prompt: <bos><|turn>system\n[<|think|>\n][system text][<|tool>declaration:...<tool|>...]<turn|>\n
//         <|turn>user\n...<turn|>\n<|turn>model\n[<|channel>thought\n...\n<channel|>][<|tool_call>call:NAME{...}
//         <tool_call|>][<|tool_response>response:NAME{value:...}<tool_response|>]...<turn|>\n<|turn>model\n
// Model output: [<|channel>thought\n...<channel|>]content[<|tool_call>call:NAME{...}<tool_call|>]
#include <optional>
#include <string>
#include <string_view>

#include "chat/parser.h"
#include "chat/renderer.h"
#include "chat/tagged_format.h"

namespace vatic::chat {

class Gemma4Renderer final : public Renderer {
 public:
  // large: the 26B/31B template, which appends an empty thought channel after the generation prompt when
  // thinking is off.
  Gemma4Renderer(std::string name, bool large) : name_(std::move(name)), large_(large) {}

  std::string_view name() const override { return name_; }
  std::string render(const std::vector<Message>& messages, const std::vector<Tool>& tools,
                     const RenderOptions& options) const override;
  bool default_think() const override { return false; }
  bool prompt_opens_thinking(std::string_view prompt) const override;

 private:
  std::string name_;
  bool large_;
};

class Gemma4Parser final : public StepParser {
 public:
  explicit Gemma4Parser(const ParserOptions& options);

 private:
  enum class State { Content, ChannelName, Thinking, ToolCall, AfterToolCall };
  bool step(bool final, ParsedChunk& out) override;
  void emit_thinking(std::string_view text, ParsedChunk& out) const;

  bool think_;
  State state_;
};

namespace gemma4 {

// Gemma's compact value syntax (the template's format_argument): strings as <|"|>text<|"|>, numbers,
// true/false/null bare, objects {key:value,...} with keys sorted like Jinja's dictsort (case-insensitive)
// and quoted only when escape_keys is set, arrays [a,b].
std::string format_argument(const ordered_json& value, bool escape_keys);

// One tool declaration as the template writes it between <|tool> and <tool|>.
std::string format_declaration(const Tool& tool);

// Converts compact-syntax arguments "{key:value,...}" back to a JSON object. Accepts <|"|>- or JSON-quoted
// strings and keys, bare keys, bare numbers/true/false/null, nested objects and arrays, whitespace between
// tokens. Returns nullopt for anything else.
std::optional<ordered_json> parse_arguments(std::string_view text);

// Parses the text between <|tool_call> and <tool_call|>: "call:NAME{...}". nullopt if malformed.
std::optional<ToolCall> parse_call(std::string_view text);

}  // namespace gemma4
}  // namespace vatic::chat
