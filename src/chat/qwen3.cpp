#include "chat/qwen3.h"

#include "chat/tagged_format.h"
#include "chat/text.h"
#include "util/error.h"

namespace vatic::chat {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
std::string strip_newlines(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && s[b] == '\n') b++;
  if (right)
    while (e > b && s[e - 1] == '\n') e--;
  return std::string(s.substr(b, e - b));
}

bool is_tool_response(const Message& m) {
  return m.role == "user" && m.content.starts_with("<tool_response>") &&
         m.content.ends_with("</tool_response>");
}

}  // namespace

std::string Qwen3Renderer::render(const std::vector<Message>& messages, const std::vector<Tool>& tools,
                                  const RenderOptions& options) const {
  for (size_t i = 0; i < messages.size(); i++) detail::check_role(messages[i].role, i);
  auto is_system = [](const Message& m) { return m.role == "system" || m.role == "developer"; };
  std::string out;
  const bool first_system = !messages.empty() && is_system(messages[0]);
  if (!tools.empty()) {
    out += "<|im_start|>system\n";
    if (first_system) out += messages[0].content + "\n\n";
    out +=
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
        "with "
        "function signatures within <tools></tools> XML tags:\n<tools>";
    for (const Tool& t : tools) {
      out += "\n";
      out += detail::python_json(t.to_json());
    }
    out +=
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (first_system) {
    out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
  }
  // The last user query (tool results sent as user turns do not count): reasoning is rendered after it only.
  int64_t last_query = static_cast<int64_t>(messages.size()) - 1;
  for (int64_t i = static_cast<int64_t>(messages.size()) - 1; i >= 0; i--) {
    const Message& m = messages[static_cast<size_t>(i)];
    if (m.role == "user" && !is_tool_response(m)) {
      last_query = i;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); i++) {
    const Message& m = messages[i];
    if (m.role == "user" || (is_system(m) && i != 0)) {
      out += "<|im_start|>" + std::string(m.role == "developer" ? "system" : m.role) + "\n" + m.content +
             "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string content = m.content, reasoning = m.thinking;
      if (reasoning.empty())
        detail::split_inline_reasoning(m.content, kThinkOpen, kThinkClose, reasoning, content);
      const bool last = i + 1 == messages.size();
      if (static_cast<int64_t>(i) > last_query && (last || !reasoning.empty()))
        out += "<|im_start|>assistant\n<think>\n" + strip_newlines(reasoning, true, true) + "\n</think>\n\n" +
               strip_newlines(content, true, false);
      else
        out += "<|im_start|>assistant\n" + content;
      for (size_t c = 0; c < m.tool_calls.size(); c++) {
        if (c > 0 || !content.empty()) out += "\n";
        out += "<tool_call>\n";
        out += detail::tool_call_json(m.tool_calls[c], "arguments");
        out += "\n</tool_call>";
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (options.think.has_value() && !*options.think) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

std::optional<ToolCall> qwen3::parse_call(std::string_view text) {
  ordered_json j;
  try {
    j = ordered_json::parse(detail::strip(text));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return detail::tool_call_from_json(j, {"arguments", "parameters"}, true);
}

Qwen3Parser::Qwen3Parser(const ParserOptions& options)
    : ThinkToolParser(ThinkToolTags{.keep_ws_without_think = false, .rstrip_unterminated_thinking = true},
                      options.starts_in_thinking.value_or(false)) {}

std::optional<ToolCall> Qwen3Parser::parse_call(std::string_view body) const {
  return qwen3::parse_call(body);
}

}  // namespace vatic::chat
