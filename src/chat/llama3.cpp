#include "chat/llama3.h"

#include "chat/tagged_format.h"
#include "chat/text.h"
#include "util/error.h"

namespace vatic::chat {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

std::string header(std::string_view role) {
  return "<|start_header_id|>" + std::string(role) + "<|end_header_id|>\n\n";
}

// Parses `{"name": ..., "parameters": {...}}` calls separated by ";"; false if any part is not one.
bool parse_calls(std::string_view text, std::vector<ToolCall>& out) {
  std::vector<ToolCall> calls;
  // Objects may themselves hold ";" inside strings: split only where a whole JSON object ends.
  std::string_view rest = detail::strip(text);
  while (!rest.empty()) {
    ordered_json j;
    size_t end = std::string_view::npos;
    for (size_t p = rest.find('}'); p != std::string_view::npos; p = rest.find('}', p + 1)) {
      try {
        j = ordered_json::parse(rest.substr(0, p + 1));
        end = p + 1;
        break;
      } catch (const std::exception&) {
      }
    }
    if (end == std::string_view::npos) return false;
    auto tc = detail::tool_call_from_json(j, {"parameters", "arguments"}, false);
    if (!tc) return false;
    calls.push_back(std::move(*tc));
    rest = detail::lstrip(rest.substr(end));
    if (rest.starts_with(";")) rest = detail::lstrip(rest.substr(1));
  }
  if (calls.empty()) return false;
  for (auto& c : calls) out.push_back(std::move(c));
  return true;
}

}  // namespace

std::string Llama3Renderer::render(const std::vector<Message>& messages, const std::vector<Tool>& tools,
                                   const RenderOptions& options) const {
  for (size_t i = 0; i < messages.size(); i++) detail::check_role(messages[i].role, i);
  std::string out = "<|begin_of_text|>";
  size_t first = 0;
  std::string system;
  if (!messages.empty() && (messages[0].role == "system" || messages[0].role == "developer")) {
    system = std::string(detail::strip(messages[0].content));
    first = 1;
  }
  out += header("system");
  if (!tools.empty()) out += "Environment: ipython\n";
  out += "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
  out += system + "<|eot_id|>";
  if (!tools.empty()) {
    // Tools go into the first user message (the template's default, tools_in_user_message).
    if (first >= messages.size() || messages[first].role != "user")
      throw InvalidInput("the Llama 3 chat format needs a user message to declare tools in");
    out += header("user");
    out +=
        "Given the following functions, please respond with a JSON for a function call with its proper "
        "arguments "
        "that best answers the given prompt.\n\nRespond in the format {\"name\": function name, "
        "\"parameters\": "
        "dictionary of argument name and its value}.Do not use variables.\n\n";
    for (const Tool& t : tools) out += t.to_json().dump(4) + "\n\n";
    out += std::string(detail::strip(messages[first].content)) + "<|eot_id|>";
    first++;
  }
  for (size_t i = first; i < messages.size(); i++) {
    const Message& m = messages[i];
    if (m.role == "tool") {
      out += header("ipython") + m.content + "<|eot_id|>";
    } else if (!m.tool_calls.empty()) {
      if (m.tool_calls.size() != 1)
        throw InvalidInput("the Llama 3 chat format supports one tool call per message");
      const ToolCall& c = m.tool_calls[0];
      out += header("assistant");
      out += detail::tool_call_json(c, "parameters");
      out += "<|eot_id|>";
    } else {
      const std::string role = m.role == "developer" ? "system" : m.role;
      out += header(role) + std::string(detail::strip(m.content)) + "<|eot_id|>";
    }
  }
  if (options.add_generation_prompt) out += header("assistant");
  return out;
}

Llama3Parser::Llama3Parser(const ParserOptions& options) : tools_(!options.tools.empty()) {}

ParsedChunk Llama3Parser::feed(std::string_view chunk) {
  ParsedChunk out;
  buf_ += chunk;
  if (state_ == State::Start) {
    // A tool call is the whole answer: it starts with "{" or <|python_tag|> (after whitespace). Only then is
    // the output held back until it ends.
    std::string_view rest = detail::lstrip(buf_);
    if (rest.empty()) return out;
    if (tools_ && (rest.starts_with("{") || rest.starts_with(kPythonTag))) {
      state_ = State::MaybeCall;
    } else if (tools_ && kPythonTag.starts_with(rest)) {
      return out;
    } else {
      state_ = State::Content;
    }
  }
  if (state_ == State::Content) {
    size_t n = detail::utf8_complete_len(buf_);
    out.content += buf_.substr(0, n);
    buf_.erase(0, n);
  }
  return out;
}

ParsedChunk Llama3Parser::finish() {
  ParsedChunk out;
  if (state_ == State::MaybeCall) {
    std::string_view rest = detail::lstrip(buf_);
    if (rest.starts_with(kPythonTag)) rest = rest.substr(kPythonTag.size());
    if (parse_calls(rest, out.tool_calls)) {
      buf_.clear();
      return out;
    }
  }
  out.content += buf_;
  buf_.clear();
  return out;
}

}  // namespace vatic::chat
