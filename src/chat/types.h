#pragma once
// Chat data types shared by prompt renderers and output parsers.
//
// The server fills these from ollama (/api/chat) or OpenAI (/v1/chat/completions) requests; the
// from_json helpers accept both spellings. Tool-call arguments are kept as ordered JSON so that formats
// that render arguments in request order (GLM) reproduce the caller's order.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/json.h"

namespace vatic::chat {

// One function call made by the assistant.
struct ToolCall {
  std::string id;  // optional OpenAI tool_call id; used to resolve tool-result names
  std::string name;
  ordered_json arguments = ordered_json::object();  // always a JSON object

  // Accepts {"id"?, "type"?, "function": {"name", "arguments"}} or {"name", "arguments"}.
  // "arguments" may be an object, null, or a string holding a JSON object (OpenAI style).
  // Throws InvalidInput on a missing name or arguments that are not a JSON object.
  static ToolCall from_json(const ordered_json& j);
  // ollama shape: {"function": {"name", "arguments"}} (plus "id" when set).
  ordered_json to_json() const;

  bool operator==(const ToolCall&) const = default;
};

// Parses a JSON object given as text (OpenAI's tool_calls[].function.arguments).
// Empty or all-whitespace text gives {}. Throws InvalidInput when the text is not a JSON object.
ordered_json parse_tool_arguments(std::string_view text);

struct Message {
  std::string role;  // "system", "developer", "user", "assistant" or "tool"
  std::string content;
  std::string thinking;  // the assistant's reasoning, rendered back where the format keeps it
  std::vector<ToolCall> tool_calls;
  std::string tool_name;     // for role "tool": the function whose result this is
  std::string tool_call_id;  // for role "tool": OpenAI id of the call answered

  // Accepts ollama and OpenAI messages: content as a string, null, or a list of {"type":"text","text"}
  // parts; thinking as "thinking", "reasoning_content" or "reasoning"; tool name as "tool_name" or "name".
  static Message from_json(const ordered_json& j);

  bool operator==(const Message&) const = default;
};

// A function the model may call (OpenAI/ollama function declaration).
struct Tool {
  std::string name;
  std::string description;
  ordered_json parameters;  // JSON schema (usually {"type":"object","properties":{...},"required":[...]}); null if none

  // Accepts {"type":"function","function":{name, description, parameters}} or the bare function object.
  static Tool from_json(const ordered_json& j);
  // {"type":"function","function":{"name","description","parameters"}} (parameters omitted when null).
  ordered_json to_json() const;

  bool operator==(const Tool&) const = default;
};

struct RenderOptions {
  // Thinking on/off; unset means the format's default (Gemma 4: off, GLM-4.7: on).
  std::optional<bool> think;
  // Append the prompt that opens the model's turn.
  bool add_generation_prompt = true;
  // Keep the reasoning of assistant turns before the last user message. Unset means the format's default:
  // GLM-4.7 keeps it (ollama's behaviour, = clear_thinking=false in the official template; false gives the
  // official template's default of dropping it); Gemma 4 drops it (true = the template's preserve_thinking:
  // kept only on turns that made tool calls).
  std::optional<bool> preserve_thinking;
};

}  // namespace vatic::chat
