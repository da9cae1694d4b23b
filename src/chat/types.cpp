#include "chat/types.h"

#include "chat/parser.h"
#include "chat/text.h"
#include "util/error.h"

namespace vatic::chat {

ordered_json parse_tool_arguments(std::string_view text) {
  if (detail::strip(text).empty()) return ordered_json::object();
  ordered_json parsed = ordered_json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    throw InvalidInput(fmt::format("tool call arguments are not valid JSON: {}", text));
  if (!parsed.is_object())
    throw InvalidInput(fmt::format("tool call arguments must be a JSON object, got: {}", text));
  return parsed;
}

namespace {

std::string string_field(const ordered_json& j, const char* key, const char* what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_string()) throw InvalidInput(fmt::format("{}: \"{}\" must be a string", what, key));
  return it->get<std::string>();
}

ordered_json arguments_from(const ordered_json& args, const std::string& name) {
  if (args.is_null()) return ordered_json::object();
  if (args.is_object()) return args;
  if (args.is_string()) {
    try {
      return parse_tool_arguments(args.get<std::string>());
    } catch (const InvalidInput& e) {
      throw InvalidInput(fmt::format("tool call \"{}\": {}", name, e.what()));
    }
  }
  throw InvalidInput(fmt::format("tool call \"{}\": arguments must be a JSON object, got {}", name, args.dump()));
}

}  // namespace

ToolCall ToolCall::from_json(const ordered_json& j) {
  if (!j.is_object()) throw InvalidInput("tool call must be a JSON object");
  ToolCall tc;
  tc.id = string_field(j, "id", "tool call");
  const ordered_json* fn = &j;
  if (auto it = j.find("function"); it != j.end()) {
    if (!it->is_object()) throw InvalidInput("tool call: \"function\" must be an object");
    fn = &*it;
  }
  tc.name = string_field(*fn, "name", "tool call");
  if (tc.name.empty()) throw InvalidInput("tool call without a function name");
  auto args = fn->find("arguments");
  tc.arguments = args == fn->end() ? ordered_json::object() : arguments_from(*args, tc.name);
  return tc;
}

ordered_json ToolCall::to_json() const {
  ordered_json j = ordered_json::object();
  if (!id.empty()) j["id"] = id;
  j["function"] = {{"name", name}, {"arguments", arguments}};
  return j;
}

Message Message::from_json(const ordered_json& j) {
  if (!j.is_object()) throw InvalidInput("message must be a JSON object");
  Message m;
  m.role = string_field(j, "role", "message");
  if (m.role.empty()) throw InvalidInput("message without a role");
  if (auto it = j.find("content"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      m.content = it->get<std::string>();
    } else if (it->is_array()) {
      for (const auto& part : *it) {
        if (part.is_string()) {
          m.content += part.get<std::string>();
        } else if (part.is_object() && part.value("type", "") == "text") {
          m.content += string_field(part, "text", "message content part");
        }
      }
    } else {
      throw InvalidInput("message: \"content\" must be a string or a list of parts");
    }
  }
  for (const char* key : {"thinking", "reasoning_content", "reasoning"}) {
    m.thinking = string_field(j, key, "message");
    if (!m.thinking.empty()) break;
  }
  if (auto it = j.find("tool_calls"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw InvalidInput("message: \"tool_calls\" must be a list");
    for (const auto& tc : *it) m.tool_calls.push_back(ToolCall::from_json(tc));
  }
  m.tool_name = string_field(j, "tool_name", "message");
  if (m.tool_name.empty()) m.tool_name = string_field(j, "name", "message");
  m.tool_call_id = string_field(j, "tool_call_id", "message");
  return m;
}

Tool Tool::from_json(const ordered_json& j) {
  if (!j.is_object()) throw InvalidInput("tool must be a JSON object");
  const ordered_json* fn = &j;
  if (auto it = j.find("function"); it != j.end()) {
    if (!it->is_object()) throw InvalidInput("tool: \"function\" must be an object");
    fn = &*it;
  }
  Tool t;
  t.name = string_field(*fn, "name", "tool");
  if (t.name.empty()) throw InvalidInput("tool without a function name");
  t.description = string_field(*fn, "description", "tool");
  if (auto it = fn->find("parameters"); it != fn->end() && !it->is_null()) {
    if (!it->is_object()) throw InvalidInput(fmt::format("tool \"{}\": parameters must be a JSON object", t.name));
    t.parameters = *it;
  }
  return t;
}

ordered_json Tool::to_json() const {
  ordered_json fn = ordered_json::object();
  fn["name"] = name;
  fn["description"] = description;
  if (!parameters.is_null()) fn["parameters"] = parameters;
  ordered_json j = ordered_json::object();
  j["type"] = "function";
  j["function"] = std::move(fn);
  return j;
}

void ParsedChunk::append(ParsedChunk&& other) {
  content += other.content;
  thinking += other.thinking;
  for (auto& tc : other.tool_calls) tool_calls.push_back(std::move(tc));
}

}  // namespace vatic::chat
