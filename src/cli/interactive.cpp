// The interactive side of `vatic run`: ollama's REPL (prompts, """ blocks, /set, /show, /clear, /load, /bye) over
// libedit on a terminal, or plain line reading when stdin is a pipe (`vatic run --interactive`).
#include <histedit.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>

#include "cli/client_format.h"
#include "cli/client_interactive.h"
#include "util/error.h"

namespace vatic::cli {
namespace {

namespace fs = std::filesystem;

enum class ReadStatus { line, eof, interrupted };

class LineInput {
 public:
  virtual ~LineInput() = default;
  virtual ReadStatus read(const std::string& prompt, std::string& line) = 0;
  virtual void remember(const std::string& entry) { (void)entry; }
  bool history_enabled = true;
};

// Lines from a pipe, read with read(2) so that Ctrl-C (EINTR) is seen.
class PipeInput final : public LineInput {
 public:
  ReadStatus read(const std::string&, std::string& line) override {
    line.clear();
    while (true) {
      if (pos_ < buf_.size()) {
        size_t nl = buf_.find('\n', pos_);
        if (nl != std::string::npos) {
          line = buf_.substr(pos_, nl - pos_);
          pos_ = nl + 1;
          if (!line.empty() && line.back() == '\r') line.pop_back();
          return ReadStatus::line;
        }
      }
      if (eof_) {
        if (pos_ < buf_.size()) {
          line = buf_.substr(pos_);
          pos_ = buf_.size();
          return ReadStatus::line;
        }
        return ReadStatus::eof;
      }
      char chunk[4096];
      ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0) {
        if (errno == EINTR) {
          if (g_interrupted.exchange(false)) return ReadStatus::interrupted;
          continue;
        }
        eof_ = true;
        continue;
      }
      if (n == 0) {
        eof_ = true;
        continue;
      }
      buf_.erase(0, pos_);
      pos_ = 0;
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  std::string buf_;
  size_t pos_ = 0;
  bool eof_ = false;
};

// libedit with emacs key bindings and a history file.
class EditLineInput final : public LineInput {
 public:
  EditLineInput() {
    el_ = el_init("vatic", stdin, stdout, stderr);
    if (!el_) throw Error("could not initialise line editing (libedit)");
    hist_ = history_init();
    HistEvent ev;
    ::history(hist_, &ev, H_SETSIZE, 1000);
    ::history(hist_, &ev, H_SETUNIQUE, 1);
    el_set(el_, EL_CLIENTDATA, this);
    el_set(el_, EL_PROMPT, &EditLineInput::prompt_fn);
    el_set(el_, EL_EDITOR, "emacs");
    el_set(el_, EL_HIST, ::history, hist_);
    el_set(el_, EL_GETCFN, &EditLineInput::getc_fn);
    el_source(el_, nullptr);  // ~/.editrc, if any
    if (const char* home = std::getenv("HOME"); home && *home) {
      fs::path dir = fs::path(home) / ".vatic";
      std::error_code ec;
      fs::create_directories(dir, ec);
      history_path_ = (dir / "history").string();
      ::history(hist_, &ev, H_LOAD, history_path_.c_str());
    }
  }
  ~EditLineInput() override {
    el_end(el_);
    history_end(hist_);
  }

  ReadStatus read(const std::string& prompt, std::string& line) override {
    prompt_ = prompt;
    int count = 0;
    const char* s = el_gets(el_, &count);
    if (g_interrupted.exchange(false)) {
      el_reset(el_);
      return ReadStatus::interrupted;
    }
    if (!s || count <= 0) return ReadStatus::eof;
    line.assign(s, static_cast<size_t>(count));
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    return ReadStatus::line;
  }

  void remember(const std::string& entry) override {
    if (!history_enabled || entry.empty()) return;
    HistEvent ev;
    ::history(hist_, &ev, H_ENTER, entry.c_str());
    if (!history_path_.empty()) history(hist_, &ev, H_SAVE, history_path_.c_str());
  }

 private:
  static char* prompt_fn(EditLine* el) {
    void* self = nullptr;
    el_get(el, EL_CLIENTDATA, &self);
    return const_cast<char*>(static_cast<EditLineInput*>(self)->prompt_.c_str());
  }

  // Our own reader: libedit's retries a read interrupted by a signal, so Ctrl-C would not end el_gets.
  static int getc_fn(EditLine*, wchar_t* out) {
    unsigned char b[4];
    int need = 1, have = 0;
    while (have < need) {
      ssize_t n = ::read(STDIN_FILENO, b + have, 1);
      if (n == 0) return 0;
      if (n < 0) {
        if (errno == EINTR) {
          if (g_interrupted.load()) return -1;
          continue;
        }
        return -1;
      }
      if (have == 0) {
        unsigned char c = b[0];
        need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
      }
      ++have;
    }
    uint32_t cp;
    switch (need) {
      case 2: cp = ((b[0] & 0x1Fu) << 6) | (b[1] & 0x3Fu); break;
      case 3: cp = ((b[0] & 0x0Fu) << 12) | ((b[1] & 0x3Fu) << 6) | (b[2] & 0x3Fu); break;
      case 4: cp = ((b[0] & 0x07u) << 18) | ((b[1] & 0x3Fu) << 12) | ((b[2] & 0x3Fu) << 6) | (b[3] & 0x3Fu); break;
      default: cp = b[0];
    }
    *out = static_cast<wchar_t>(cp);
    return 1;
  }

  EditLine* el_ = nullptr;
  History* hist_ = nullptr;
  std::string prompt_ = ">>> ";
  std::string history_path_;
};

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string t; in >> t;) w.push_back(t);
  return w;
}

void print(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

const char* kHelp =
    "Available Commands:\n"
    "  /set            Set session variables\n"
    "  /show           Show model information\n"
    "  /load <model>   Load a different model\n"
    "  /clear          Clear session context\n"
    "  /bye            Exit\n"
    "  /?, /help       Help for a command\n"
    "  /? shortcuts    Help for keyboard shortcuts\n"
    "\n"
    "Use \"\"\" to begin a multi-line message.\n"
    "\n";

const char* kSetHelp =
    "Available Commands:\n"
    "  /set parameter ...     Set a parameter\n"
    "  /set system <string>   Set system message\n"
    "  /set history           Enable history\n"
    "  /set nohistory         Disable history\n"
    "  /set wordwrap          Enable wordwrap\n"
    "  /set nowordwrap        Disable wordwrap\n"
    "  /set format json       Enable JSON mode\n"
    "  /set noformat          Disable formatting\n"
    "  /set verbose           Show LLM stats\n"
    "  /set quiet             Disable LLM stats\n"
    "  /set think [level]     Enable thinking (level: low, medium, high, max)\n"
    "  /set nothink           Disable thinking\n"
    "\n";

const char* kParameterHelp =
    "Available Parameters:\n"
    "  /set parameter seed <int>               Random number seed\n"
    "  /set parameter num_predict <int>        Max number of tokens to predict\n"
    "  /set parameter top_k <int>              Pick from top k num of tokens\n"
    "  /set parameter top_p <float>            Pick token based on sum of probabilities\n"
    "  /set parameter min_p <float>            Pick token based on top p with min probability\n"
    "  /set parameter num_ctx <int>            Set the context size\n"
    "  /set parameter temperature <float>      Set creativity level\n"
    "  /set parameter repeat_penalty <float>   How strongly to penalize repetitions\n"
    "  /set parameter repeat_last_n <int>      Set how far back to look for repetitions\n"
    "  /set parameter draft_num_predict <int>  Most draft tokens per speculative round (0 turns speculation off)\n"
    "  /set parameter stop <string> <string> ...   Set the stop parameters\n"
    "\n";

const char* kShowHelp =
    "Available Commands:\n"
    "  /show info         Show details for this model\n"
    "  /show license      Show model license\n"
    "  /show modelfile    Show Modelfile for this model\n"
    "  /show parameters   Show parameters for this model\n"
    "  /show system       Show system message\n"
    "  /show template     Show prompt template\n"
    "\n";

const char* kShortcutsHelp =
    "Available keyboard shortcuts:\n"
    "  Ctrl + a            Move to the beginning of the line (Home)\n"
    "  Ctrl + e            Move to the end of the line (End)\n"
    "   Alt + b            Move back (left) one word\n"
    "   Alt + f            Move forward (right) one word\n"
    "  Ctrl + k            Delete the sentence after the cursor\n"
    "  Ctrl + u            Delete the sentence before the cursor\n"
    "  Ctrl + w            Delete the word before the cursor\n"
    "\n"
    "  Ctrl + l            Clear the screen\n"
    "  Ctrl + c            Stop the model from responding\n"
    "  Ctrl + d            Exit (/bye)\n"
    "\n";

class Repl {
 public:
  Repl(const ApiClient& client, Session& s, LineInput& in) : client_(client), s_(s), in_(in) {}

  int run(const std::string& first_prompt) {
    if (!first_prompt.empty()) send(first_prompt);
    enum class Multi { none, prompt, system } multi = Multi::none;
    std::string block;
    std::string line;
    while (true) {
      ReadStatus st = in_.read(multi == Multi::none ? ">>> " : "... ", line);
      if (st == ReadStatus::eof) {
        if (editline_) print("\n");
        return 0;
      }
      if (st == ReadStatus::interrupted) {
        multi = Multi::none;
        block.clear();
        print("\nUse Ctrl + d or /bye to exit.\n");
        continue;
      }
      if (multi != Multi::none) {
        std::string r = line;
        while (!r.empty() && (r.back() == ' ' || r.back() == '\t')) r.pop_back();
        if (r.size() >= 3 && r.compare(r.size() - 3, 3, "\"\"\"") == 0) {
          block += r.substr(0, r.size() - 3);
          Multi which = multi;
          multi = Multi::none;
          in_.remember(block);
          if (which == Multi::system) {
            set_system(block);
          } else {
            send(block);
          }
          block.clear();
        } else {
          block += line + "\n";
        }
        continue;
      }
      const std::string t = trim(line);
      if (t.empty()) continue;
      if (t.rfind("\"\"\"", 0) == 0) {
        std::string rest = t.substr(3);
        if (rest.size() >= 3 && rest.compare(rest.size() - 3, 3, "\"\"\"") == 0) {
          in_.remember(t);
          send(rest.substr(0, rest.size() - 3));
        } else {
          block = rest.empty() ? "" : rest + "\n";
          multi = Multi::prompt;
        }
        continue;
      }
      if (t[0] == '/') {
        in_.remember(t);
        if (t.rfind("/set system", 0) == 0) {
          std::string rest = trim(t.substr(11));
          if (rest.rfind("\"\"\"", 0) == 0) {
            rest = rest.substr(3);
            if (rest.size() >= 3 && rest.compare(rest.size() - 3, 3, "\"\"\"") == 0) {
              set_system(rest.substr(0, rest.size() - 3));
            } else {
              block = rest.empty() ? "" : rest + "\n";
              multi = Multi::system;
            }
            continue;
          }
        }
        if (!command(t)) return 0;
        continue;
      }
      in_.remember(t);
      send(line);
    }
  }

  bool editline_ = false;

 private:
  void send(const std::string& prompt) {
    if (trim(prompt).empty()) return;
    try {
      if (run_turn(client_, s_, prompt, true) == StreamEnd::cancelled) {
        g_interrupted.store(false);
        print("\n");
      }
    } catch (const Error& e) {
      // a failed turn ends the session like ollama does for server errors; connection loss is not recoverable
      g_interrupted.store(false);
      throw;
    }
  }

  void set_system(const std::string& text) {
    s_.system = text;
    print("Set system message.\n");
  }

  // Returns false to leave the loop.
  bool command(const std::string& t) {
    auto w = split_words(t);
    const std::string& c = w[0];
    if (c == "/bye" || c == "/exit") return false;
    if (c == "/?" || c == "/help") {
      if (w.size() > 1 && w[1] == "set") print(kSetHelp);
      else if (w.size() > 1 && w[1] == "show") print(kShowHelp);
      else if (w.size() > 1 && (w[1] == "shortcuts" || w[1] == "shortcut")) print(kShortcutsHelp);
      else print(kHelp);
      return true;
    }
    if (c == "/clear") {
      s_.messages = json::array();
      s_.context = json();
      print("Cleared session context\n");
      return true;
    }
    if (c == "/set") return set(t, w);
    if (c == "/show") return show(w);
    if (c == "/load") {
      if (w.size() != 2) {
        print("Usage:\n  /load <modelname>\n");
        return true;
      }
      json info;
      try {
        info = client_.post("/api/show", {{"model", w[1]}});
      } catch (const Error& e) {
        print(fmt::format("error: {}\n", e.what()));
        return true;
      }
      s_.model = w[1];
      s_.show = info;
      s_.use_chat = has_chat_format(info);
      s_.messages = json::array();
      s_.context = json();
      print(fmt::format("Loading model '{}'\n", w[1]));
      return true;
    }
    print(fmt::format("Unknown command '{}'. Type /? for help\n", c));
    return true;
  }

  bool set(const std::string& t, const std::vector<std::string>& w) {
    if (w.size() < 2) {
      print(kSetHelp);
      return true;
    }
    const std::string& what = w[1];
    if (what == "parameter") {
      if (w.size() < 4) {
        print(kParameterHelp);
        return true;
      }
      std::vector<std::string> values(w.begin() + 3, w.end());
      try {
        s_.options[w[2]] = parse_parameter(w[2], values);
      } catch (const InvalidInput& e) {
        print(fmt::format("Couldn't set parameter: {}\n", e.what()));
        return true;
      }
      std::string shown;
      for (size_t i = 0; i < values.size(); ++i) shown += (i ? ", " : "") + values[i];
      if (w[2] != "stop") shown = values[0];
      print(fmt::format("Set parameter '{}' to '{}'\n", w[2], shown));
    } else if (what == "system") {
      std::string rest = trim(t.substr(t.find("system") + 6));
      if (rest.size() >= 2 && rest.front() == '"' && rest.back() == '"') rest = rest.substr(1, rest.size() - 2);
      set_system(rest);
    } else if (what == "verbose") {
      s_.verbose = true;
      print("Set 'verbose' mode.\n");
    } else if (what == "quiet") {
      s_.verbose = false;
      print("Set 'quiet' mode.\n");
    } else if (what == "think") {
      if (w.size() > 2) {
        const std::string& level = w[2];
        if (level != "low" && level != "medium" && level != "high" && level != "max" && level != "true" &&
            level != "false") {
          print(fmt::format("Invalid think level '{}': use low, medium, high or max\n", level));
          return true;
        }
        s_.think = level == "true" ? json(true) : level == "false" ? json(false) : json(level);
        print(fmt::format("Set 'think' mode to '{}'.\n", level));
      } else {
        s_.think = true;
        print("Set 'think' mode.\n");
      }
    } else if (what == "nothink") {
      s_.think = false;
      print("Set 'nothink' mode.\n");
    } else if (what == "wordwrap") {
      s_.word_wrap = true;
      print("Set 'wordwrap' mode.\n");
    } else if (what == "nowordwrap") {
      s_.word_wrap = false;
      print("Set 'nowordwrap' mode.\n");
    } else if (what == "format") {
      if (w.size() < 3 || w[2] != "json") {
        print("Invalid or missing format. For 'json' mode use '/set format json'\n");
        return true;
      }
      s_.format = "json";
      print("Set format to 'json' mode.\n");
    } else if (what == "noformat") {
      s_.format.clear();
      print("Disabled format.\n");
    } else if (what == "history") {
      in_.history_enabled = true;
      print("Set 'history' mode.\n");
    } else if (what == "nohistory") {
      in_.history_enabled = false;
      print("Set 'nohistory' mode.\n");
    } else {
      print(fmt::format("Unknown command '/set {}'. Type /? for help\n", what));
    }
    return true;
  }

  bool show(const std::vector<std::string>& w) {
    if (w.size() < 2) {
      print(kShowHelp);
      return true;
    }
    const json& sh = s_.show;
    const std::string& what = w[1];
    auto text_field = [&](const char* key) -> std::string {
      if (!sh.contains(key)) return "";
      const json& v = sh[key];
      if (v.is_string()) return v.get<std::string>();
      if (v.is_array()) {
        std::string out;
        for (const auto& e : v) out += (e.is_string() ? e.get<std::string>() : e.dump()) + "\n";
        return out;
      }
      return v.is_null() ? "" : v.dump(2);
    };
    auto print_block = [&](const std::string& text, const char* none) {
      if (text.empty()) {
        print(std::string(none) + "\n");
        return;
      }
      print(text.back() == '\n' ? text : text + "\n");
    };
    if (what == "info") {
      print(show_info(sh));
    } else if (what == "license") {
      print_block(text_field("license"), "No license was specified for this model.");
    } else if (what == "modelfile") {
      print_block(text_field("modelfile"), "No Modelfile was reported for this model.");
    } else if (what == "parameters") {
      if (!s_.options.empty()) {
        print("User defined parameters:\n");
        for (const auto& [k, v] : s_.options.items())
          print(fmt::format("{:<30} {}\n", k, v.is_string() ? v.get<std::string>() : v.dump()));
        print("\n");
      }
      std::string model_params;
      if (sh.contains("parameters") && sh["parameters"].is_string()) {
        model_params = sh["parameters"].get<std::string>();
      } else if (sh.contains("parameters") && sh["parameters"].is_object()) {
        for (const auto& [k, v] : sh["parameters"].items()) {
          if (v.is_array())
            for (const auto& e : v) model_params += fmt::format("{:<30} {}\n", k, e.dump());
          else
            model_params += fmt::format("{:<30} {}\n", k, v.dump());
        }
      }
      if (!model_params.empty()) {
        print("Model defined parameters:\n");
        print(model_params.back() == '\n' ? model_params : model_params + "\n");
      } else if (s_.options.empty()) {
        print("No parameters were specified for this model.\n");
      }
    } else if (what == "system") {
      print_block(s_.system.empty() ? text_field("system") : s_.system, "No system message was specified for this model.");
    } else if (what == "template") {
      std::string tmpl = text_field("template");
      if (tmpl.empty()) tmpl = text_field("renderer");
      print_block(tmpl, "No prompt template was specified for this model.");
    } else {
      print(fmt::format("Unknown command '/show {}'. Type /? for help\n", what));
    }
    return true;
  }

  const ApiClient& client_;
  Session& s_;
  LineInput& in_;
};

}  // namespace

int run_interactive(const ApiClient& client, Session& session, const std::string& first_prompt, bool editline) {
  install_interrupt_handler();
  // Load the model now (ollama shows its spinner here), so a first answer does not pay for it and errors show early.
  json load = {{"model", session.model}};
  if (session.keep_alive) load["keep_alive"] = *session.keep_alive;
  if (client.stream("/api/generate", load, [](const json&) { return true; }) == StreamEnd::cancelled) return 130;

  std::unique_ptr<LineInput> in;
  if (editline) {
    in = std::make_unique<EditLineInput>();
  } else {
    in = std::make_unique<PipeInput>();
  }
  Repl repl(client, session, *in);
  repl.editline_ = editline;
  return repl.run(first_prompt);
}

}  // namespace vatic::cli
