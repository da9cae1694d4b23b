#pragma once
// Streaming output parsers: split generated text into content, thinking and tool calls as it arrives.
//
// feed() may be given any split of the output (down to single bytes); a marker split across chunks is
// still recognized because only a possible-marker suffix (plus whitespace the format trims before a
// marker) is held back. The concatenation of all pieces returned by feed()/finish() does not depend on
// how the text was chunked. Text that does not form a recognized marker or a well-formed tool call stays
// content.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/types.h"

namespace vatic::chat {

struct ParsedChunk {
  std::string content;
  std::string thinking;
  std::vector<ToolCall> tool_calls;

  bool empty() const { return content.empty() && thinking.empty() && tool_calls.empty(); }
  // Appends another chunk's pieces.
  void append(ParsedChunk&& other);
};

struct ParserOptions {
  // Whether thinking was enabled for the request; unset means the format's default (Gemma 4: off,
  // GLM-4.7: on). Gemma 4 discards thought-channel text when thinking is off (as ollama does).
  std::optional<bool> think;
  // Whether the prompt already opened a thinking block (see Renderer::prompt_opens_thinking). Unset:
  // GLM-4.7 assumes it did exactly when thinking is on (its generation prompt ends with <think>);
  // Gemma 4 assumes it did not.
  std::optional<bool> starts_in_thinking;
  // Declared tools; GLM-4.7 uses their parameter schemas to type argument values.
  std::vector<Tool> tools;
};

class Parser {
 public:
  virtual ~Parser() = default;
  // Consumes the next piece of generated text and returns what became certain.
  virtual ParsedChunk feed(std::string_view chunk) = 0;
  // End of generation: flushes everything held back (an unterminated tool call is parsed if it is
  // complete apart from its closing marker, otherwise it is returned as content).
  virtual ParsedChunk finish() = 0;
};

// Parser names: "gemma4", "glm-4.7". Throws InvalidInput listing the valid names.
std::unique_ptr<Parser> make_parser(std::string_view name, const ParserOptions& options = {});
std::vector<std::string> parser_names();

}  // namespace vatic::chat
