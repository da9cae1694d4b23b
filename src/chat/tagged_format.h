#pragma once
// Pieces the tag-based chat formats share (Gemma 4, GLM-4.7, Qwen3, Llama 3): the step-by-step streaming
// parser and its tool-call state, the <think> / <tool_call> tag machine of the ChatML-like formats, JSON tool
// calls ({"name": ..., "arguments": {...}}) both ways, and reasoning left inline in an assistant message.
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "chat/parser.h"
#include "chat/types.h"

namespace vatic::chat {

// A parser that consumes its buffer in steps: feed() appends the chunk and runs step(false) until it returns
// false; finish() does the same with step(true) and drops what is left.
class StepParser : public Parser {
 public:
  ParsedChunk feed(std::string_view chunk) final;
  ParsedChunk finish() final;

 protected:
  // Consumes what it can of buf_; returns whether another step may make progress.
  virtual bool step(bool final, ParsedChunk& out) = 0;

  // Drops leading whitespace of buf_ while skip_ws_ is set; false when nothing is left to look at yet.
  bool skip_leading_ws();

  struct ToolCallStep {
    bool done = false;    // the call ended (its closing marker, or the end of the output)
    bool parsed = false;  // it was a well-formed call (now in out.tool_calls) rather than text
    bool more = false;    // buf_ holds text after it
  };
  // The body of a tool call after `open` (which the caller consumed, keeping the whitespace it trimmed before
  // it in tool_ws_), up to `close`. A body that `parse` rejects goes back to the content as the text it was.
  ToolCallStep take_tool_call(bool final, std::string_view open, std::string_view close,
                              const std::function<std::optional<ToolCall>(std::string_view)>& parse,
                              ParsedChunk& out);

  std::string buf_;
  std::string
      tool_ws_;  // whitespace trimmed before a tool-call marker, restored if the call turns out malformed
  bool skip_ws_ = false;

 private:
  std::size_t scan_from_ = 0;  // where to resume looking for the end of a tool call in buf_
};

// Output of the ChatML-like formats: [<think>]reasoning</think> content <tool_call>...</tool_call> ...
struct ThinkToolTags {
  std::string_view think_open = "<think>", think_close = "</think>";
  std::string_view call_open = "<tool_call>", call_close = "</tool_call>";
  // Content that follows no <think> at all keeps its leading whitespace (GLM-4.7) or loses it (Qwen3).
  bool keep_ws_without_think = false;
  // Reasoning cut off by the end of the output is right-trimmed (Qwen3) or kept as it is (GLM-4.7).
  bool rstrip_unterminated_thinking = false;
};

class ThinkToolParser : public StepParser {
 protected:
  ThinkToolParser(const ThinkToolTags& tags, bool starts_in_thinking);
  // The text between the tool-call tags as a call; nullopt keeps it as content.
  virtual std::optional<ToolCall> parse_call(std::string_view body) const = 0;

 private:
  enum class State { LookingForThink, Thinking, Content, ToolCall };
  bool step(bool final, ParsedChunk& out) final;

  ThinkToolTags tags_;
  State state_;
};

namespace detail {

// {"name": "NAME", "KEY": ARGS} with KEY `arguments_key`, as the Qwen3 and Llama 3 templates write a call.
std::string tool_call_json(const ToolCall& call, std::string_view arguments_key);
// A call from a JSON object {"name": ..., KEY: {...}}, KEY the first of `argument_keys` it holds (none: no
// arguments). With `string_arguments` the arguments may also be a string holding a JSON object. nullopt when
// the object is not such a call.
std::optional<ToolCall> tool_call_from_json(const ordered_json& j,
                                            std::initializer_list<const char*> argument_keys,
                                            bool string_arguments);

// Reasoning left inline in an assistant message, "[...open]reasoning close answer": the reasoning (after the
// last `open` before the first `close`) and the answer (after the last `close`), each without the newlines
// next to the tags. False, and nothing set, when `content` holds no `close`.
bool split_inline_reasoning(std::string_view content, std::string_view open, std::string_view close,
                            std::string& reasoning, std::string& answer);

}  // namespace detail
}  // namespace vatic::chat
