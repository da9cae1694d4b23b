#include "chat/qwen3.h"

#include "chat/text.h"
#include "util/error.h"

namespace vatic::chat {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";

using detail::lstrip;
using detail::rstrip;

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
      if (reasoning.empty()) {
        size_t close = content.find(kThinkClose);
        if (close != std::string::npos) {
          std::string before = strip_newlines(std::string_view(content).substr(0, close), false, true);
          size_t open = before.rfind(kThinkOpen);
          reasoning = strip_newlines(
              open == std::string::npos ? before : before.substr(open + kThinkOpen.size()), true, false);
          content = strip_newlines(
              std::string_view(content).substr(content.rfind(kThinkClose) + kThinkClose.size()), true, false);
        }
      }
      const bool last = i + 1 == messages.size();
      if (static_cast<int64_t>(i) > last_query && (last || !reasoning.empty()))
        out += "<|im_start|>assistant\n<think>\n" + strip_newlines(reasoning, true, true) + "\n</think>\n\n" +
               strip_newlines(content, true, false);
      else
        out += "<|im_start|>assistant\n" + content;
      for (size_t c = 0; c < m.tool_calls.size(); c++) {
        if (c > 0 || !content.empty()) out += "\n";
        out += "<tool_call>\n{\"name\": \"" + m.tool_calls[c].name +
               "\", \"arguments\": " + detail::python_json(m.tool_calls[c].arguments) + "}\n</tool_call>";
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
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  ToolCall tc;
  tc.name = j["name"].get<std::string>();
  const char* key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
  if (key) {
    const ordered_json& a = j[key];
    if (a.is_object()) {
      tc.arguments = a;
    } else if (a.is_string()) {
      try {
        tc.arguments = parse_tool_arguments(a.get<std::string>());
      } catch (const InvalidInput&) {
        return std::nullopt;
      }
    } else if (!a.is_null()) {
      return std::nullopt;
    }
  }
  return tc;
}

Qwen3Parser::Qwen3Parser(const ParserOptions& options) {
  state_ = options.starts_in_thinking.value_or(false) ? State::Thinking : State::LookingForThink;
  skip_ws_ = true;
}

ParsedChunk Qwen3Parser::feed(std::string_view chunk) {
  buf_ += chunk;
  ParsedChunk out;
  while (step(false, out)) {
  }
  return out;
}

ParsedChunk Qwen3Parser::finish() {
  ParsedChunk out;
  while (step(true, out)) {
  }
  buf_.clear();
  return out;
}

bool Qwen3Parser::step(bool final, ParsedChunk& out) {
  switch (state_) {
    case State::LookingForThink: {
      std::string_view rest = lstrip(buf_);
      if (rest.starts_with(kThinkOpen)) {
        buf_.erase(0, buf_.size() - rest.size() + kThinkOpen.size());
        state_ = State::Thinking;
        skip_ws_ = true;
        return true;
      }
      if (!final && kThinkOpen.starts_with(rest)) return false;
      state_ = State::Content;
      skip_ws_ = true;
      return true;
    }
    case State::Thinking: {
      if (skip_ws_) {
        buf_.erase(0, buf_.size() - lstrip(buf_).size());
        if (buf_.empty()) return false;
        skip_ws_ = false;
      }
      std::size_t pos = buf_.find(kThinkClose);
      if (pos != std::string::npos) {
        out.thinking += rstrip(std::string_view(buf_).substr(0, pos));
        buf_.erase(0, pos + kThinkClose.size());
        state_ = State::Content;
        skip_ws_ = true;
        return true;
      }
      if (final) {
        out.thinking += rstrip(buf_);
        buf_.clear();
        return false;
      }
      std::size_t n = detail::safe_emit_len(buf_, {kThinkClose});
      out.thinking += std::string_view(buf_).substr(0, n);
      buf_.erase(0, n);
      return false;
    }
    case State::Content: {
      if (skip_ws_) {
        buf_.erase(0, buf_.size() - lstrip(buf_).size());
        if (buf_.empty()) return false;
        skip_ws_ = false;
      }
      std::size_t pos = buf_.find(kToolCallOpen);
      if (pos != std::string::npos) {
        std::string_view before = std::string_view(buf_).substr(0, pos);
        std::string_view kept = rstrip(before);
        out.content += kept;
        tool_ws_ = std::string(before.substr(kept.size()));
        buf_.erase(0, pos + kToolCallOpen.size());
        state_ = State::ToolCall;
        return true;
      }
      if (final) {
        out.content += buf_;
        buf_.clear();
        return false;
      }
      std::size_t n = detail::safe_emit_len(buf_, {kToolCallOpen});
      out.content += std::string_view(buf_).substr(0, n);
      buf_.erase(0, n);
      return false;
    }
    case State::ToolCall: {
      std::size_t pos = buf_.find(kToolCallClose, scan_from_);
      if (pos == std::string::npos && !final) {
        scan_from_ = buf_.size() >= kToolCallClose.size() ? buf_.size() - kToolCallClose.size() + 1 : 0;
        return false;
      }
      scan_from_ = 0;
      std::string raw = buf_.substr(0, pos);
      if (auto tc = qwen3::parse_call(raw)) {
        out.tool_calls.push_back(std::move(*tc));
        skip_ws_ = true;
      } else {
        out.content += tool_ws_;
        out.content += kToolCallOpen;
        out.content += raw;
        if (pos != std::string::npos) out.content += kToolCallClose;
      }
      tool_ws_.clear();
      state_ = State::Content;
      if (pos == std::string::npos) {
        buf_.clear();
        return false;
      }
      buf_.erase(0, pos + kToolCallClose.size());
      return true;
    }
  }
  return false;
}

}  // namespace vatic::chat
