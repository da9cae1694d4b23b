#pragma once
// One conversation with a model on the server: the request options, the history, and printing a streamed answer
// (thinking dimmed on a terminal, word wrap, --verbose stats). Shared by `vatic run PROMPT` and the interactive loop.
#include <optional>
#include <string>

#include "cli/client_api.h"
#include "util/json.h"

namespace vatic::cli {

struct Session {
  std::string model;
  std::optional<json> think;  // true, false or a level ("high"); absent: the model's default
  bool hide_thinking = false;
  bool verbose = false;
  bool word_wrap = true;
  std::string format;                // "" or "json"
  std::optional<json> keep_alive;    // "5m", 300, -1; absent: the server's default
  json options = json::object();     // /set parameter
  std::string system;                // /set system
  bool use_chat = true;              // false for models without a chat format: /api/generate
  json messages = json::array();     // chat history (without the system message)
  json context;                      // /api/generate's context from the previous answer
  json show;                         // the model's /api/show answer
};

// Whether /api/show describes a model with a chat format (a renderer or a template); otherwise prompts go to
// /api/generate as they are.
bool has_chat_format(const json& show);

// Typed value for `/set parameter NAME VALUE...`; throws InvalidInput for unknown names and bad values.
json parse_parameter(const std::string& name, const std::vector<std::string>& values);

// Prints the streamed answer. On a terminal thinking is dimmed and long lines wrap at word boundaries.
class AnswerPrinter {
 public:
  AnswerPrinter(bool tty, bool word_wrap, bool hide_thinking);
  void thinking(const std::string& text);
  void content(const std::string& text);
  void finish();     // flushes, closes the thinking block and ends the last line
  void interrupt();  // the same after Ctrl-C, leaving the terminal's colours reset

 private:
  void write(const std::string& text);
  void escape(const char* code);  // colours, on a terminal only
  void emit(const std::string& text);  // through the word wrapper
  void flush_word();
  void end_thinking();

  bool tty_, wrap_, hide_thinking_;
  int width_ = 80;
  bool in_thinking_ = false;
  size_t column_ = 0;
  std::string word_;
  size_t word_width_ = 0;
  char last_ = '\n';
  bool wrote_ = false;
};

// Sends `prompt` as the next turn, prints the answer (and the stats with verbose) and records the turn in the
// history. Returns cancelled after Ctrl-C; the turn is then left out of the history.
StreamEnd run_turn(const ApiClient& client, Session& session, const std::string& prompt, bool interactive);

}  // namespace vatic::cli
