#pragma once
#include <string>
#include <vector>

#include "chat/parser.h"
#include "chat/types.h"

namespace vatic::chat::test {

inline Message msg(std::string role, std::string content) {
  Message m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}
inline Message user(std::string content) { return msg("user", std::move(content)); }
inline Message system(std::string content) { return msg("system", std::move(content)); }
inline Message assistant(std::string content, std::string thinking = "", std::vector<ToolCall> calls = {}) {
  Message m = msg("assistant", std::move(content));
  m.thinking = std::move(thinking);
  m.tool_calls = std::move(calls);
  return m;
}
inline Message tool_result(std::string content, std::string name = "") {
  Message m = msg("tool", std::move(content));
  m.tool_name = std::move(name);
  return m;
}
inline ToolCall call(std::string name, const char* args_json) {
  ToolCall tc;
  tc.name = std::move(name);
  tc.arguments = ordered_json::parse(args_json);
  return tc;
}

inline Tool weather_tool() {
  return Tool::from_json(ordered_json::parse(R"({"type": "function", "function": {"name": "get_weather",
    "description": "Get the current weather for a city",
    "parameters": {"type": "object", "properties": {
      "location": {"type": "string", "description": "City name"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["location"]}}})"));
}

inline Tool event_tool() {
  return Tool::from_json(ordered_json::parse(R"({"type": "function", "function": {"name": "create_event",
    "description": "Create a calendar event",
    "parameters": {"type": "object", "properties": {
      "title": {"type": "string", "description": "Event title"},
      "attendees": {"type": "array", "description": "People to invite", "items": {"type": "object",
        "properties": {"email": {"type": "string"}, "optional": {"type": "boolean"}}, "required": ["email"]}},
      "tags": {"type": "array", "items": {"type": "string"}},
      "duration": {"type": "number", "description": "Minutes", "nullable": true},
      "Reminder": {"type": "object", "properties": {"minutes": {"type": "integer"}}, "required": ["minutes"]},
      "priority": {"type": "integer", "enum": [1, 2, 3]}},
    "required": ["title", "attendees"]}}})"));
}

// Feeds `text` to a parser in pieces of `chunk` bytes (0 = all at once) and merges everything returned.
inline ParsedChunk parse_all(Parser& p, std::string_view text, std::size_t chunk) {
  ParsedChunk all;
  if (chunk == 0) {
    all.append(p.feed(text));
  } else {
    for (std::size_t i = 0; i < text.size(); i += chunk) all.append(p.feed(text.substr(i, chunk)));
  }
  all.append(p.finish());
  return all;
}

}  // namespace vatic::chat::test
