#include "cli/client_session.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "cli/client_format.h"
#include "util/error.h"

namespace vatic::cli {

namespace {

constexpr const char* kDim = "\033[90m";
constexpr const char* kReset = "\033[0m";

enum class ParamType { integer, real, boolean, strings };

const std::map<std::string, ParamType>& known_parameters() {
  static const std::map<std::string, ParamType> params = {
      {"seed", ParamType::integer},          {"num_predict", ParamType::integer},
      {"top_k", ParamType::integer},         {"num_ctx", ParamType::integer},
      {"repeat_last_n", ParamType::integer}, {"num_keep", ParamType::integer},
      {"num_batch", ParamType::integer},     {"num_thread", ParamType::integer},
      {"num_gpu", ParamType::integer},       {"main_gpu", ParamType::integer},
      {"draft_num_predict", ParamType::integer},
      {"temperature", ParamType::real},      {"top_p", ParamType::real},
      {"min_p", ParamType::real},            {"typical_p", ParamType::real},
      {"repeat_penalty", ParamType::real},   {"presence_penalty", ParamType::real},
      {"frequency_penalty", ParamType::real},
      {"use_mmap", ParamType::boolean},      {"stop", ParamType::strings},
  };
  return params;
}

int terminal_width() {
  struct winsize ws {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    int n = std::atoi(c);
    if (n > 0) return n;
  }
  return 80;
}

}  // namespace

bool has_chat_format(const json& show) {
  if (!show.is_object()) return true;
  const bool has_renderer = show.contains("renderer") && show["renderer"].is_string();
  const bool has_template = show.contains("template") && show["template"].is_string();
  if (!has_renderer && !has_template) return true;  // nothing said: assume chat, like ollama does
  if (has_renderer && !show["renderer"].get<std::string>().empty()) return true;
  if (has_template) {
    const std::string t = show["template"].get<std::string>();
    // ollama's raw template passes the prompt through: that is no chat format either
    if (!t.empty() && t != "{{ .Prompt }}" && t != "{{.Prompt}}") return true;
  }
  return false;
}

json parse_parameter(const std::string& name, const std::vector<std::string>& values) {
  auto it = known_parameters().find(name);
  if (it == known_parameters().end()) throw InvalidInput(fmt::format("unknown parameter '{}'", name));
  if (values.empty()) throw InvalidInput(fmt::format("parameter '{}' needs a value", name));
  const std::string& v = values[0];
  switch (it->second) {
    case ParamType::integer: {
      char* end = nullptr;
      errno = 0;
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || errno) throw InvalidInput(fmt::format("invalid int value [{}]", v));
      return n;
    }
    case ParamType::real: {
      char* end = nullptr;
      double d = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0') throw InvalidInput(fmt::format("invalid float value [{}]", v));
      return d;
    }
    case ParamType::boolean:
      if (v == "true" || v == "1") return true;
      if (v == "false" || v == "0") return false;
      throw InvalidInput(fmt::format("invalid bool value [{}]", v));
    case ParamType::strings:
      return json(values);
  }
  return v;
}

AnswerPrinter::AnswerPrinter(bool tty, bool word_wrap, bool hide_thinking)
    : tty_(tty), wrap_(tty && word_wrap), hide_thinking_(hide_thinking) {
  if (wrap_) width_ = terminal_width();
}

void AnswerPrinter::write(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  last_ = text.back();
  wrote_ = true;
}

void AnswerPrinter::escape(const char* code) {
  if (tty_) std::fputs(code, stdout);
}

void AnswerPrinter::flush_word() {
  if (word_.empty()) return;
  if (column_ > 0 && column_ + word_width_ > static_cast<size_t>(width_)) {
    write("\n");
    column_ = 0;
  }
  write(word_);
  column_ += word_width_;
  word_.clear();
  word_width_ = 0;
}

void AnswerPrinter::emit(const std::string& text) {
  if (!wrap_) {
    write(text);
    return;
  }
  for (char c : text) {
    if (c == '\n') {
      flush_word();
      write("\n");
      column_ = 0;
    } else if (c == ' ' || c == '\t') {
      flush_word();
      if (column_ + 1 >= static_cast<size_t>(width_)) {
        write("\n");
        column_ = 0;
      } else {
        write(std::string(1, c));
        ++column_;
      }
    } else {
      word_ += c;
      if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++word_width_;
    }
  }
}

void AnswerPrinter::thinking(const std::string& text) {
  if (hide_thinking_ || text.empty()) return;
  if (!in_thinking_) {
    in_thinking_ = true;
    escape(kDim);
    write("Thinking...\n");
    column_ = 0;
  }
  emit(text);
  if (!wrap_) std::fflush(stdout);
}

void AnswerPrinter::end_thinking() {
  if (!in_thinking_) return;
  flush_word();
  write(last_ == '\n' ? "...done thinking.\n\n" : "\n...done thinking.\n\n");
  escape(kReset);
  last_ = '\n';
  column_ = 0;
  in_thinking_ = false;
}

void AnswerPrinter::content(const std::string& text) {
  if (text.empty()) return;
  end_thinking();
  emit(text);
  if (!wrap_) std::fflush(stdout);
}

void AnswerPrinter::finish() {
  flush_word();
  if (in_thinking_) {
    // the answer ended inside its thinking (num_predict, or nothing after it)
    if (last_ != '\n') write("\n");
    escape(kReset);
    in_thinking_ = false;
    last_ = '\n';
  }
  if (wrote_ && last_ != '\n') write("\n");
  std::fflush(stdout);
}

void AnswerPrinter::interrupt() {
  flush_word();
  escape(kReset);
  in_thinking_ = false;
  if (wrote_ && last_ != '\n') write("\n");
  std::fflush(stdout);
}

StreamEnd run_turn(const ApiClient& client, Session& s, const std::string& prompt, bool interactive) {
  json body = {{"model", s.model}, {"stream", true}};
  if (!s.options.empty()) body["options"] = s.options;
  if (s.think) body["think"] = *s.think;
  if (!s.format.empty()) {
    // "json", or a JSON schema given inline
    json schema = s.format.front() == '{' ? json::parse(s.format, nullptr, false) : json();
    body["format"] = schema.is_object() ? schema : json(s.format);
  }
  if (s.keep_alive) body["keep_alive"] = *s.keep_alive;
  std::string path;
  if (s.use_chat) {
    path = "/api/chat";
    json messages = json::array();
    if (!s.system.empty()) messages.push_back({{"role", "system"}, {"content", s.system}});
    for (const auto& m : s.messages) messages.push_back(m);
    messages.push_back({{"role", "user"}, {"content", prompt}});
    body["messages"] = messages;
  } else {
    path = "/api/generate";
    body["prompt"] = prompt;
    if (!s.system.empty()) body["system"] = s.system;
    if (s.context.is_array() && !s.context.empty()) body["context"] = s.context;
  }

  AnswerPrinter printer(::isatty(STDOUT_FILENO) != 0, s.word_wrap, s.hide_thinking);
  std::string content, thinking;
  json final_chunk;
  StreamEnd end;
  try {
    end = client.stream(path, body, [&](const json& chunk) {
      std::string piece, thought;
      if (s.use_chat) {
        if (chunk.contains("message") && chunk["message"].is_object()) {
          const json& m = chunk["message"];
          if (m.contains("thinking") && m["thinking"].is_string()) thought = m["thinking"].get<std::string>();
          if (m.contains("content") && m["content"].is_string()) piece = m["content"].get<std::string>();
        }
      } else {
        if (chunk.contains("thinking") && chunk["thinking"].is_string()) thought = chunk["thinking"].get<std::string>();
        if (chunk.contains("response") && chunk["response"].is_string()) piece = chunk["response"].get<std::string>();
      }
      thinking += thought;
      content += piece;
      printer.thinking(thought);
      printer.content(piece);
      if (chunk.value("done", false)) final_chunk = chunk;
      return true;
    });
  } catch (...) {
    printer.interrupt();
    throw;
  }
  if (end == StreamEnd::cancelled) {
    printer.interrupt();
    return end;
  }
  printer.finish();
  if (interactive) {
    std::fputs("\n", stdout);
    std::fflush(stdout);
  }
  if (s.verbose && final_chunk.is_object()) {
    std::string stats = verbose_summary(final_chunk);
    std::fputs(stats.c_str(), stderr);
    if (interactive && !stats.empty()) std::fputs("\n", stderr);
    std::fflush(stderr);
  }

  if (s.use_chat) {
    s.messages.push_back({{"role", "user"}, {"content", prompt}});
    json assistant = {{"role", "assistant"}, {"content", content}};
    if (!thinking.empty()) assistant["thinking"] = thinking;
    s.messages.push_back(assistant);
  } else if (final_chunk.is_object() && final_chunk.contains("context")) {
    s.context = final_chunk["context"];
  }
  return end;
}

}  // namespace vatic::cli
