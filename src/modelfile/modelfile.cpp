#include "modelfile/modelfile.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>

#include "util/error.h"
#include "util/files.h"

namespace vatic {
namespace {

namespace fs = std::filesystem;

enum class ParamType { Float, Int, StringList };

struct ParamSpec {
  ParamType type;
  double min, max;  // inclusive bounds
  const char* what;  // expected value, for messages
};

const std::map<std::string, ParamSpec>& param_specs() {
  static const std::map<std::string, ParamSpec> specs = {
      {"temperature", {ParamType::Float, 0, 100, "a number >= 0"}},
      {"top_k", {ParamType::Int, 0, 1e9, "an integer >= 0 (0 disables)"}},
      {"top_p", {ParamType::Float, 0, 1, "a number between 0 and 1"}},
      {"min_p", {ParamType::Float, 0, 1, "a number between 0 and 1"}},
      {"repeat_penalty", {ParamType::Float, 0, 100, "a number >= 0"}},
      {"repeat_last_n", {ParamType::Int, -1, 1e9, "an integer >= -1 (-1 = the whole context)"}},
      {"presence_penalty", {ParamType::Float, -100, 100, "a number"}},
      {"frequency_penalty", {ParamType::Float, -100, 100, "a number"}},
      {"seed", {ParamType::Int, -9.2e18, 9.2e18, "an integer"}},
      {"stop", {ParamType::StringList, 0, 0, "a non-empty string"}},
      {"num_ctx", {ParamType::Int, 1, 1e9, "an integer >= 1"}},
      {"num_predict", {ParamType::Int, -2, 1e9, "an integer >= -2 (-1 = unlimited, -2 = fill the context)"}},
      {"draft_num_predict", {ParamType::Int, 0, 64, "an integer between 0 and 64"}},
  };
  return specs;
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}
std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

[[noreturn]] void line_error(int line, const std::string& msg) {
  throw InvalidInput(fmt::format("Modelfile line {}: {}", line, msg));
}

// Splits the text into lines while letting """ blocks span several of them.
class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}
  bool done() const { return pos_ >= text_.size(); }
  int line() const { return line_; }

  // The next physical line (without the newline); advances.
  std::string_view next_line() {
    size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) end = text_.size();
    std::string_view l = text_.substr(pos_, end - pos_);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    pos_ = end + 1;
    ++line_;
    return l;
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 0;
};

// One argument: a """block""" (possibly multi-line), a "quoted string", or the raw rest of the line.
// `rest` is what follows the command on its line; more lines are pulled from `r` for an open """ block.
std::string read_text_argument(std::string_view rest, Reader& r, int line, bool* quoted = nullptr) {
  rest = trim(rest);
  if (quoted) *quoted = false;
  if (rest.substr(0, 3) == "\"\"\"") {
    if (quoted) *quoted = true;
    std::string body(rest.substr(3));
    size_t close = body.find("\"\"\"");
    while (close == std::string::npos) {
      if (r.done()) line_error(line, "unterminated \"\"\" string (expected a closing \"\"\")");
      body += '\n';
      body += r.next_line();
      close = body.find("\"\"\"");
    }
    if (!trim(std::string_view(body).substr(close + 3)).empty())
      line_error(r.line(), "unexpected text after the closing \"\"\"");
    return body.substr(0, close);
  }
  if (!rest.empty() && rest.front() == '"') {
    if (quoted) *quoted = true;
    std::string out;
    size_t i = 1;
    for (; i < rest.size(); ++i) {
      char c = rest[i];
      if (c == '\\' && i + 1 < rest.size()) {
        char e = rest[++i];
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      } else if (c == '"') {
        break;
      } else {
        out += c;
      }
    }
    if (i >= rest.size()) line_error(line, "unterminated quoted string (expected a closing \")");
    if (!trim(rest.substr(i + 1)).empty()) line_error(line, "unexpected text after the closing quote");
    return out;
  }
  return std::string(rest);
}

// Splits off the first whitespace-separated word.
std::pair<std::string, std::string_view> split_word(std::string_view s) {
  s = trim(s);
  size_t i = 0;
  while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return {std::string(s.substr(0, i)), s.substr(i)};
}

bool looks_like_path(const std::string& t) {
  return t.starts_with("/") || t.starts_with("~") || t.starts_with("./") || t.starts_with("../") || t == "." ||
         t == "..";
}

ModelRef make_ref(const std::string& text, const fs::path& base_dir) {
  ModelRef ref;
  ref.text = text;
  fs::path p;
  if (text.starts_with("~")) {
    const char* home = std::getenv("HOME");
    if (!home) throw InvalidInput(fmt::format("cannot expand {}: HOME is not set", text));
    std::string tail = text.substr(1);
    while (!tail.empty() && tail.front() == '/') tail.erase(0, 1);
    p = fs::path(home) / tail;
  } else {
    p = fs::path(text);
  }
  if (p.is_relative()) p = base_dir / p;
  std::error_code ec;
  if (looks_like_path(text) || fs::is_directory(p, ec)) {
    p = fs::absolute(p, ec).lexically_normal();
    std::string s = p.string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    ref.path = s;
  }
  return ref;
}

bool same_path(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return a == b;
}

std::string format_number(const json& v) {
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  return fmt::format("{}", v.get<double>());
}

// Quotes a text argument so that read_text_argument gives it back unchanged.
std::string quote_text(const std::string& s) {
  // A carriage return would be taken for part of a line ending when read back: only the escaped form keeps it.
  const bool has_cr = s.find('\r') != std::string::npos;
  bool plain = !s.empty() && s.find('\n') == std::string::npos && !has_cr && s.front() != '"' &&
               trim(s).size() == s.size();
  if (plain) return s;
  if (!has_cr && s.find("\"\"\"") == std::string::npos && (s.empty() || s.back() != '"'))
    return "\"\"\"" + s + "\"\"\"";
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n' || c == '\r') {
      out += c == '\n' ? "\\n" : "\\r";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

const std::vector<std::string>& modelfile_commands() {
  static const std::vector<std::string> cmds = {"FROM",    "DRAFT",   "PARAMETER", "SYSTEM",  "TEMPLATE",
                                                "RENDERER", "PARSER", "MESSAGE",   "LICENSE", "REQUIRES"};
  return cmds;
}

const std::vector<std::string>& modelfile_parameter_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& [k, spec] : param_specs()) v.push_back(k);
    return v;
  }();
  return names;
}

json parse_parameter_value(const std::string& name, const std::string& value) {
  auto it = param_specs().find(name);
  if (it == param_specs().end())
    throw InvalidInput(fmt::format("unknown parameter \"{}\"; valid parameters: {}", name,
                                   join(modelfile_parameter_names(), ", ")));
  const ParamSpec& spec = it->second;
  auto bad = [&]() -> InvalidInput {
    return InvalidInput(fmt::format("parameter {} expects {}, got \"{}\"", name, spec.what, value));
  };
  if (spec.type == ParamType::StringList) {
    if (value.empty()) throw bad();
    return value;
  }
  std::string v(trim(value));
  if (v.empty()) throw bad();
  errno = 0;
  char* end = nullptr;
  if (spec.type == ParamType::Int) {
    long long n = std::strtoll(v.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || static_cast<double>(n) < spec.min || static_cast<double>(n) > spec.max)
      throw bad();
    return static_cast<int64_t>(n);
  }
  double d = std::strtod(v.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(d) || d < spec.min || d > spec.max) throw bad();
  return d;
}

Modelfile parse_modelfile(std::string_view text, const fs::path& base_dir) {
  Modelfile m;
  Reader r(text);
  std::map<std::string, int> seen;  // single-valued command -> line
  int from_line = 0, draft_line = 0;
  while (!r.done()) {
    std::string_view raw = r.next_line();
    int line = r.line();
    std::string_view l = trim(raw);
    if (l.empty() || l.front() == '#') continue;
    auto [word, rest] = split_word(l);
    std::string cmd = upper(word);
    const auto& cmds = modelfile_commands();
    if (std::find(cmds.begin(), cmds.end(), cmd) == cmds.end())
      line_error(line, fmt::format("unknown command \"{}\"; valid commands: {}", word, join(cmds, ", ")));
    bool single = cmd != "PARAMETER" && cmd != "MESSAGE" && cmd != "LICENSE";
    if (single) {
      auto [it, fresh] = seen.emplace(cmd, line);
      if (!fresh) line_error(line, fmt::format("{} is given twice (first on line {})", cmd, it->second));
    }
    if (cmd == "PARAMETER") {
      auto [name, value_part] = split_word(rest);
      if (name.empty()) line_error(line, "PARAMETER expects a name and a value, e.g. PARAMETER temperature 0.7");
      std::string key = lower(name);
      bool quoted = false;
      std::string value = read_text_argument(value_part, r, line, &quoted);
      if (value.empty() && !quoted)
        line_error(line, fmt::format("PARAMETER {} expects a value after the name", name));
      json v;
      try {
        v = parse_parameter_value(key, value);
      } catch (const InvalidInput& e) {
        line_error(line, e.what());
      }
      if (key == "stop") {
        if (!m.params.contains("stop")) m.params["stop"] = json::array();
        m.params["stop"].push_back(v);
      } else {
        m.params[key] = v;
      }
      continue;
    }
    if (cmd == "MESSAGE") {
      auto [role, content_part] = split_word(rest);
      std::string rl = lower(role);
      if (rl != "system" && rl != "user" && rl != "assistant" && rl != "tool")
        line_error(line, fmt::format("MESSAGE expects a role (system, user, assistant or tool) and the content, "
                                     "got role \"{}\"",
                                     role));
      m.messages.push_back({rl, read_text_argument(content_part, r, line)});
      continue;
    }
    bool quoted = false;
    std::string arg = read_text_argument(rest, r, line, &quoted);
    auto need = [&](const char* what) {
      if (arg.empty() && !quoted) line_error(line, fmt::format("{} expects {}", cmd, what));
    };
    if (cmd == "FROM" || cmd == "DRAFT") {
      need("a safetensors directory or a model name");
      if (arg.find('\n') != std::string::npos)
        line_error(line, fmt::format("{} expects a single path or model name", cmd));
      try {
        (cmd == "FROM" ? m.from : m.draft) = make_ref(arg, base_dir);
      } catch (const InvalidInput& e) {
        line_error(line, e.what());
      }
      (cmd == "FROM" ? from_line : draft_line) = line;
    } else if (cmd == "SYSTEM") {
      m.system = arg;
    } else if (cmd == "TEMPLATE") {
      m.template_text = arg;
    } else if (cmd == "LICENSE") {
      need("the license text");
      m.licenses.push_back(arg);
    } else if (cmd == "RENDERER" || cmd == "PARSER") {
      need("a chat format name, e.g. gemma4");
      for (char c : arg)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
          line_error(line, fmt::format("{} expects a chat format name (letters, digits, '-', '_', '.'), got \"{}\"",
                                       cmd, arg));
      (cmd == "RENDERER" ? m.renderer : m.parser) = arg;
    } else if (cmd == "REQUIRES") {
      need("a version, e.g. 0.1.0");
      int parts = 0;
      bool ok = true;
      std::string_view v = arg;
      if (v.starts_with("v")) v.remove_prefix(1);
      size_t i = 0;
      while (ok && i <= v.size()) {
        size_t j = v.find('.', i);
        if (j == std::string_view::npos) j = v.size();
        std::string_view part = v.substr(i, j - i);
        ok = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(
                                  static_cast<unsigned char>(c)); });
        ++parts;
        i = j + 1;
      }
      if (!ok || parts > 3)
        line_error(line, fmt::format("REQUIRES expects a version like 0.1.0, got \"{}\"", arg));
      m.requires_version = arg;
    }
  }
  if (m.from.empty())
    throw InvalidInput("Modelfile: no FROM line; expected FROM <safetensors directory or model name>");
  if (!m.draft.empty()) {
    bool same = (m.from.is_path() && m.draft.is_path() && same_path(m.from.path, m.draft.path)) ||
                (!m.from.is_path() && !m.draft.is_path() && m.from.text == m.draft.text);
    if (same)
      line_error(draft_line, fmt::format("DRAFT must not reference the same model as FROM (line {}): {}", from_line,
                                         m.draft.is_path() ? m.draft.path.string() : m.draft.text));
  }
  return m;
}

Modelfile read_modelfile(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw NotFound(fmt::format("Modelfile {} not found", path.string()));
  fs::path dir = fs::absolute(path, ec).parent_path();
  return parse_modelfile(read_file(path), dir);
}

std::string format_modelfile(const Modelfile& m) {
  std::string out;
  auto ref = [](const ModelRef& r) {
    std::string s = r.is_path() ? r.path.string() : r.text;
    return quote_text(s);
  };
  out += "FROM " + ref(m.from) + "\n";
  if (!m.draft.empty()) out += "DRAFT " + ref(m.draft) + "\n";
  if (!m.template_text.empty()) out += "TEMPLATE " + quote_text(m.template_text) + "\n";
  if (!m.system.empty()) out += "SYSTEM " + quote_text(m.system) + "\n";
  if (!m.renderer.empty()) out += "RENDERER " + quote_text(m.renderer) + "\n";
  if (!m.parser.empty()) out += "PARSER " + quote_text(m.parser) + "\n";
  for (const auto& [k, v] : m.params.items()) {
    if (v.is_array()) {
      for (const auto& s : v) out += "PARAMETER " + k + " " + quote_text(s.get<std::string>()) + "\n";
    } else if (v.is_string()) {
      out += "PARAMETER " + k + " " + quote_text(v.get<std::string>()) + "\n";
    } else {
      out += "PARAMETER " + k + " " + format_number(v) + "\n";
    }
  }
  for (const auto& msg : m.messages) out += "MESSAGE " + msg.role + " " + quote_text(msg.content) + "\n";
  for (const auto& l : m.licenses) out += "LICENSE " + quote_text(l) + "\n";
  if (!m.requires_version.empty()) out += "REQUIRES " + m.requires_version + "\n";
  return out;
}

}  // namespace vatic
