#include "chat/glm47.h"

#include <charconv>
#include <cmath>

#include "chat/tagged_format.h"
#include "chat/text.h"
#include "util/error.h"

namespace vatic::chat {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";
constexpr std::string_view kArgKeyOpen = "<arg_key>";
constexpr std::string_view kArgKeyClose = "</arg_key>";
constexpr std::string_view kArgValueOpen = "<arg_value>";
constexpr std::string_view kArgValueClose = "</arg_value>";

using detail::lstrip;
using detail::rstrip;
using detail::strip;

// Declared JSON-schema types of one parameter (lower case), empty when unknown. The tool-call grammar
// (grammar/json_schema.cpp, declared_types) reads them the same way to write values this parser reads back.
std::vector<std::string> param_types(const std::vector<Tool>& tools, const std::string& fn, const std::string& key) {
  std::vector<std::string> out;
  for (const Tool& t : tools) {
    if (t.name != fn || !t.parameters.is_object()) continue;
    auto props = t.parameters.find("properties");
    if (props == t.parameters.end() || !props->is_object()) return out;
    auto prop = props->find(key);
    if (prop == props->end() || !prop->is_object()) return out;
    auto add = [&](const ordered_json& type) {
      if (type.is_string()) out.push_back(type.get<std::string>());
      if (type.is_array())
        for (const auto& t2 : type)
          if (t2.is_string()) out.push_back(t2.get<std::string>());
    };
    if (auto type = prop->find("type"); type != prop->end()) add(*type);
    for (const char* union_key : {"anyOf", "oneOf"}) {
      if (auto alts = prop->find(union_key); alts != prop->end() && alts->is_array())
        for (const auto& alt : *alts)
          if (alt.is_object() && alt.contains("type")) add(alt["type"]);
    }
    return out;
  }
  return out;
}

bool has(const std::vector<std::string>& types, std::string_view t) {
  for (const auto& x : types)
    if (x == t) return true;
  return false;
}

ordered_json typed_value(const std::string& raw, const std::vector<std::string>& types) {
  std::string lower = raw;
  for (char& c : lower)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  if (types.empty()) {
    ordered_json parsed = ordered_json::parse(raw, nullptr, false);
    if (!parsed.is_discarded() && !parsed.is_string()) return parsed;
    return raw;
  }
  if (lower == "null") return nullptr;
  const bool only = types.size() == 1;
  if (has(types, "boolean")) {
    if (lower == "true") return true;
    if (lower == "false") return false;
    if (only) return false;
  }
  if (has(types, "integer")) {
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(raw.data(), raw.data() + raw.size(), v);
    if (ec == std::errc() && p == raw.data() + raw.size()) return v;
    if (only) return raw;
  }
  if (has(types, "number")) {
    ordered_json parsed = ordered_json::parse(raw, nullptr, false);
    if (!parsed.is_discarded() && parsed.is_number()) {
      if (parsed.is_number_float()) {
        double d = parsed.get<double>();
        if (std::trunc(d) == d && std::fabs(d) < 9.0e15) return static_cast<std::int64_t>(d);
      }
      return parsed;
    }
    if (only) return raw;
  }
  for (const char* t : {"array", "object"}) {
    if (!has(types, t)) continue;
    ordered_json parsed = ordered_json::parse(raw, nullptr, false);
    if (!parsed.is_discarded() && (std::string_view(t) == "array" ? parsed.is_array() : parsed.is_object()))
      return parsed;
    if (only) return raw;
  }
  return raw;
}

}  // namespace

std::optional<ToolCall> glm47::parse_call(std::string_view text, const std::vector<Tool>& tools) {
  std::size_t first = text.find(kArgKeyOpen);
  std::string_view name = strip(text.substr(0, first));
  if (name.empty()) return std::nullopt;
  for (char c : name)
    if (detail::is_space(c) || c == '<' || c == '>') return std::nullopt;
  ToolCall tc;
  tc.name = std::string(name);
  tc.arguments = ordered_json::object();
  std::string_view rest = first == std::string_view::npos ? std::string_view() : text.substr(first);
  auto element = [&](std::string_view open, std::string_view close, std::string_view& content) {
    rest = lstrip(rest);
    if (!rest.starts_with(open)) return false;
    rest.remove_prefix(open.size());
    std::size_t end = rest.find(close);
    if (end == std::string_view::npos) return false;
    content = rest.substr(0, end);
    rest.remove_prefix(end + close.size());
    return true;
  };
  while (!lstrip(rest).empty()) {
    std::string_view key, value;
    if (!element(kArgKeyOpen, kArgKeyClose, key)) return std::nullopt;
    if (!element(kArgValueOpen, kArgValueClose, value)) return std::nullopt;
    std::string k(strip(key));
    if (k.empty() || k.find('<') != std::string::npos) return std::nullopt;
    // One leading and one trailing newline around a value are formatting, not data.
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    tc.arguments[k] = typed_value(std::string(value), param_types(tools, tc.name, k));
  }
  return tc;
}

// ---------------------------------------------------------------------------------------------------------------
// Renderer

std::string Glm47Renderer::render(const std::vector<Message>& messages, const std::vector<Tool>& tools,
                                  const RenderOptions& options) const {
  for (std::size_t i = 0; i < messages.size(); ++i) detail::check_role(messages[i].role, i);

  const bool think = options.think.value_or(default_think());
  const bool preserve = options.preserve_thinking.value_or(true);

  std::string out = "[gMASK]<sop>";
  if (!tools.empty()) {
    out +=
        "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n";
    for (const Tool& t : tools) {
      if (t.name.empty()) throw InvalidInput("tool without a function name");
      out += detail::python_json(t.to_json());
      out += '\n';
    }
    out +=
        "</tools>\n\nFor each function call, output the function name and arguments within the following XML "
        "format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"
        "<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>";
  }

  std::size_t last_user = std::string::npos;
  for (std::size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role == "user") last_user = i;

  for (std::size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (m.role == "user") {
      out += "<|user|>" + m.content;
    } else if (m.role == "system" || m.role == "developer") {
      out += "<|system|>" + m.content;
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out += "<|observation|>";
      out += "<tool_response>" + m.content + "</tool_response>";
    } else {  // assistant
      std::string content = m.content, reasoning = m.thinking;
      // Reasoning left inline in the content: <think>...</think>answer
      if (reasoning.empty())
        detail::split_inline_reasoning(m.content, kThinkOpen, kThinkClose, reasoning, content);
      out += "<|assistant|>";
      const bool after_last_user = last_user == std::string::npos || i > last_user;
      if ((preserve || after_last_user) && !reasoning.empty()) {
        out += std::string(kThinkOpen) + std::string(strip(reasoning)) + std::string(kThinkClose);
      } else {
        out += kThinkClose;
      }
      out += strip(content);
      for (const ToolCall& tc : m.tool_calls) {
        if (tc.name.empty()) throw InvalidInput(fmt::format("message {}: tool call without a function name", i));
        if (!tc.arguments.is_null() && !tc.arguments.is_object())
          throw InvalidInput(
              fmt::format("message {}: arguments of tool call \"{}\" must be a JSON object", i, tc.name));
        out += std::string(kToolCallOpen) + tc.name;
        if (tc.arguments.is_object()) {
          for (const auto& [k, v] : tc.arguments.items()) {
            out += std::string(kArgKeyOpen) + k + std::string(kArgKeyClose) + std::string(kArgValueOpen);
            out += v.is_string() ? v.get<std::string>() : detail::python_json(v);
            out += kArgValueClose;
          }
        }
        out += kToolCallClose;
      }
    }
  }

  if (options.add_generation_prompt) {
    out += "<|assistant|>";
    out += think ? kThinkOpen : kThinkClose;
  }
  return out;
}

bool Glm47Renderer::prompt_opens_thinking(std::string_view prompt) const { return prompt.ends_with(kThinkOpen); }

// ---------------------------------------------------------------------------------------------------------------
// Parser

Glm47Parser::Glm47Parser(const ParserOptions& options)
    : ThinkToolParser(ThinkToolTags{.keep_ws_without_think = true, .rstrip_unterminated_thinking = false},
                      options.starts_in_thinking.value_or(options.think.value_or(true))),
      tools_(options.tools) {}

std::optional<ToolCall> Glm47Parser::parse_call(std::string_view body) const {
  return glm47::parse_call(body, tools_);
}

}  // namespace vatic::chat
