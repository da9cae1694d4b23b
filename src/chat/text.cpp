#include "chat/text.h"

#include <algorithm>

#include "util/error.h"

namespace vatic::chat::detail {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view lstrip(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return s.substr(i);
}

std::string_view rstrip(std::string_view s) {
  std::size_t n = s.size();
  while (n > 0 && is_space(s[n - 1])) --n;
  return s.substr(0, n);
}

std::string_view strip(std::string_view s) { return rstrip(lstrip(s)); }

std::string upper_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

namespace {

void python_json_into(const ordered_json& v, std::string& out) {
  switch (v.type()) {
    case ordered_json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, item] : v.items()) {
        if (!first) out += ", ";
        first = false;
        out += ordered_json(k).dump(-1, ' ', false, ordered_json::error_handler_t::replace);
        out += ": ";
        python_json_into(item, out);
      }
      out += '}';
      break;
    }
    case ordered_json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v) {
        if (!first) out += ", ";
        first = false;
        python_json_into(item, out);
      }
      out += ']';
      break;
    }
    default:
      out += v.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  }
}

}  // namespace

std::string python_json(const ordered_json& value) {
  std::string out;
  python_json_into(value, out);
  return out;
}

std::size_t find_marker(std::string_view text, std::initializer_list<std::string_view> markers,
                        std::size_t* which, std::size_t from) {
  std::size_t best = std::string_view::npos;
  std::size_t best_len = 0;
  std::size_t idx = 0;
  for (std::string_view m : markers) {
    std::size_t pos = text.find(m, from);
    if (pos != std::string_view::npos && (pos < best || (pos == best && m.size() > best_len))) {
      best = pos;
      best_len = m.size();
      if (which) *which = idx;
    }
    ++idx;
  }
  return best;
}

std::size_t partial_marker_len(std::string_view text, std::initializer_list<std::string_view> markers) {
  std::size_t best = 0;
  for (std::string_view m : markers) {
    std::size_t max_len = std::min(text.size(), m.size() - 1);
    for (std::size_t len = max_len; len > best; --len) {
      if (text.substr(text.size() - len) == m.substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

std::size_t utf8_complete_len(std::string_view text) {
  // Look back over at most 3 continuation bytes for the lead byte of the last sequence.
  std::size_t n = text.size();
  std::size_t back = 0;
  while (back < 3 && back < n && (static_cast<unsigned char>(text[n - 1 - back]) & 0xC0) == 0x80) ++back;
  if (back == n) return n;
  unsigned char lead = static_cast<unsigned char>(text[n - 1 - back]);
  std::size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return need > back + 1 ? n - 1 - back : n;
}

std::size_t safe_emit_len(std::string_view text, std::initializer_list<std::string_view> markers) {
  std::size_t n = text.size() - partial_marker_len(text, markers);
  return utf8_complete_len(rstrip(text.substr(0, n)));
}

void check_role(const std::string& role, std::size_t index) {
  if (role == "system" || role == "developer" || role == "user" || role == "assistant" || role == "tool") return;
  throw InvalidInput(fmt::format(
      "message {}: unknown role \"{}\" (expected system, developer, user, assistant or tool)", index, role));
}

}  // namespace vatic::chat::detail
