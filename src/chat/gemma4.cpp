#include "chat/gemma4.h"

#include <algorithm>

#include "chat/text.h"
#include "util/error.h"

namespace vatic::chat {
namespace {

constexpr std::string_view kQ = "<|\"|>";
constexpr std::string_view kChannelOpen = "<|channel>";
constexpr std::string_view kChannelClose = "<channel|>";
constexpr std::string_view kToolCallOpen = "<|tool_call>";
constexpr std::string_view kToolCallClose = "<tool_call|>";
constexpr std::string_view kToolResponseOpen = "<|tool_response>";
constexpr std::string_view kThoughtName = "thought\n";

using detail::lstrip;
using detail::rstrip;
using detail::strip;

// Keys of a JSON object in Jinja dictsort order: case-insensitive, ties kept in insertion order.
std::vector<std::string> dictsort_keys(const ordered_json& obj) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : obj.items()) keys.push_back(k);
  std::stable_sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
      auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
      return static_cast<unsigned char>(lower(x)) < static_cast<unsigned char>(lower(y));
    });
  });
  return keys;
}

// Jinja truthiness of a JSON value (missing values are null).
bool truthy(const ordered_json& v) {
  switch (v.type()) {
    case ordered_json::value_t::null: return false;
    case ordered_json::value_t::boolean: return v.get<bool>();
    case ordered_json::value_t::string: return !v.get_ref<const std::string&>().empty();
    case ordered_json::value_t::array:
    case ordered_json::value_t::object: return !v.empty();
    case ordered_json::value_t::number_integer: return v.get<std::int64_t>() != 0;
    case ordered_json::value_t::number_unsigned: return v.get<std::uint64_t>() != 0;
    case ordered_json::value_t::number_float: return v.get<double>() != 0.0;
    default: return false;
  }
}

const ordered_json& field(const ordered_json& obj, const char* key) {
  static const ordered_json null_value;
  if (!obj.is_object()) return null_value;
  auto it = obj.find(key);
  return it == obj.end() ? null_value : *it;
}

// What Jinja prints for {{ value }} of a plain value.
std::string jinja_str(const ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  return v.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

// {{ value['type'] | upper }}: a list of types prints as Python's list repr, e.g. ['STRING', 'NULL'].
std::string type_upper(const ordered_json& type) {
  if (type.is_null()) return "";
  if (type.is_array()) {
    std::string out = "[";
    bool first = true;
    for (const auto& t : type) {
      if (!first) out += ", ";
      first = false;
      out += t.is_string() ? "'" + t.get<std::string>() + "'" : jinja_str(t);
    }
    return detail::upper_ascii(out + "]");
  }
  return detail::upper_ascii(jinja_str(type));
}

void format_required(const ordered_json& required, std::string& out) {
  out += "required:[";
  bool first = true;
  if (required.is_array()) {
    for (const auto& r : required) {
      if (!first) out += ',';
      first = false;
      out += kQ;
      out += jinja_str(r);
      out += kQ;
    }
  }
  out += ']';
}

// The template's format_parameters macro. Non-object property values are skipped (as ollama does).
void format_parameters(const ordered_json& props, bool filter_keys, std::string& out) {
  static constexpr std::string_view kStandard[] = {"description", "type", "properties", "required", "nullable"};
  bool first = true;
  for (const std::string& key : dictsort_keys(props)) {
    if (filter_keys && std::find(std::begin(kStandard), std::end(kStandard), key) != std::end(kStandard)) continue;
    const ordered_json& value = props.at(key);
    if (!value.is_object()) continue;
    if (!first) out += ',';
    first = false;
    out += key;
    out += ":{";
    bool add_comma = false;
    auto comma = [&] {
      if (add_comma)
        out += ',';
      else
        add_comma = true;
    };
    if (truthy(field(value, "description"))) {
      out += "description:";
      out += kQ;
      out += jinja_str(field(value, "description"));
      out += kQ;
      add_comma = true;
    }
    const std::string type = type_upper(field(value, "type"));
    if (type == "STRING") {
      if (truthy(field(value, "enum"))) {
        comma();
        out += "enum:" + gemma4::format_argument(field(value, "enum"), true);
      }
    } else if (type == "ARRAY") {
      const ordered_json& items = field(value, "items");
      if (items.is_object() && !items.empty()) {
        comma();
        out += "items:{";
        bool first_item = true;
        for (const std::string& item_key : dictsort_keys(items)) {
          const ordered_json& item_value = items.at(item_key);
          if (item_value.is_null()) continue;
          if (!first_item) out += ',';
          first_item = false;
          if (item_key == "properties") {
            out += "properties:{";
            if (item_value.is_object()) format_parameters(item_value, false, out);
            out += '}';
          } else if (item_key == "required") {
            format_required(item_value, out);
          } else if (item_key == "type") {
            if (item_value.is_string()) {
              out += "type:" + gemma4::format_argument(detail::upper_ascii(item_value.get<std::string>()), true);
            } else {
              ordered_json upper = ordered_json::array();
              if (item_value.is_array())
                for (const auto& t : item_value) upper.push_back(detail::upper_ascii(jinja_str(t)));
              out += "type:" + gemma4::format_argument(upper, true);
            }
          } else {
            out += item_key + ":" + gemma4::format_argument(item_value, true);
          }
        }
        out += '}';
      }
    }
    if (truthy(field(value, "nullable"))) {
      comma();
      out += "nullable:true";
    }
    if (type == "OBJECT") {
      const ordered_json& nested = field(value, "properties");
      comma();
      out += "properties:{";
      if (nested.is_object())
        format_parameters(nested, false, out);
      else
        format_parameters(value, true, out);
      out += '}';
      if (truthy(field(value, "required"))) {
        comma();
        format_required(field(value, "required"), out);
      }
    }
    comma();
    out += "type:";
    out += kQ;
    out += type;
    out += kQ;
    out += '}';
  }
}

// The template's strip_thinking macro: drops <|channel>...<channel|> blocks, then trims.
std::string strip_thinking(std::string_view text) {
  std::string result;
  std::size_t start = 0;
  while (true) {
    std::size_t end = text.find(kChannelClose, start);
    std::string_view part = text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    std::size_t open = part.find(kChannelOpen);
    result += open == std::string_view::npos ? part : part.substr(0, open);
    if (end == std::string_view::npos) break;
    start = end + kChannelClose.size();
  }
  return std::string(strip(result));
}

std::string format_tool_call(const ToolCall& tc, std::size_t message_index) {
  if (tc.name.empty()) throw InvalidInput(fmt::format("message {}: tool call without a function name", message_index));
  if (!tc.arguments.is_null() && !tc.arguments.is_object())
    throw InvalidInput(fmt::format("message {}: arguments of tool call \"{}\" must be a JSON object", message_index,
                                   tc.name));
  std::string out = std::string(kToolCallOpen) + "call:" + tc.name + "{";
  if (tc.arguments.is_object()) {
    bool first = true;
    for (const std::string& key : dictsort_keys(tc.arguments)) {
      if (!first) out += ',';
      first = false;
      out += key + ":" + gemma4::format_argument(tc.arguments.at(key), false);
    }
  }
  out += "}";
  out += kToolCallClose;
  return out;
}

std::string format_tool_response(const std::string& name, const std::string& content) {
  return std::string(kToolResponseOpen) + "response:" + name + "{value:" + gemma4::format_argument(content, false) +
         "}<tool_response|>";
}

// The function a tool result answers: its tool_name, else the call with its tool_call_id, else the only call.
std::string tool_response_name(const Message& tool_msg, const Message& call_msg, std::size_t index) {
  if (!tool_msg.tool_name.empty()) return tool_msg.tool_name;
  if (!tool_msg.tool_call_id.empty()) {
    for (const ToolCall& tc : call_msg.tool_calls)
      if (tc.id == tool_msg.tool_call_id) return tc.name;
  }
  if (call_msg.tool_calls.size() == 1) return call_msg.tool_calls.front().name;
  throw InvalidInput(fmt::format(
      "message {}: tool result needs a tool_name (or a tool_call_id matching one of the {} preceding tool calls)", index,
      call_msg.tool_calls.size()));
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Compact syntax

std::string gemma4::format_argument(const ordered_json& value, bool escape_keys) {
  switch (value.type()) {
    case ordered_json::value_t::null: return "null";
    case ordered_json::value_t::string: return std::string(kQ) + value.get<std::string>() + std::string(kQ);
    case ordered_json::value_t::boolean: return value.get<bool>() ? "true" : "false";
    case ordered_json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const std::string& key : dictsort_keys(value)) {
        if (!first) out += ',';
        first = false;
        out += escape_keys ? std::string(kQ) + key + std::string(kQ) : key;
        out += ':';
        out += format_argument(value.at(key), escape_keys);
      }
      return out + "}";
    }
    case ordered_json::value_t::array: {
      std::string out = "[";
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ',';
        first = false;
        out += format_argument(item, escape_keys);
      }
      return out + "]";
    }
    default: return jinja_str(value);
  }
}

std::string gemma4::format_declaration(const Tool& tool) {
  std::string out = "declaration:" + tool.name + "{description:" + std::string(kQ) + tool.description + std::string(kQ);
  const ordered_json& params = tool.parameters;
  if (params.is_object() && !params.empty()) {
    out += ",parameters:{";
    bool need_comma = false;
    if (truthy(field(params, "properties")) && field(params, "properties").is_object()) {
      out += "properties:{";
      format_parameters(field(params, "properties"), false, out);
      out += '}';
      need_comma = true;
    }
    if (truthy(field(params, "required"))) {
      if (need_comma) out += ',';
      format_required(field(params, "required"), out);
      need_comma = true;
    }
    if (truthy(field(params, "type"))) {
      if (need_comma) out += ',';
      out += "type:" + std::string(kQ) + type_upper(field(params, "type")) + std::string(kQ);
    }
    out += '}';
  }
  out += '}';
  return out;
}

namespace {

class CompactReader {
 public:
  explicit CompactReader(std::string_view s) : s_(s) {}

  std::optional<ordered_json> document() {
    skip_ws();
    ordered_json out;
    if (!at('{') || !object(out)) return std::nullopt;
    skip_ws();
    if (i_ != s_.size()) return std::nullopt;
    return out;
  }

 private:
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }
  bool at(std::string_view t) const { return s_.substr(i_, t.size()) == t; }
  void skip_ws() {
    while (i_ < s_.size() && detail::is_space(s_[i_])) ++i_;
  }

  bool quoted(std::string& out) {
    if (at(kQ)) {
      std::size_t end = s_.find(kQ, i_ + kQ.size());
      if (end == std::string_view::npos) return false;
      out = std::string(s_.substr(i_ + kQ.size(), end - i_ - kQ.size()));
      i_ = end + kQ.size();
      return true;
    }
    if (at('"')) {  // a JSON string literal
      std::size_t j = i_ + 1;
      while (j < s_.size() && s_[j] != '"') j += s_[j] == '\\' ? 2 : 1;
      if (j >= s_.size()) return false;
      ordered_json parsed = ordered_json::parse(s_.substr(i_, j + 1 - i_), nullptr, false);
      if (parsed.is_discarded() || !parsed.is_string()) return false;
      out = parsed.get<std::string>();
      i_ = j + 1;
      return true;
    }
    return false;
  }

  bool key(std::string& out) {
    if (at(kQ) || at('"')) return quoted(out);
    std::size_t start = i_;
    while (i_ < s_.size() && !detail::is_space(s_[i_]) && std::string_view(":,{}[]<>\"").find(s_[i_]) == std::string_view::npos)
      ++i_;
    out = std::string(s_.substr(start, i_ - start));
    return !out.empty();
  }

  bool object(ordered_json& out) {
    ++i_;  // '{'
    out = ordered_json::object();
    skip_ws();
    if (at('}')) {
      ++i_;
      return true;
    }
    while (true) {
      skip_ws();
      std::string k;
      if (!key(k)) return false;
      skip_ws();
      if (!at(':')) return false;
      ++i_;
      skip_ws();
      ordered_json v;
      if (!value(v)) return false;
      out[k] = std::move(v);
      skip_ws();
      if (at(',')) {
        ++i_;
        continue;
      }
      if (at('}')) {
        ++i_;
        return true;
      }
      return false;
    }
  }

  bool array(ordered_json& out) {
    ++i_;  // '['
    out = ordered_json::array();
    skip_ws();
    if (at(']')) {
      ++i_;
      return true;
    }
    while (true) {
      skip_ws();
      ordered_json v;
      if (!value(v)) return false;
      out.push_back(std::move(v));
      skip_ws();
      if (at(',')) {
        ++i_;
        continue;
      }
      if (at(']')) {
        ++i_;
        return true;
      }
      return false;
    }
  }

  bool value(ordered_json& out) {
    if (at('{')) return object(out);
    if (at('[')) return array(out);
    if (at(kQ) || at('"')) {
      std::string s;
      if (!quoted(s)) return false;
      out = std::move(s);
      return true;
    }
    std::size_t start = i_;
    while (i_ < s_.size() && std::string_view(",}]").find(s_[i_]) == std::string_view::npos) ++i_;
    std::string_view token = rstrip(s_.substr(start, i_ - start));
    if (token == "true" || token == "True") {
      out = true;
    } else if (token == "false" || token == "False") {
      out = false;
    } else if (token == "null" || token == "None") {
      out = nullptr;
    } else {
      if (token.empty() || !(token[0] == '-' || (token[0] >= '0' && token[0] <= '9'))) return false;
      ordered_json parsed = ordered_json::parse(token, nullptr, false);
      if (parsed.is_discarded() || !parsed.is_number()) return false;
      out = std::move(parsed);
    }
    return true;
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace

std::optional<ordered_json> gemma4::parse_arguments(std::string_view text) { return CompactReader(text).document(); }

std::optional<ToolCall> gemma4::parse_call(std::string_view text) {
  text = strip(text);
  constexpr std::string_view kCall = "call:";
  if (text.substr(0, kCall.size()) != kCall) return std::nullopt;
  text.remove_prefix(kCall.size());
  std::size_t brace = text.find('{');
  if (brace == std::string_view::npos) return std::nullopt;
  std::string_view name = strip(text.substr(0, brace));
  if (name.empty()) return std::nullopt;
  for (char c : name)
    if (detail::is_space(c) || c == '<' || c == '>' || c == '"' || c == '}' || c == ',') return std::nullopt;
  auto args = parse_arguments(text.substr(brace));
  if (!args) return std::nullopt;
  ToolCall tc;
  tc.name = std::string(name);
  tc.arguments = std::move(*args);
  return tc;
}

// ---------------------------------------------------------------------------------------------------------------
// Renderer

std::string Gemma4Renderer::render(const std::vector<Message>& messages, const std::vector<Tool>& tools,
                                   const RenderOptions& options) const {
  for (std::size_t i = 0; i < messages.size(); ++i) detail::check_role(messages[i].role, i);
  for (const Tool& t : tools)
    if (t.name.empty()) throw InvalidInput("tool without a function name");

  const bool think = options.think.value_or(default_think());
  const bool preserve = options.preserve_thinking.value_or(false);

  std::string out = "<bos>";
  std::string prev_type;  // "", "think", "tool", "tool_call", "tool_response"
  std::size_t first = 0;
  const bool has_system =
      !messages.empty() && (messages[0].role == "system" || messages[0].role == "developer");
  if (think || !tools.empty() || has_system) {
    out += "<|turn>system\n";
    if (think) {
      out += "<|think|>\n";
      prev_type = "think";
    }
    if (has_system) {
      out += strip(messages[0].content);
      first = 1;
    }
    for (const Tool& t : tools) out += "<|tool>" + std::string(strip(gemma4::format_declaration(t))) + "<tool|>";
    if (!tools.empty()) prev_type = "tool";
    out += "<turn|>\n";
  }

  const std::size_t n = messages.size();
  std::size_t last_user = std::string::npos;
  for (std::size_t i = first; i < n; ++i)
    if (messages[i].role == "user") last_user = i;

  auto next_non_tool_role = [&](std::size_t i) -> std::string {
    for (std::size_t j = i + 1; j < n; ++j)
      if (messages[j].role != "tool") return messages[j].role;
    return "";
  };

  std::string prev_non_tool_role;
  for (std::size_t i = first; i < n; ++i) {
    const Message& m = messages[i];
    if (m.role == "tool") {
      // Tool results are folded into the turn of the assistant message that made the calls.
      std::size_t j = i;
      while (j > first && messages[j - 1].role == "tool") --j;
      if (j == first || messages[j - 1].tool_calls.empty())
        throw InvalidInput(
            fmt::format("message {}: tool result does not follow an assistant message with tool_calls", i));
      continue;
    }
    prev_type.clear();
    std::string role = m.role == "assistant" ? "model" : m.role == "developer" ? "system" : m.role;
    if (!(role == "model" && prev_non_tool_role == "assistant")) out += "<|turn>" + role + "\n";

    const bool after_last_user = last_user == std::string::npos || i > last_user;
    if (!m.thinking.empty() && (after_last_user || (preserve && !m.tool_calls.empty())))
      out += std::string(kChannelOpen) + "thought\n" + m.thinking + "\n" + std::string(kChannelClose);

    for (const ToolCall& tc : m.tool_calls) out += format_tool_call(tc, i);
    if (!m.tool_calls.empty()) prev_type = "tool_call";

    bool responses = false;
    if (!m.tool_calls.empty()) {
      for (std::size_t k = i + 1; k < n && messages[k].role == "tool"; ++k) {
        out += format_tool_response(tool_response_name(messages[k], m, k), messages[k].content);
        responses = true;
        prev_type = "tool_response";
      }
    }

    const std::string captured = role == "model" ? strip_thinking(m.content) : std::string(strip(m.content));
    out += captured;
    const bool has_content = !strip(captured).empty();

    const std::string next_role = next_non_tool_role(i);
    const bool continues = role == "model" && next_role == "assistant" && (m.tool_calls.empty() || responses);
    if (prev_type == "tool_call" && !responses) {
      out += kToolResponseOpen;
    } else if (continues) {
      // the next assistant message continues this model turn
    } else if (!(responses && !has_content && next_role.empty())) {
      out += "<turn|>\n";
    }
    prev_non_tool_role = m.role;
  }

  if (options.add_generation_prompt) {
    if (prev_type != "tool_response" && prev_type != "tool_call") {
      out += "<|turn>model\n";
      if (large_ && !think) out += std::string(kChannelOpen) + "thought\n" + std::string(kChannelClose);
    } else if (prev_type == "tool_response" && think) {
      out += std::string(kChannelOpen) + "thought\n";
    }
  }
  return out;
}

bool Gemma4Renderer::prompt_opens_thinking(std::string_view prompt) const {
  constexpr std::string_view kOpen = "<|channel>thought\n";
  return prompt.size() >= kOpen.size() && prompt.substr(prompt.size() - kOpen.size()) == kOpen;
}

// ---------------------------------------------------------------------------------------------------------------
// Parser

Gemma4Parser::Gemma4Parser(const ParserOptions& options)
    : think_(options.think.value_or(false)),
      state_(options.starts_in_thinking.value_or(false) ? State::Thinking : State::Content) {}

void Gemma4Parser::emit_thinking(std::string_view text, ParsedChunk& out) const {
  if (think_) out.thinking += text;  // thought-channel text is dropped when thinking is off
}

bool Gemma4Parser::step(bool final, ParsedChunk& out) {
  switch (state_) {
    case State::Content: {
      if (!skip_leading_ws()) return false;
      std::size_t which = 0;
      std::size_t pos = detail::find_marker(buf_, {kChannelOpen, kToolCallOpen}, &which);
      if (pos != std::string::npos) {
        std::string_view before = std::string_view(buf_).substr(0, pos);
        std::string_view kept = rstrip(before);
        out.content += kept;
        if (which == 1) {
          tool_ws_ = std::string(before.substr(kept.size()));
          state_ = State::ToolCall;
          buf_.erase(0, pos + kToolCallOpen.size());
        } else {
          state_ = State::ChannelName;
          buf_.erase(0, pos + kChannelOpen.size());
        }
        return true;
      }
      if (final) {
        out.content += buf_;
        buf_.clear();
        return false;
      }
      std::size_t n = detail::safe_emit_len(buf_, {kChannelOpen, kToolCallOpen});
      out.content += buf_.substr(0, n);
      buf_.erase(0, n);
      return false;
    }
    case State::ChannelName: {
      if (buf_.starts_with(kThoughtName)) {
        buf_.erase(0, kThoughtName.size());
      } else if (!final && kThoughtName.starts_with(buf_)) {
        return false;
      }
      state_ = State::Thinking;
      return true;
    }
    case State::Thinking: {
      std::size_t pos = buf_.find(kChannelClose);
      if (pos != std::string::npos) {
        emit_thinking(rstrip(std::string_view(buf_).substr(0, pos)), out);
        buf_.erase(0, pos + kChannelClose.size());
        state_ = State::Content;
        skip_ws_ = true;
        return true;
      }
      if (final) {
        emit_thinking(buf_, out);
        buf_.clear();
        return false;
      }
      std::size_t n = detail::safe_emit_len(buf_, {kChannelClose});
      emit_thinking(std::string_view(buf_).substr(0, n), out);
      buf_.erase(0, n);
      return false;
    }
    case State::ToolCall: {
      const ToolCallStep r = take_tool_call(final, kToolCallOpen, kToolCallClose, gemma4::parse_call, out);
      if (!r.done) return false;
      state_ = r.parsed ? State::AfterToolCall : State::Content;
      return r.more;
    }
    case State::AfterToolCall: {
      // Gemma sometimes repeats <tool_call|> or starts the <|tool_response> the template puts after a call.
      while (true) {
        buf_.erase(0, buf_.size() - lstrip(buf_).size());
        if (buf_.starts_with(kToolCallClose)) {
          buf_.erase(0, kToolCallClose.size());
        } else if (buf_.starts_with(kToolResponseOpen)) {
          buf_.erase(0, kToolResponseOpen.size());
        } else {
          break;
        }
      }
      if (buf_.empty()) return false;
      if (kToolCallClose.starts_with(buf_) || kToolResponseOpen.starts_with(buf_)) {
        if (final) buf_.clear();
        return false;
      }
      state_ = State::Content;
      return true;
    }
  }
  return false;
}

}  // namespace vatic::chat
