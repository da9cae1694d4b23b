#include "tokenizer/fast_json.h"

#include "tokenizer/unicode.h"

namespace vatic::tok::fastjson {

namespace {

inline void skip_ws(std::string_view d, std::size_t& p) {
  while (p < d.size() && (d[p] == ' ' || d[p] == '\n' || d[p] == '\r' || d[p] == '\t')) ++p;
}

int hex4(std::string_view d, std::size_t p) {
  if (p + 4 > d.size()) return -1;
  int v = 0;
  for (std::size_t k = 0; k < 4; ++k) {
    char c = d[p + k];
    int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

// Parses a string starting at d[p] == '"'; appends the unescaped text to out.
bool parse_string(std::string_view d, std::size_t& p, std::string& out) {
  if (p >= d.size() || d[p] != '"') return false;
  ++p;
  std::size_t start = p;
  while (p < d.size() && d[p] != '"' && d[p] != '\\' && static_cast<unsigned char>(d[p]) >= 0x20) ++p;
  out.append(d.substr(start, p - start));
  while (p < d.size()) {
    char c = d[p];
    if (c == '"') {
      ++p;
      return true;
    }
    if (static_cast<unsigned char>(c) < 0x20) return false;
    if (c != '\\') {
      out.push_back(c);
      ++p;
      continue;
    }
    if (p + 1 >= d.size()) return false;
    char e = d[p + 1];
    p += 2;
    switch (e) {
      case '"': out.push_back('"'); break;
      case '\\': out.push_back('\\'); break;
      case '/': out.push_back('/'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'u': {
        int v = hex4(d, p);
        if (v < 0) return false;
        p += 4;
        char32_t cp = static_cast<char32_t>(v);
        if (v >= 0xD800 && v <= 0xDBFF) {
          if (p + 6 > d.size() || d[p] != '\\' || d[p + 1] != 'u') return false;
          int lo = hex4(d, p + 2);
          if (lo < 0xDC00 || lo > 0xDFFF) return false;
          p += 6;
          cp = 0x10000 + ((static_cast<char32_t>(v) - 0xD800) << 10) + (static_cast<char32_t>(lo) - 0xDC00);
        } else if (v >= 0xDC00 && v <= 0xDFFF) {
          return false;
        }
        unicode::append_utf8(out, cp);
        break;
      }
      default:
        return false;
    }
  }
  return false;
}

bool skip_string(std::string_view d, std::size_t& p) {
  ++p;  // opening quote
  while (p < d.size()) {
    char c = d[p];
    if (c == '"') {
      ++p;
      return true;
    }
    p += c == '\\' ? 2 : 1;
  }
  return false;
}

bool parse_int(std::string_view d, std::size_t& p, int64_t& v) {
  bool neg = p < d.size() && d[p] == '-';
  if (neg) ++p;
  std::size_t start = p;
  v = 0;
  while (p < d.size() && d[p] >= '0' && d[p] <= '9') {
    v = v * 10 + (d[p] - '0');
    if (v > (int64_t{1} << 40)) return false;
    ++p;
  }
  if (p == start) return false;
  if (p < d.size() && (d[p] == '.' || d[p] == 'e' || d[p] == 'E')) return false;
  if (neg) v = -v;
  return true;
}

}  // namespace

std::optional<std::string_view> skip_value(std::string_view d, std::size_t& p) {
  skip_ws(d, p);
  std::size_t start = p;
  if (p >= d.size()) return std::nullopt;
  char c = d[p];
  if (c == '"') {
    if (!skip_string(d, p)) return std::nullopt;
    return d.substr(start, p - start);
  }
  if (c == '{' || c == '[') {
    int depth = 0;
    while (p < d.size()) {
      char x = d[p];
      if (x == '"') {
        if (!skip_string(d, p)) return std::nullopt;
        continue;
      }
      if (x == '{' || x == '[') ++depth;
      if (x == '}' || x == ']') {
        if (--depth == 0) {
          ++p;
          return d.substr(start, p - start);
        }
      }
      ++p;
    }
    return std::nullopt;
  }
  // number, true, false, null
  while (p < d.size() && d[p] != ',' && d[p] != '}' && d[p] != ']' && d[p] != ' ' && d[p] != '\n' && d[p] != '\r' &&
         d[p] != '\t')
    ++p;
  if (p == start) return std::nullopt;
  return d.substr(start, p - start);
}

std::optional<std::vector<std::pair<std::string, std::string_view>>> object_members(std::string_view o) {
  std::size_t p = 0;
  skip_ws(o, p);
  if (p >= o.size() || o[p] != '{') return std::nullopt;
  ++p;
  std::vector<std::pair<std::string, std::string_view>> out;
  skip_ws(o, p);
  if (p < o.size() && o[p] == '}') return out;
  while (p < o.size()) {
    skip_ws(o, p);
    std::string key;
    if (!parse_string(o, p, key)) return std::nullopt;
    skip_ws(o, p);
    if (p >= o.size() || o[p] != ':') return std::nullopt;
    ++p;
    auto v = skip_value(o, p);
    if (!v) return std::nullopt;
    out.emplace_back(std::move(key), *v);
    skip_ws(o, p);
    if (p < o.size() && o[p] == ',') {
      ++p;
      continue;
    }
    if (p < o.size() && o[p] == '}') return out;
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::vector<std::pair<std::string, int64_t>>> parse_vocab(std::string_view o) {
  std::size_t p = 0;
  skip_ws(o, p);
  if (p >= o.size() || o[p] != '{') return std::nullopt;
  ++p;
  std::vector<std::pair<std::string, int64_t>> out;
  out.reserve(o.size() / 16);
  skip_ws(o, p);
  if (p < o.size() && o[p] == '}') return out;
  std::string key;
  while (p < o.size()) {
    skip_ws(o, p);
    key.clear();
    if (!parse_string(o, p, key)) return std::nullopt;
    skip_ws(o, p);
    if (p >= o.size() || o[p] != ':') return std::nullopt;
    ++p;
    skip_ws(o, p);
    int64_t v;
    if (!parse_int(o, p, v)) return std::nullopt;
    out.emplace_back(key, v);
    skip_ws(o, p);
    if (p < o.size() && o[p] == ',') {
      ++p;
      continue;
    }
    if (p < o.size() && o[p] == '}') return out;
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::vector<std::pair<std::string, std::string>>> parse_merges(std::string_view a) {
  std::size_t p = 0;
  skip_ws(a, p);
  if (p >= a.size() || a[p] != '[') return std::nullopt;
  ++p;
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(a.size() / 16);
  skip_ws(a, p);
  if (p < a.size() && a[p] == ']') return out;
  std::string s, t;
  while (p < a.size()) {
    skip_ws(a, p);
    s.clear();
    t.clear();
    if (p < a.size() && a[p] == '"') {
      if (!parse_string(a, p, s)) return std::nullopt;
      auto sp = s.find(' ');
      if (sp == std::string::npos) return std::nullopt;
      t.assign(s, sp + 1, std::string::npos);
      s.resize(sp);
      out.emplace_back(std::move(s), std::move(t));
    } else if (p < a.size() && a[p] == '[') {
      ++p;
      skip_ws(a, p);
      if (!parse_string(a, p, s)) return std::nullopt;
      skip_ws(a, p);
      if (p >= a.size() || a[p] != ',') return std::nullopt;
      ++p;
      skip_ws(a, p);
      if (!parse_string(a, p, t)) return std::nullopt;
      skip_ws(a, p);
      if (p >= a.size() || a[p] != ']') return std::nullopt;
      ++p;
      out.emplace_back(std::move(s), std::move(t));
    } else {
      return std::nullopt;
    }
    skip_ws(a, p);
    if (p < a.size() && a[p] == ',') {
      ++p;
      continue;
    }
    if (p < a.size() && a[p] == ']') return out;
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace vatic::tok::fastjson
