#include "chat/tagged_format.h"

#include "chat/text.h"
#include "util/error.h"

namespace vatic::chat {

using detail::lstrip;
using detail::rstrip;

// ---------------------------------------------------------------------------------------------------------------
// StepParser

ParsedChunk StepParser::feed(std::string_view chunk) {
  buf_ += chunk;
  ParsedChunk out;
  while (step(false, out)) {
  }
  return out;
}

ParsedChunk StepParser::finish() {
  ParsedChunk out;
  while (step(true, out)) {
  }
  buf_.clear();
  return out;
}

bool StepParser::skip_leading_ws() {
  if (!skip_ws_) return true;
  buf_.erase(0, buf_.size() - lstrip(buf_).size());
  if (buf_.empty()) return false;
  skip_ws_ = false;
  return true;
}

StepParser::ToolCallStep StepParser::take_tool_call(
    bool final, std::string_view open, std::string_view close,
    const std::function<std::optional<ToolCall>(std::string_view)>& parse, ParsedChunk& out) {
  ToolCallStep r;
  std::size_t pos = buf_.find(close, scan_from_);
  if (pos == std::string::npos && !final) {
    // Resume the search where a marker could still start (tool calls can be long).
    scan_from_ = buf_.size() >= close.size() ? buf_.size() - close.size() + 1 : 0;
    return r;
  }
  scan_from_ = 0;
  r.done = true;
  std::string raw = buf_.substr(0, pos);
  if (auto tc = parse(raw)) {
    out.tool_calls.push_back(std::move(*tc));
    r.parsed = true;
  } else {
    out.content += tool_ws_;
    out.content += open;
    out.content += raw;
    if (pos != std::string::npos) out.content += close;
  }
  tool_ws_.clear();
  if (pos == std::string::npos) {
    buf_.clear();
    return r;
  }
  buf_.erase(0, pos + close.size());
  r.more = true;
  return r;
}

// ---------------------------------------------------------------------------------------------------------------
// ThinkToolParser

ThinkToolParser::ThinkToolParser(const ThinkToolTags& tags, bool starts_in_thinking)
    : tags_(tags), state_(starts_in_thinking ? State::Thinking : State::LookingForThink) {
  skip_ws_ = true;
}

bool ThinkToolParser::step(bool final, ParsedChunk& out) {
  switch (state_) {
    case State::LookingForThink: {
      // Without a <think> in the prompt the model may still open one itself.
      std::string_view rest = lstrip(buf_);
      if (rest.starts_with(tags_.think_open)) {
        buf_.erase(0, buf_.size() - rest.size() + tags_.think_open.size());
        state_ = State::Thinking;
        skip_ws_ = true;
        return true;
      }
      if (!final && tags_.think_open.starts_with(rest)) return false;
      state_ = State::Content;
      skip_ws_ = !tags_.keep_ws_without_think;
      return true;
    }
    case State::Thinking: {
      if (!skip_leading_ws()) return false;
      std::size_t pos = buf_.find(tags_.think_close);
      if (pos != std::string::npos) {
        out.thinking += rstrip(std::string_view(buf_).substr(0, pos));
        buf_.erase(0, pos + tags_.think_close.size());
        state_ = State::Content;
        skip_ws_ = true;
        return true;
      }
      if (final) {
        out.thinking += tags_.rstrip_unterminated_thinking ? rstrip(buf_) : std::string_view(buf_);
        buf_.clear();
        return false;
      }
      std::size_t n = detail::safe_emit_len(buf_, {tags_.think_close});
      out.thinking += std::string_view(buf_).substr(0, n);
      buf_.erase(0, n);
      return false;
    }
    case State::Content: {
      if (!skip_leading_ws()) return false;
      std::size_t pos = buf_.find(tags_.call_open);
      if (pos != std::string::npos) {
        std::string_view before = std::string_view(buf_).substr(0, pos);
        std::string_view kept = rstrip(before);
        out.content += kept;
        tool_ws_ = std::string(before.substr(kept.size()));
        buf_.erase(0, pos + tags_.call_open.size());
        state_ = State::ToolCall;
        return true;
      }
      if (final) {
        out.content += buf_;
        buf_.clear();
        return false;
      }
      std::size_t n = detail::safe_emit_len(buf_, {tags_.call_open});
      out.content += std::string_view(buf_).substr(0, n);
      buf_.erase(0, n);
      return false;
    }
    case State::ToolCall: {
      const ToolCallStep r = take_tool_call(
          final, tags_.call_open, tags_.call_close,
          [this](std::string_view body) { return parse_call(body); }, out);
      if (!r.done) return false;
      if (r.parsed) skip_ws_ = true;
      state_ = State::Content;
      return r.more;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------------------------------------------
// JSON tool calls and inline reasoning

std::string detail::tool_call_json(const ToolCall& call, std::string_view arguments_key) {
  std::string out = "{\"name\": \"";
  out += call.name;
  out += "\", \"";
  out += arguments_key;
  out += "\": ";
  out += python_json(call.arguments);
  out += "}";
  return out;
}

std::optional<ToolCall> detail::tool_call_from_json(const ordered_json& j,
                                                    std::initializer_list<const char*> argument_keys,
                                                    bool string_arguments) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  ToolCall tc;
  tc.name = j["name"].get<std::string>();
  for (const char* key : argument_keys) {
    if (!j.contains(key)) continue;
    const ordered_json& a = j[key];
    if (a.is_object()) {
      tc.arguments = a;
    } else if (string_arguments && a.is_string()) {
      try {
        tc.arguments = parse_tool_arguments(a.get<std::string>());
      } catch (const InvalidInput&) {
        return std::nullopt;
      }
    } else if (!a.is_null()) {
      return std::nullopt;
    }
    break;
  }
  return tc;
}

bool detail::split_inline_reasoning(std::string_view content, std::string_view open, std::string_view close,
                                    std::string& reasoning, std::string& answer) {
  const std::size_t first_close = content.find(close);
  if (first_close == std::string_view::npos) return false;
  std::string_view before = content.substr(0, first_close);
  while (before.ends_with('\n')) before.remove_suffix(1);
  if (std::size_t o = before.rfind(open); o != std::string_view::npos) before.remove_prefix(o + open.size());
  while (before.starts_with('\n')) before.remove_prefix(1);
  std::string_view after = content.substr(content.rfind(close) + close.size());
  while (after.starts_with('\n')) after.remove_prefix(1);
  reasoning = std::string(before);
  answer = std::string(after);
  return true;
}

}  // namespace vatic::chat
