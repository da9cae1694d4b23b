#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "util/error.h"

namespace vatic::grammar {

namespace {

using Ranges = std::vector<std::pair<char32_t, char32_t>>;
constexpr char32_t kMaxCp = 0x10FFFF;

Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto [lo, hi] : r) {
    if (lo > hi) continue;
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.push_back({lo, hi});
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges n = normalize(r), out;
  char32_t next = 0;
  for (auto [lo, hi] : n) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCp) out.push_back({next, kMaxCp});
  return out;
}

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// UTF-8 byte sequences of the code points [lo, hi] (same encoded length, no surrogates), as in Rust's
// regex-syntax Utf8Sequences.
void utf8_ranges(char32_t lo, char32_t hi, std::vector<Expr>& out) {
  static const char32_t bounds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCp};
  for (char32_t b : bounds)
    if (lo <= b && hi > b) {
      utf8_ranges(lo, b, out);
      utf8_ranges(b + 1, hi, out);
      return;
    }
  if (lo <= 0xDFFF && hi >= 0xD800) {  // surrogates are not characters
    if (lo < 0xD800) utf8_ranges(lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_ranges(0xE000, hi, out);
    return;
  }
  if (hi < 0x80) {
    out.push_back(Expr::range(static_cast<unsigned char>(lo), static_cast<unsigned char>(hi)));
    return;
  }
  for (int i = 1; i < 4; i++) {
    const char32_t m = (char32_t(1) << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_ranges(lo, lo | m, out);
        utf8_ranges((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_ranges(lo, (hi & ~m) - 1, out);
        utf8_ranges(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a = utf8(lo), b = utf8(hi);
  std::vector<Expr> seq;
  for (size_t i = 0; i < a.size(); i++)
    seq.push_back(Expr::range(static_cast<unsigned char>(a[i]), static_cast<unsigned char>(b[i])));
  out.push_back(Expr::seq(std::move(seq)));
}

// How string characters are written: as in a JSON string; as in a JSON string with '<' always escaped (so no
// text marker, which starts with '<', can appear inside); or raw UTF-8 without '<' and '\n' (a value in a
// format that is not JSON, where those characters could open a marker or be trimmed as formatting).
enum class Encoding { Json, JsonNoLt, Raw };

Expr hex_digit() {
  ByteSet s;
  for (char c : std::string("0123456789abcdefABCDEF")) s.set(static_cast<unsigned char>(c));
  return Expr::bytes(s);
}

// One character of a JSON string, written as JSON would: escaped when it must be.
Expr encoded_char(char32_t c, Encoding enc = Encoding::Json) {
  if (c == '<' && enc == Encoding::JsonNoLt)
    return Expr::seq({Expr::lit("\\u003"), Expr::alt({Expr::byte('c'), Expr::byte('C')})});
  switch (c) {
    case '"':
      return Expr::lit("\\\"");
    case '\\':
      return Expr::lit("\\\\");
    case '\n':
      return Expr::lit("\\n");
    case '\t':
      return Expr::lit("\\t");
    case '\r':
      return Expr::lit("\\r");
    case '\b':
      return Expr::lit("\\b");
    case '\f':
      return Expr::lit("\\f");
    default:
      break;
  }
  if (c < 0x20) {
    const char* hex = "0123456789abcdef";
    ByteSet hi, lo;
    hi.set(static_cast<unsigned char>(hex[c >> 4]));
    lo.set(static_cast<unsigned char>(hex[c & 15]));
    lo.set(static_cast<unsigned char>(std::toupper(hex[c & 15])));
    return Expr::seq({Expr::lit("\\u00"), Expr::bytes(hi), Expr::bytes(lo)});
  }
  return Expr::lit(utf8(c));
}

// Any character of the set, encoded as `enc` says.
Expr charset_expr(const Ranges& r, Encoding enc = Encoding::Json) {
  ByteSet ascii;
  std::vector<Expr> alts;
  for (auto [lo, hi] : normalize(r)) {
    for (char32_t c = lo; c <= std::min<char32_t>(hi, 0x7F); c++) {
      if (enc == Encoding::Raw) {
        if (c != '<' && c != '\n') ascii.set(c);
      } else if (c == '"' || c == '\\' || c < 0x20 || (c == '<' && enc == Encoding::JsonNoLt)) {
        alts.push_back(encoded_char(c, enc));
      } else {
        ascii.set(c);
      }
    }
    if (hi >= 0x80) utf8_ranges(std::max<char32_t>(lo, 0x80), hi, alts);
  }
  if (ascii.any()) alts.push_back(Expr::bytes(ascii));
  return Expr::alt(std::move(alts));
}

// Any JSON string character, escapes included (no \u escapes of surrogates, so each unit is one character).
// Raw: any character but '<' and '\n'.
Expr json_char(Encoding enc = Encoding::Json) {
  if (enc == Encoding::Raw) return charset_expr({{0, kMaxCp}}, enc);
  Expr raw = charset_expr({{0x20, kMaxCp}}, enc);  // '"' and '\' come out escaped
  ByteSet simple;
  for (char c : std::string("\"\\/bfnrt")) simple.set(static_cast<unsigned char>(c));
  ByteSet not_d;
  for (char c : std::string("0123456789abcefABCEF")) not_d.set(static_cast<unsigned char>(c));
  ByteSet low;
  for (char c : std::string("01234567")) low.set(static_cast<unsigned char>(c));
  ByteSet d;
  d.set('d');
  d.set('D');
  Expr u = Expr::seq({Expr::lit("\\u"),
                      Expr::alt({Expr::seq({Expr::bytes(not_d), hex_digit(), hex_digit(), hex_digit()}),
                                 Expr::seq({Expr::bytes(d), Expr::bytes(low), hex_digit(), hex_digit()})})});
  return Expr::alt({raw, Expr::seq({Expr::byte('\\'), Expr::bytes(simple)}), u});
}

// ---------------------------------------------------------------- regular expressions

class RegexParser {
 public:
  RegexParser(std::string_view pattern, Encoding enc = Encoding::Json) : src_(pattern), enc_(enc) {
    for (size_t i = 0; i < pattern.size();) {
      unsigned char c = pattern[i];
      int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
      char32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
      for (int k = 1; k < n && i + k < pattern.size(); k++) cp = (cp << 6) | (pattern[i + k] & 0x3f);
      cps_.push_back(cp);
      i += n;
    }
  }

  Expr parse(bool& anchored_start, bool& anchored_end) {
    anchored_start = !cps_.empty() && cps_[0] == '^';
    if (anchored_start) pos_ = 1;
    Expr e = alternation();
    anchored_end = end_anchor_;
    if (pos_ != cps_.size()) fail_at("unexpected ')'");
    return e;
  }

 private:
  [[noreturn]] void fail_at(const std::string& why) const {
    throw InvalidInput(fmt::format("pattern \"{}\": {} (at character {})", src_, why, pos_));
  }
  bool more() const { return pos_ < cps_.size(); }
  char32_t peek() const { return cps_[pos_]; }

  Expr alternation() {
    std::vector<Expr> alts = {concat()};
    while (more() && peek() == '|') {
      pos_++;
      alts.push_back(concat());
    }
    return Expr::alt(std::move(alts));
  }

  Expr concat() {
    std::vector<Expr> items;
    while (more() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        if (pos_ + 1 != cps_.size()) fail_at("'$' is supported only at the end");
        pos_++;
        end_anchor_ = true;
        break;
      }
      if (peek() == '^') fail_at("'^' is supported only at the start");
      Expr a = atom();
      items.push_back(quantified(std::move(a)));
    }
    return Expr::seq(std::move(items));
  }

  int number() {
    if (!more() || peek() < '0' || peek() > '9') fail_at("expected a number in a {} quantifier");
    long v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > 1000) fail_at("repetition counts above 1000 are not supported");
      pos_++;
    }
    return static_cast<int>(v);
  }

  Expr quantified(Expr a) {
    while (more()) {
      char32_t c = peek();
      int mn, mx;
      if (c == '*') {
        mn = 0, mx = -1;
        pos_++;
      } else if (c == '+') {
        mn = 1, mx = -1;
        pos_++;
      } else if (c == '?') {
        mn = 0, mx = 1;
        pos_++;
      } else if (c == '{') {
        size_t save = pos_;
        pos_++;
        if (!more() || peek() < '0' || peek() > '9') {  // a literal '{'
          pos_ = save;
          return a;
        }
        mn = number();
        mx = mn;
        if (more() && peek() == ',') {
          pos_++;
          mx = more() && peek() == '}' ? -1 : number();
        }
        if (!more() || peek() != '}') fail_at("unterminated {} quantifier");
        pos_++;
        if (mx >= 0 && mx < mn) fail_at("quantifier {n,m} with m < n");
      } else {
        return a;
      }
      if (more() && peek() == '?') pos_++;  // lazy: the same language
      a = Expr::repeat(std::move(a), mn, mx);
    }
    return a;
  }

  static Ranges digit() { return {{'0', '9'}}; }
  static Ranges word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
  static Ranges space() {
    return {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
            {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  }

  char32_t hex_value(int digits) {
    char32_t v = 0;
    for (int i = 0; i < digits; i++) {
      if (!more()) fail_at("truncated escape");
      char32_t c = peek();
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) fail_at("bad hexadecimal escape");
      v = v * 16 + d;
      pos_++;
    }
    return v;
  }

  // After a backslash: a class (\d ...) or one character.
  Ranges escape(bool in_class) {
    if (!more()) fail_at("pattern ends with a backslash");
    char32_t c = peek();
    pos_++;
    switch (c) {
      case 'd':
        return digit();
      case 'D':
        return complement(digit());
      case 'w':
        return word();
      case 'W':
        return complement(word());
      case 's':
        return space();
      case 'S':
        return complement(space());
      case 'n':
        return {{'\n', '\n'}};
      case 't':
        return {{'\t', '\t'}};
      case 'r':
        return {{'\r', '\r'}};
      case 'f':
        return {{'\f', '\f'}};
      case 'v':
        return {{'\v', '\v'}};
      case '0':
        return {{0, 0}};
      case 'x': {
        char32_t v = hex_value(2);
        return {{v, v}};
      }
      case 'u': {
        char32_t v = hex_value(4);
        return {{v, v}};
      }
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        fail_at("word boundaries (\\b) are not supported");
      default:
        break;
    }
    if ((c >= '1' && c <= '9') || c == 'B' || c == 'k' || c == 'p' || c == 'P' || c == 'c')
      fail_at(fmt::format("the escape \\{} is not supported", utf8(c)));
    return {{c, c}};
  }

  Ranges char_class() {
    // after '['
    bool negate = more() && peek() == '^';
    if (negate) pos_++;
    Ranges r;
    bool first = true;
    while (true) {
      if (!more()) fail_at("unterminated character class");
      if (peek() == ']' && !first) {
        pos_++;
        break;
      }
      first = false;
      Ranges one;
      bool single = true;
      if (peek() == '\\') {
        pos_++;
        one = escape(true);
        single = one.size() == 1 && one[0].first == one[0].second;
      } else {
        one = {{peek(), peek()}};
        pos_++;
      }
      if (single && more() && peek() == '-' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != ']') {
        pos_++;
        Ranges hi;
        if (peek() == '\\') {
          pos_++;
          hi = escape(true);
        } else {
          hi = {{peek(), peek()}};
          pos_++;
        }
        if (hi.size() != 1 || hi[0].first != hi[0].second || hi[0].first < one[0].first)
          fail_at("bad range in a character class");
        r.push_back({one[0].first, hi[0].first});
      } else {
        r.insert(r.end(), one.begin(), one.end());
      }
    }
    return negate ? complement(r) : r;
  }

  Expr atom() {
    char32_t c = peek();
    pos_++;
    switch (c) {
      case '(': {
        if (more() && peek() == '?') {
          pos_++;
          if (more() && peek() == ':') {
            pos_++;
          } else if (more() && peek() == '<' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != '=' &&
                     cps_[pos_ + 1] != '!') {
            while (more() && peek() != '>') pos_++;  // a named group: the name does not matter here
            if (!more()) fail_at("unterminated group name");
            pos_++;
          } else {
            fail_at("lookaround assertions are not supported");
          }
        }
        Expr e = alternation();
        if (!more() || peek() != ')') fail_at("missing ')'");
        pos_++;
        return e;
      }
      case '[':
        return charset_expr(char_class(), enc_);
      case '.':
        return charset_expr(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}), enc_);
      case '\\':
        return charset_expr(escape(false), enc_);
      case '*':
      case '+':
      case '?':
        fail_at("nothing to repeat");
      case ')':
        fail_at("unbalanced ')'");
      default:
        return charset_expr({{c, c}}, enc_);
    }
  }

  std::string src_;
  Encoding enc_;
  std::vector<char32_t> cps_;
  size_t pos_ = 0;
  bool end_anchor_ = false;
};

// ---------------------------------------------------------------- numbers

std::string nines(size_t n) {
  return std::string(n, '9');
}
std::string zeros(size_t n) {
  return std::string(n, '0');
}
Expr digit_expr() {
  return Expr::range('0', '9');
}

// Decimal strings of the same length in [x, y].
Expr same_length(const std::string& x, const std::string& y) {
  if (x.empty()) return Expr::empty();
  const size_t n = x.size() - 1;
  if (x[0] == y[0]) return Expr::seq({Expr::byte(x[0]), same_length(x.substr(1), y.substr(1))});
  if (x.substr(1) == zeros(n) && y.substr(1) == nines(n))
    return Expr::seq({Expr::range(x[0], y[0]), Expr::repeat(digit_expr(), n, n)});
  std::vector<Expr> alts;
  alts.push_back(Expr::seq({Expr::byte(x[0]), same_length(x.substr(1), nines(n))}));
  if (x[0] + 1 <= y[0] - 1)
    alts.push_back(Expr::seq({Expr::range(x[0] + 1, y[0] - 1), Expr::repeat(digit_expr(), n, n)}));
  alts.push_back(Expr::seq({Expr::byte(y[0]), same_length(zeros(n), y.substr(1))}));
  return Expr::alt(std::move(alts));
}

constexpr int kMaxIntDigits = 16;

// Non-negative integers in [a, b] written without leading zeros; b < 0: unbounded.
Expr nonneg_range(int64_t a, int64_t b) {
  if (b >= 0 && a > b) return Expr::nothing();
  std::vector<Expr> alts;
  const size_t la = std::to_string(a).size();
  const size_t lb = b >= 0 ? std::to_string(b).size() : la;
  for (size_t len = la; len <= lb; len++) {
    int64_t lo = len == 1 ? 0 : static_cast<int64_t>(std::pow(10.0, double(len - 1)));
    int64_t hi = static_cast<int64_t>(std::pow(10.0, double(len))) - 1;
    lo = std::max(lo, a);
    if (b >= 0) hi = std::min(hi, b);
    if (lo <= hi) alts.push_back(same_length(std::to_string(lo), std::to_string(hi)));
  }
  if (b < 0 && static_cast<int>(la) < kMaxIntDigits)
    alts.push_back(Expr::seq(
        {Expr::range('1', '9'), Expr::repeat(digit_expr(), static_cast<int>(la), kMaxIntDigits - 1)}));
  return Expr::alt(std::move(alts));
}

Expr fraction() {
  return Expr::seq({Expr::byte('.'), Expr::repeat(digit_expr(), 1, 15)});
}
Expr zero_fraction() {
  return Expr::seq({Expr::byte('.'), Expr::repeat(Expr::byte('0'), 1, 15)});
}
Expr nonzero_fraction() {
  // The first non-zero digit is where the leading zeros end: deterministic, so its automaton stays small.
  return Expr::seq({Expr::byte('.'), Expr::repeat(Expr::byte('0'), 0, 14), Expr::range('1', '9'),
                    Expr::repeat(digit_expr(), 0, 14)});
}

// Magnitudes M = I(.F)? with lo <(=) M <(=) hi (hi < 0: unbounded); bounds are whole numbers >= 0.
Expr magnitude(int64_t lo, bool lo_excl, int64_t hi, bool hi_excl) {
  std::vector<Expr> alts;
  const int64_t start = lo_excl ? lo + 1 : lo;
  if (lo_excl && (hi < 0 || lo < hi))
    alts.push_back(Expr::seq({Expr::lit(std::to_string(lo)), nonzero_fraction()}));
  if (hi < 0) {
    alts.push_back(Expr::seq({nonneg_range(start, -1), Expr::opt(fraction())}));
  } else {
    if (start <= hi - 1) alts.push_back(Expr::seq({nonneg_range(start, hi - 1), Expr::opt(fraction())}));
    if (!hi_excl && start <= hi)
      alts.push_back(Expr::seq({Expr::lit(std::to_string(hi)), Expr::opt(zero_fraction())}));
  }
  return Expr::alt(std::move(alts));
}

// ---------------------------------------------------------------- schemas

const std::set<std::string>& annotations() {
  static const std::set<std::string> s = {
      "title",      "description", "default",   "examples",      "$schema", "$id",        "$comment",
      "deprecated", "readOnly",    "writeOnly", "discriminator", "$defs",   "definitions"};
  return s;
}
const std::set<std::string>& supported() {
  static const std::set<std::string> s = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref",
                                          "items",
                                          "prefixItems",
                                          "minItems",
                                          "maxItems",
                                          "pattern",
                                          "format",
                                          "minLength",
                                          "maxLength",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "uniqueItems",
                                          "minProperties",
                                          "maxProperties",
                                          "unevaluatedProperties"};
  return s;
}

std::string escape_pointer(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '~')
      o += "~0";
    else if (c == '/')
      o += "~1";
    else
      o += c;
  }
  return o;
}

// The content of a string matching the regular expression `pattern` (unanchored unless it starts with ^ /
// ends with $), its characters encoded as `enc` says.
Expr pattern_content(std::string_view pattern, Encoding enc) {
  RegexParser p(pattern, enc);
  bool a_start = false, a_end = false;
  Expr e = p.parse(a_start, a_end);
  return Expr::seq({a_start ? Expr::empty() : Expr::star(json_char(enc)), std::move(e),
                    a_end ? Expr::empty() : Expr::star(json_char(enc))});
}

class SchemaCompiler {
 public:
  // Rules go into `g`; `prefix` keeps the rule names of several documents compiled into one grammar apart.
  SchemaCompiler(const ordered_json& root, Grammar& g, std::string prefix = "", Encoding enc = Encoding::Json,
                 std::map<std::string, int>* shared_rules = nullptr)
      : root_(root), g_(g), prefix_(std::move(prefix)), enc_(enc) {
    if (shared_rules) shared_rules_ = shared_rules;
  }

  int root_rule() { return rule_for(root_, "#"); }
  // The root (a tool's parameters) as key/value arguments in `syn`'s markers.
  Expr root_key_values(const ToolCallSyntax& syn) { return key_value_arguments(syn); }

  Expr ws() {
    return Expr::alt({Expr::empty(), Expr::byte(' '),
                      Expr::seq({Expr::repeat(Expr::byte('\n'), 1, 2),
                                 Expr::repeat(Expr::alt({Expr::byte(' '), Expr::byte('\t')}), 0, 20)})});
  }
  Expr sep() { return Expr::seq({ws(), Expr::byte(','), ws()}); }

  int string_rule() {
    if (string_ < 0)
      string_ = g_.add("string", Expr::seq({Expr::byte('"'), Expr::star(json_char(enc_)), Expr::byte('"')}));
    return string_;
  }
  Expr number(bool integer) {
    Expr ip =
        Expr::alt({Expr::byte('0'),
                   Expr::seq({Expr::range('1', '9'), Expr::repeat(digit_expr(), 0, kMaxIntDigits - 1)})});
    if (integer) return Expr::seq({Expr::opt(Expr::byte('-')), ip});
    Expr ex = Expr::seq({Expr::alt({Expr::byte('e'), Expr::byte('E')}),
                         Expr::opt(Expr::alt({Expr::byte('+'), Expr::byte('-')})),
                         Expr::repeat(digit_expr(), 1, 3)});
    return Expr::seq({Expr::opt(Expr::byte('-')), ip, Expr::opt(fraction()), Expr::opt(ex)});
  }
  // Any JSON value.
  int value_rule() {
    if (value_ >= 0) return value_;
    value_ = g_.declare("value");
    const int obj = g_.declare("object"), arr = g_.declare("array");
    Expr pair = Expr::seq({Expr::ref(string_rule()), ws(), Expr::byte(':'), ws(), Expr::ref(value_)});
    g_.define(obj, Expr::seq({Expr::byte('{'), ws(),
                              Expr::opt(Expr::seq({pair, Expr::star(Expr::seq({sep(), pair})), ws()})),
                              Expr::byte('}')}));
    Expr item = Expr::ref(value_);
    g_.define(arr, Expr::seq({Expr::byte('['), ws(),
                              Expr::opt(Expr::seq({item, Expr::star(Expr::seq({sep(), item})), ws()})),
                              Expr::byte(']')}));
    g_.define(value_, Expr::alt({Expr::ref(obj), Expr::ref(arr), Expr::ref(string_rule()), number(false),
                                 Expr::lit("true"), Expr::lit("false"), Expr::lit("null")}));
    any_object_ = obj;
    return value_;
  }
  int any_object_rule() {
    value_rule();
    return any_object_;
  }

  int rule_for(const ordered_json& s, const std::string& path) {
    auto it = rules_.find(path);
    if (it != rules_.end()) return it->second;
    if (s.is_object() && s.empty()) return value_rule();
    if (depth_ >= kMaxDepth) refuse(path, fmt::format("the schema nests deeper than {} levels", kMaxDepth));
    int r = g_.declare(prefix_ + path);
    rules_[path] = r;
    depth_++;
    Expr body = schema_expr(s, path);
    depth_--;
    g_.define(r, std::move(body));
    return r;
  }

 private:
  [[noreturn]] static void refuse(const std::string& path, const std::string& why) {
    throw InvalidInput(fmt::format("JSON schema at {}: {}", path, why));
  }
  static void refuse_keyword(const std::string& path, const std::string& kw, const std::string& why = "") {
    refuse(path, fmt::format("keyword \"{}\" is not supported{}", kw, why.empty() ? "" : " (" + why + ")"));
  }

  const ordered_json& resolve(const std::string& ref, const std::string& path, std::string& target) {
    if (ref.empty() || ref[0] != '#')
      refuse(path, fmt::format("$ref \"{}\" must point into this schema (start with #)", ref));
    target = ref;
    const ordered_json* cur = &root_;
    size_t i = 1;
    if (i < ref.size() && ref[i] != '/') refuse(path, fmt::format("$ref \"{}\" is not a JSON pointer", ref));
    while (i < ref.size()) {
      size_t j = ref.find('/', i + 1);
      std::string tok = ref.substr(i + 1, j == std::string::npos ? std::string::npos : j - i - 1);
      std::string key;
      for (size_t k = 0; k < tok.size(); k++) {
        if (tok[k] == '~' && k + 1 < tok.size()) {
          key += tok[k + 1] == '1' ? '/' : '~';
          k++;
        } else {
          key += tok[k];
        }
      }
      if (cur->is_object() && cur->contains(key)) {
        cur = &(*cur)[key];
      } else if (cur->is_array() && !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit) &&
                 std::stoul(key) < cur->size()) {
        cur = &(*cur)[std::stoul(key)];
      } else {
        refuse(path, fmt::format("$ref \"{}\" points to nothing", ref));
      }
      i = j == std::string::npos ? ref.size() : j;
    }
    return *cur;
  }

  static bool has_type(const std::vector<std::string>& types, const ordered_json& v) {
    if (types.empty()) return true;
    for (const auto& t : types) {
      if ((t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
          (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
          (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
          (t == "integer" && v.is_number() && std::floor(v.get<double>()) == v.get<double>()))
        return true;
    }
    return false;
  }
  // The "type" keyword's names (empty when absent or malformed; schema_expr refuses the malformed ones).
  static std::vector<std::string> type_names(const ordered_json& s) {
    std::vector<std::string> types;
    auto it = s.find("type");
    if (it == s.end()) return types;
    if (it->is_string()) types.push_back(it->get<std::string>());
    if (it->is_array())
      for (const auto& t : *it)
        if (t.is_string()) types.push_back(t.get<std::string>());
    return types;
  }

  // ------------------------------------------------------------ what values a schema can match

  // Kinds of JSON values, as bits. Integers and other numbers are apart: "number" admits both, so it
  // overlaps "integer".
  static constexpr unsigned kNull = 1, kBool = 2, kInt = 4, kFrac = 8, kString = 16, kArray = 32,
                            kObject = 64, kAll = 127;
  static unsigned kind_of(const ordered_json& v) {
    if (v.is_null()) return kNull;
    if (v.is_boolean()) return kBool;
    if (v.is_number()) return std::floor(v.get<double>()) == v.get<double>() ? kInt : kFrac;
    if (v.is_string()) return kString;
    if (v.is_array()) return kArray;
    return kObject;
  }
  static unsigned type_kinds(const std::string& t) {
    if (t == "null") return kNull;
    if (t == "boolean") return kBool;
    if (t == "integer") return kInt;
    if (t == "number") return kInt | kFrac;
    if (t == "string") return kString;
    if (t == "array") return kArray;
    if (t == "object") return kObject;
    return kAll;
  }
  static std::string kind_names(unsigned k) {
    static const char* names[] = {"null",    "booleans", "integers", "fractional numbers",
                                  "strings", "arrays",   "objects"};
    std::string out;
    for (int i = 0; i < 7; i++)
      if (k & (1u << i)) {
        if (!out.empty()) out.append(", ");
        out.append(names[i]);
      }
    return out;
  }

  // Follows $ref and a lone allOf (what schema_expr compiles as the schema itself); nullptr when the chain
  // is too long to be anything but a cycle.
  const ordered_json* deref(const ordered_json& s, const std::string& path) {
    const ordered_json* cur = &s;
    for (int i = 0; i < kMaxDepth; i++) {
      if (!cur->is_object()) return cur;
      if (auto it = cur->find("$ref"); it != cur->end() && it->is_string()) {
        std::string target;
        cur = &resolve(it->get<std::string>(), path, target);
      } else if (auto a = cur->find("allOf"); a != cur->end() && a->is_array() && a->size() == 1) {
        cur = &(*a)[0];
      } else {
        return cur;
      }
    }
    return nullptr;
  }

  // The values a schema admits when it is a finite set (const, enum, or unions of them); nullopt otherwise.
  std::optional<std::vector<ordered_json>> literals(const ordered_json& schema, const std::string& path,
                                                    int depth = 0) {
    const ordered_json* s = deref(schema, path);
    if (!s || !s->is_object() || depth > kMaxDepth) return std::nullopt;
    const auto types = type_names(*s);
    if (auto it = s->find("const"); it != s->end()) {
      if (!has_type(types, *it)) return std::vector<ordered_json>{};
      return std::vector<ordered_json>{*it};
    }
    if (auto it = s->find("enum"); it != s->end() && it->is_array()) {
      std::vector<ordered_json> out;
      for (const auto& v : *it)
        if (has_type(types, v)) out.push_back(v);
      return out;
    }
    for (const char* k : {"anyOf", "oneOf"})
      if (auto it = s->find(k); it != s->end() && it->is_array()) {
        std::vector<ordered_json> out;
        for (const auto& alt : *it) {
          auto l = literals(alt, path, depth + 1);
          if (!l) return std::nullopt;
          out.insert(out.end(), l->begin(), l->end());
        }
        return out;
      }
    return std::nullopt;
  }

  // The kinds of value a schema admits (a superset when in doubt).
  unsigned kinds(const ordered_json& schema, const std::string& path, int depth = 0) {
    const ordered_json* s = deref(schema, path);
    if (!s || depth > kMaxDepth) return kAll;
    if (s->is_boolean()) return s->get<bool>() ? kAll : 0;
    if (!s->is_object()) return kAll;
    if (auto l = literals(*s, path, depth)) {
      unsigned k = 0;
      for (const auto& v : *l) k |= kind_of(v);
      return k;
    }
    for (const char* key : {"anyOf", "oneOf"})
      if (auto it = s->find(key); it != s->end() && it->is_array()) {
        unsigned k = 0;
        for (const auto& alt : *it) k |= kinds(alt, path, depth + 1);
        return k;
      }
    unsigned k = 0;
    for (const auto& t : type_names(*s)) k |= type_kinds(t);
    if (k) return k;
    // No type: what schema_expr infers from the keywords.
    if (s->contains("properties") || s->contains("required") || s->contains("additionalProperties"))
      k |= kObject;
    if (s->contains("items") || s->contains("prefixItems")) k |= kArray;
    if (s->contains("pattern") || s->contains("format") || s->contains("minLength") ||
        s->contains("maxLength"))
      k |= kString;
    if (s->contains("minimum") || s->contains("maximum") || s->contains("exclusiveMinimum") ||
        s->contains("exclusiveMaximum"))
      k |= kInt | kFrac;
    return k ? k : kAll;
  }

  static bool disjoint(const std::vector<ordered_json>& a, const std::vector<ordered_json>& b) {
    for (const auto& x : a)
      for (const auto& y : b)
        if (x == y) return false;
    return true;
  }

  // Why no value can match both schemas, or nullopt with `overlap` saying what both admit when that cannot
  // be shown: different kinds of value, different literal sets, or (objects) a property both require with
  // different const / enum values (a discriminator).
  bool exclusive(const ordered_json& a, const ordered_json& b, const std::string& path,
                 std::string& overlap) {
    const unsigned ka = kinds(a, path), kb = kinds(b, path), both = ka & kb;
    if (!both) return true;
    auto la = literals(a, path), lb = literals(b, path);
    if (la && lb) {
      if (disjoint(*la, *lb)) return true;
      overlap = "both admit the same value";
      return false;
    }
    if (both == kObject) {
      const ordered_json *sa = deref(a, path), *sb = deref(b, path);
      if (sa && sb && sa->is_object() && sb->is_object()) {
        auto required = [](const ordered_json& s) {
          std::set<std::string> r;
          if (auto it = s.find("required"); it != s.end() && it->is_array())
            for (const auto& x : *it)
              if (x.is_string()) r.insert(x.get<std::string>());
          return r;
        };
        auto prop = [](const ordered_json& s, const std::string& name) -> const ordered_json* {
          auto p = s.find("properties");
          if (p == s.end() || !p->is_object() || !p->contains(name)) return nullptr;
          return &(*p)[name];
        };
        const auto ra = required(*sa), rb = required(*sb);
        // A property one side requires, declared by both with disjoint const/enum values: a value of that
        // side has it with one of its values, which the other side does not allow.
        std::set<std::string> either = ra;
        either.insert(rb.begin(), rb.end());
        for (const auto& name : either) {
          const ordered_json *pa = prop(*sa, name), *pb = prop(*sb, name);
          if (!pa || !pb) continue;
          auto va = literals(*pa, path), vb = literals(*pb, path);
          if (va && vb && disjoint(*va, *vb)) return true;
        }
        // What vatic writes for one side never matches the other: it holds a required property the other
        // forbids (undeclared under additionalProperties false), or it lacks a property the other requires
        // (the side writes no undeclared properties). Only for plain object schemas, whose output is that.
        auto plain = [](const ordered_json& s) {
          return !s.contains("anyOf") && !s.contains("oneOf") && !s.contains("enum") && !s.contains("const");
        };
        auto writes_extras = [](const ordered_json& s) {
          auto it = s.find("additionalProperties");
          return it != s.end() && !(it->is_boolean() && !it->get<bool>());
        };
        auto never_matches = [&](const ordered_json& x, const std::set<std::string>& rx,
                                 const ordered_json& y, const std::set<std::string>& ry) {
          for (const auto& name : rx) {
            auto it = y.find("additionalProperties");
            if (it != y.end() && it->is_boolean() && !it->get<bool>() && !prop(y, name)) return true;
          }
          if (!writes_extras(x))
            for (const auto& name : ry)
              if (!prop(x, name) && !rx.count(name)) return true;
          return false;
        };
        if (plain(*sa) && plain(*sb) && never_matches(*sa, ra, *sb, rb) && never_matches(*sb, rb, *sa, ra))
          return true;
      }
      overlap =
          "both admit objects, and neither a property both require with different const/enum values nor "
          "a required property the other cannot have tells them apart";
      return false;
    }
    if ((both & ~(kInt | kFrac)) == 0) {  // numbers only: disjoint ranges
      const ordered_json *sa = deref(a, path), *sb = deref(b, path);
      if (sa && sb && sa->is_object() && sb->is_object() && !sa->contains("anyOf") &&
          !sa->contains("oneOf") && !sb->contains("anyOf") && !sb->contains("oneOf")) {
        struct Range {
          double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
          bool lo_x = false, hi_x = false;
        };
        auto range = [&](const ordered_json& s) {
          Range r;
          if (auto v = num(s, "minimum", path)) r.lo = *v;
          if (auto v = num(s, "exclusiveMinimum", path); v && *v >= r.lo) r.lo = *v, r.lo_x = true;
          if (auto v = num(s, "maximum", path)) r.hi = *v;
          if (auto v = num(s, "exclusiveMaximum", path); v && *v <= r.hi) r.hi = *v, r.hi_x = true;
          return r;
        };
        const Range x = range(*sa), y = range(*sb);
        auto below = [](const Range& p, const Range& q) {
          return p.hi < q.lo || (p.hi == q.lo && (p.hi_x || q.lo_x));
        };
        if (below(x, y) || below(y, x)) return true;
      }
    }
    overlap = fmt::format("both admit {}", kind_names(both));
    return false;
  }

  // oneOf is compiled as anyOf, which is exact only when no value matches two alternatives.
  void check_one_of(const ordered_json& alts, const std::string& path) {
    for (size_t i = 0; i < alts.size(); i++)
      for (size_t j = i + 1; j < alts.size(); j++) {
        std::string overlap;
        if (!exclusive(alts[i], alts[j], path, overlap))
          refuse(path, fmt::format("\"oneOf\" is supported only when its alternatives exclude each other "
                                   "(different types, different const/enum values, or objects told apart "
                                   "by a required property with different const/enum values); alternatives "
                                   "{} and {} may match the same value ({}); anyOf accepts either",
                                   i, j, overlap));
      }
  }

  Expr literal(const ordered_json& v) { return Expr::lit(json_text(v)); }
  // JSON text of `v`; '<' (only ever inside strings) escaped when the encoding asks for it.
  std::string json_text(const ordered_json& v) const {
    std::string t = v.dump(), out;
    if (enc_ != Encoding::JsonNoLt) return t;
    for (char c : t) {
      if (c == '<')
        out.append("\\u003c");
      else
        out.push_back(c);
    }
    return out;
  }

  static bool has_constraints(const ordered_json& s, std::initializer_list<const char*> except) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (annotations().count(it.key())) continue;
      bool skip = false;
      for (const char* e : except) skip |= it.key() == e;
      if (!skip) return true;
    }
    return false;
  }

  static std::optional<double> num(const ordered_json& s, const char* k, const std::string& path) {
    auto it = s.find(k);
    if (it == s.end()) return std::nullopt;
    if (!it->is_number()) refuse(path, fmt::format("\"{}\" must be a number", k));
    return it->get<double>();
  }
  static std::optional<int64_t> count(const ordered_json& s, const char* k, const std::string& path) {
    auto it = s.find(k);
    if (it == s.end()) return std::nullopt;
    if (!it->is_number_integer() && !(it->is_number() && std::floor(it->get<double>()) == it->get<double>()))
      refuse(path, fmt::format("\"{}\" must be a non-negative integer", k));
    double v = it->get<double>();
    if (v < 0) refuse(path, fmt::format("\"{}\" must be a non-negative integer", k));
    return static_cast<int64_t>(std::min(v, 1e9));
  }

  Expr schema_expr(const ordered_json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(path, "the schema false matches nothing");
      return Expr::ref(value_rule());
    }
    if (!s.is_object()) refuse(path, "a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!annotations().count(it.key()) && !supported().count(it.key())) refuse_keyword(path, it.key());
    if (auto it = s.find("$ref"); it != s.end()) {
      if (!it->is_string()) refuse(path, "$ref must be a string");
      if (has_constraints(s, {"$ref"})) refuse(path, "$ref next to other constraints is not supported");
      std::string target;
      const ordered_json& t = resolve(it->get<std::string>(), path, target);
      return Expr::ref(rule_for(t, target));
    }
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1) refuse_keyword(path, "allOf", "only with exactly one schema");
      if (has_constraints(s, {"allOf"})) refuse(path, "allOf next to other constraints is not supported");
      return Expr::ref(rule_for((*it)[0], path + "/allOf/0"));
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      auto it = s.find(k);
      if (it == s.end()) continue;
      if (!it->is_array() || it->empty())
        refuse(path, fmt::format("{} must be a non-empty array of schemas", k));
      if (has_constraints(s, {k}))
        refuse(path, fmt::format("{} next to other constraints is not supported", k));
      if (std::string_view(k) == "oneOf") check_one_of(*it, path);
      std::vector<Expr> alts;
      for (size_t i = 0; i < it->size(); i++)
        alts.push_back(Expr::ref(rule_for((*it)[i], fmt::format("{}/{}/{}", path, k, i))));
      return Expr::alt(std::move(alts));
    }
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const auto& t : *it) {
          if (!t.is_string()) refuse(path, "type must be a string or an array of strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        refuse(path, "type must be a string or an array of strings");
      }
      for (const auto& t : types)
        if (t != "string" && t != "number" && t != "integer" && t != "boolean" && t != "null" &&
            t != "object" && t != "array")
          refuse(path, fmt::format("unknown type \"{}\"", t));
    }
    auto type_ok = [&](const ordered_json& v) { return has_type(types, v); };
    if (auto it = s.find("const"); it != s.end()) {
      if (!type_ok(*it)) refuse(path, "const does not have the schema's type");
      return literal(*it);
    }
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) refuse(path, "enum must be a non-empty array");
      std::vector<Expr> alts;
      for (const auto& v : *it)
        if (type_ok(v)) alts.push_back(literal(v));
      if (alts.empty()) refuse(path, "no enum value has the schema's type");
      return Expr::alt(std::move(alts));
    }
    if (types.empty()) {
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
        types.push_back("object");
      if (s.contains("items") || s.contains("prefixItems")) types.push_back("array");
      if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength"))
        types.push_back("string");
      if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
          s.contains("exclusiveMaximum"))
        types.push_back("number");
      if (types.empty()) return Expr::ref(value_rule());
    }
    std::vector<Expr> alts;
    for (const auto& t : types) {
      if (t == "string") alts.push_back(string_expr(s, path));
      if (t == "number" || t == "integer") alts.push_back(number_expr(s, path, t == "integer"));
      if (t == "boolean") alts.push_back(Expr::alt({Expr::lit("true"), Expr::lit("false")}));
      if (t == "null") alts.push_back(Expr::lit("null"));
      if (t == "object") alts.push_back(object_expr(s, path));
      if (t == "array") alts.push_back(array_expr(s, path));
    }
    return Expr::alt(std::move(alts));
  }

  Expr string_expr(const ordered_json& s, const std::string& path) {
    auto min_len = count(s, "minLength", path), max_len = count(s, "maxLength", path);
    const bool has_pattern = s.contains("pattern"), has_format = s.contains("format");
    if ((has_pattern || has_format) && (min_len || max_len))
      refuse_keyword(path, min_len ? "minLength" : "maxLength", "together with pattern or format");
    if (has_pattern && has_format) refuse_keyword(path, "format", "together with pattern");
    if (has_pattern) {
      if (!s["pattern"].is_string()) refuse(path, "pattern must be a string");
      return Expr::seq(
          {Expr::byte('"'), pattern_content(s["pattern"].get<std::string>(), enc_), Expr::byte('"')});
    }
    if (has_format) {
      if (!s["format"].is_string()) refuse(path, "format must be a string");
      const std::string f = s["format"].get<std::string>();
      const auto& fm = formats();
      auto it = fm.find(f);
      if (it == fm.end())
        refuse(
            path,
            fmt::format(
                "format \"{}\" is not supported (supported: date, time, date-time, uuid, email, ipv4)", f));
      return Expr::seq({Expr::byte('"'), pattern_content("^" + it->second + "$", enc_), Expr::byte('"')});
    }
    if (!min_len && !max_len) return Expr::ref(string_rule());
    const int64_t mn = min_len.value_or(0), mx = max_len ? *max_len : -1;
    if (mx >= 0 && mx < mn) refuse(path, "maxLength is below minLength");
    if (mn > 1000 || mx > 1000) refuse_keyword(path, mn > 1000 ? "minLength" : "maxLength", "at most 1000");
    return Expr::seq({Expr::byte('"'),
                      Expr::repeat(json_char(enc_), static_cast<int>(mn), static_cast<int>(mx)),
                      Expr::byte('"')});
  }

  Expr number_expr(const ordered_json& s, const std::string& path, bool integer) {
    auto mn = num(s, "minimum", path), mx = num(s, "maximum", path);
    auto xmn = num(s, "exclusiveMinimum", path), xmx = num(s, "exclusiveMaximum", path);
    if (!mn && !mx && !xmn && !xmx) return number(integer);
    for (auto v : {mn, mx, xmn, xmx})
      if (v && std::fabs(*v) > 1e15) refuse(path, "range bounds beyond 1e15 are not supported");
    // Lower and upper bound, tightest first.
    std::optional<double> lo, hi;
    bool lo_x = false, hi_x = false;
    if (mn) lo = *mn;
    if (xmn && (!lo || *xmn >= *lo)) lo = *xmn, lo_x = true;
    if (mx) hi = *mx;
    if (xmx && (!hi || *xmx <= *hi)) hi = *xmx, hi_x = true;
    if (integer) {
      std::optional<int64_t> a, b;
      if (lo) a = static_cast<int64_t>(lo_x ? std::floor(*lo) + 1 : std::ceil(*lo));
      if (hi) b = static_cast<int64_t>(hi_x ? std::ceil(*hi) - 1 : std::floor(*hi));
      if (a && b && *a > *b) refuse(path, "the range holds no integer");
      std::vector<Expr> alts;
      if (!b || *b >= 0) alts.push_back(nonneg_range(a ? std::max<int64_t>(*a, 0) : 0, b ? *b : -1));
      if (!a || *a < 0) {
        const int64_t m_lo = b && *b < 0 ? -*b : 1, m_hi = a ? -*a : -1;
        alts.push_back(Expr::seq({Expr::byte('-'), nonneg_range(m_lo, m_hi)}));
      }
      return Expr::alt(std::move(alts));
    }
    for (auto v : {lo, hi})
      if (v && std::floor(*v) != *v)
        refuse_keyword(
            path,
            lo && v == lo ? (lo_x ? "exclusiveMinimum" : "minimum") : (hi_x ? "exclusiveMaximum" : "maximum"),
            "number bounds must be whole numbers");
    if (lo && hi && (*lo > *hi || (*lo == *hi && (lo_x || hi_x)))) refuse(path, "the range is empty");
    std::vector<Expr> alts;
    // v >= 0: magnitude bounds max(lo, 0) .. hi.
    if (!hi || *hi > 0 || (*hi == 0 && !hi_x)) {
      const bool from_lo = lo && *lo >= 0;
      alts.push_back(magnitude(from_lo ? static_cast<int64_t>(*lo) : 0, from_lo && lo_x,
                               hi ? static_cast<int64_t>(*hi) : -1, hi && hi_x));
    }
    // v < 0: v = -M with M > 0, M <(=) -lo, M >(=) -hi when hi < 0.
    if (!lo || *lo < 0) {
      const bool from_hi = hi && *hi < 0;
      Expr m = magnitude(from_hi ? static_cast<int64_t>(-*hi) : 0, from_hi ? hi_x : true,
                         lo ? static_cast<int64_t>(-*lo) : -1, lo && lo_x);
      alts.push_back(Expr::seq({Expr::byte('-'), std::move(m)}));
    }
    return Expr::alt(std::move(alts));
  }

  Expr object_expr(const ordered_json& s, const std::string& path) {
    struct Prop {
      std::string name;
      int rule;
      bool required;
    };
    std::vector<Prop> props;
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) refuse(path, "required must be an array of strings");
      for (const auto& r : *it) {
        if (!r.is_string()) refuse(path, "required must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    // additionalProperties: absent or false = none; true / {} = any value; a schema = values matching it.
    int extra = -1;
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (it->is_boolean()) {
        if (it->get<bool>()) extra = value_rule();
      } else {
        extra = rule_for(*it, path + "/additionalProperties");
      }
    }
    if (auto it = s.find("unevaluatedProperties"); it != s.end() && !(it->is_boolean() && !it->get<bool>()))
      refuse_keyword(path, "unevaluatedProperties", "only false");
    std::set<std::string> declared;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) refuse(path, "properties must be an object");
      for (auto p = it->begin(); p != it->end(); ++p) {
        declared.insert(p.key());
        props.push_back({p.key(), rule_for(p.value(), path + "/properties/" + escape_pointer(p.key())),
                         required.count(p.key()) > 0});
      }
    }
    for (const auto& r : required)
      if (!declared.count(r)) {
        if (extra < 0) refuse(path, fmt::format("required property \"{}\" is not allowed by properties", r));
        props.push_back({r, extra, true});
      }
    size_t n_required = required.size();
    if (auto v = count(s, "minProperties", path); v && static_cast<size_t>(*v) > n_required)
      refuse_keyword(path, "minProperties", "only when the required properties satisfy it");
    if (auto v = count(s, "maxProperties", path); v && (extra >= 0 || static_cast<size_t>(*v) < props.size()))
      refuse_keyword(path, "maxProperties", "only when the declared properties satisfy it");
    auto key = [&](const std::string& name) {
      return Expr::seq({Expr::lit(json_text(ordered_json(name))), ws(), Expr::byte(':'), ws()});
    };
    Expr extra_pair =
        extra >= 0 ? Expr::seq({Expr::ref(string_rule()), ws(), Expr::byte(':'), ws(), Expr::ref(extra)})
                   : Expr::nothing();
    // S_i: the members from property i on when none was written yet; T_i: when one was (a comma comes first).
    const size_t n = props.size();
    std::vector<int> S(n + 1), T(n + 1);
    for (size_t i = 0; i <= n; i++) {
      S[i] = g_.declare(fmt::format("{}{}#S{}", prefix_, path, i));
      T[i] = g_.declare(fmt::format("{}{}#T{}", prefix_, path, i));
    }
    g_.define(S[n], extra >= 0
                        ? Expr::opt(Expr::seq({extra_pair, Expr::star(Expr::seq({sep(), extra_pair}))}))
                        : Expr::empty());
    g_.define(T[n], extra >= 0 ? Expr::star(Expr::seq({sep(), extra_pair})) : Expr::empty());
    for (size_t k = n; k-- > 0;) {
      Expr member = Expr::seq({key(props[k].name), Expr::ref(props[k].rule)});
      g_.define(S[k], Expr::alt({Expr::seq({member, Expr::ref(T[k + 1])}),
                                 props[k].required ? Expr::nothing() : Expr::ref(S[k + 1])}));
      g_.define(T[k], Expr::alt({Expr::seq({sep(), member, Expr::ref(T[k + 1])}),
                                 props[k].required ? Expr::nothing() : Expr::ref(T[k + 1])}));
    }
    bool any_required = false;
    for (const auto& p : props) any_required |= p.required;
    Expr body =
        any_required ? Expr::seq({Expr::ref(S[0]), ws()}) : Expr::opt(Expr::seq({Expr::ref(S[0]), ws()}));
    return Expr::seq({Expr::byte('{'), ws(), body, Expr::byte('}')});
  }

  Expr array_expr(const ordered_json& s, const std::string& path) {
    std::vector<int> prefix;
    if (auto it = s.find("prefixItems"); it != s.end()) {
      if (!it->is_array()) refuse(path, "prefixItems must be an array of schemas");
      if (it->size() > 256) refuse_keyword(path, "prefixItems", "at most 256 schemas");
      for (size_t i = 0; i < it->size(); i++)
        prefix.push_back(rule_for((*it)[i], fmt::format("{}/prefixItems/{}", path, i)));
    }
    int item = -1;  // -1: no further items
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) refuse_keyword(path, "items", "an array of schemas; use prefixItems");
      if (!(it->is_boolean() && !it->get<bool>())) item = rule_for(*it, path + "/items");
    } else {
      item = value_rule();
    }
    if (auto it = s.find("uniqueItems"); it != s.end() && !(it->is_boolean() && !it->get<bool>()))
      refuse_keyword(path, "uniqueItems", "only false");
    const int64_t mn = count(s, "minItems", path).value_or(0);
    const int64_t mx = s.contains("maxItems") ? *count(s, "maxItems", path) : -1;
    if (mx >= 0 && mx < mn) refuse(path, "maxItems is below minItems");
    if (mn > 1000 || mx > 1000) refuse_keyword(path, mn > 1000 ? "minItems" : "maxItems", "at most 1000");
    const int64_t k = static_cast<int64_t>(prefix.size());
    // Suffix from position i (i == 0: no comma before the first element).
    std::function<Expr(int64_t)> suffix = [&](int64_t i) -> Expr {
      if (mx >= 0 && i >= mx) return mn > i ? Expr::nothing() : Expr::empty();
      if (i >= k) {
        if (item < 0) return mn > i ? Expr::nothing() : Expr::empty();
        const int rmin = static_cast<int>(std::max<int64_t>(0, mn - i));
        const int rmax = mx < 0 ? -1 : static_cast<int>(mx - i);
        Expr el = Expr::ref(item);
        Expr more = Expr::seq({sep(), el});
        if (i > 0) return Expr::repeat(more, rmin, rmax);
        Expr run = Expr::seq({el, Expr::repeat(more, std::max(0, rmin - 1), rmax < 0 ? -1 : rmax - 1)});
        return rmin == 0 ? Expr::opt(run) : run;
      }
      Expr el = i == 0 ? Expr::ref(prefix[i]) : Expr::seq({sep(), Expr::ref(prefix[i])});
      Expr tail = Expr::seq({el, suffix(i + 1)});
      return i >= mn ? Expr::opt(tail) : tail;
    };
    Expr body = suffix(0);
    if (body.kind == Expr::Nothing) refuse(path, "no array satisfies minItems with these items");
    Expr content = Expr::seq({body, ws()});
    return Expr::seq({Expr::byte('['), ws(), mn > 0 ? content : Expr::opt(content), Expr::byte(']')});
  }

  // ------------------------------------------------------------ key/value arguments (GLM-4.7)

  // The arguments of a tool whose parameters schema is the root, as key/value elements:
  // (KEY_OPEN key KEY_CLOSE VALUE_OPEN value VALUE_CLOSE)* in the schema's property order, each required
  // property once, each optional one at most once. The chat parser (chat/glm47.cpp) types a value by the
  // property's declared types: raw text when "string" is one of them, JSON otherwise; values are written so
  // that it reads back exactly the value the grammar chose.
  Expr key_value_arguments(const ToolCallSyntax& syn) {
    const std::string path = "#";
    const ordered_json& p = root_;
    if (!p.is_object()) refuse(path, "tool parameters must be an object schema");
    for (auto it = p.begin(); it != p.end(); ++it) {
      const std::string& k = it.key();
      if (annotations().count(k) || k == "type" || k == "properties" || k == "required" ||
          k == "additionalProperties")
        continue;
      refuse_keyword(path, k, "at the top of tool parameters in GLM-4.7's tool-call format");
    }
    if (auto t = p.find("type"); t != p.end() && !(t->is_string() && t->get<std::string>() == "object"))
      refuse(path, "tool parameters must have type \"object\"");
    std::set<std::string> required;
    if (auto it = p.find("required"); it != p.end()) {
      if (!it->is_array()) refuse(path, "required must be an array of strings");
      for (const auto& r : *it) {
        if (!r.is_string()) refuse(path, "required must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    struct Arg {
      std::string name;
      Expr value;
      bool required;
    };
    std::vector<Arg> args;
    std::set<std::string> declared;
    if (auto it = p.find("properties"); it != p.end()) {
      if (!it->is_object()) refuse(path, "properties must be an object");
      for (auto q = it->begin(); q != it->end(); ++q) {
        const std::string& name = q.key();
        const std::string at = path + "/properties/" + escape_pointer(name);
        if (name.empty() || name.find('<') != std::string::npos || name.find('>') != std::string::npos ||
            name.front() <= ' ' || name.back() <= ' ')
          refuse(at,
                 "a parameter name in GLM-4.7's tool-call format must be non-empty, without '<' or '>' and "
                 "without leading or trailing whitespace");
        declared.insert(name);
        args.push_back(
            {name, value_expr(q.value(), declared_types(q.value()), at, syn), required.count(name) > 0});
      }
    }
    for (const auto& r : required)
      if (!declared.count(r)) refuse(path, fmt::format("required parameter \"{}\" is not in properties", r));
    Expr nl = Expr::opt(Expr::byte('\n'));
    const size_t n = args.size();
    std::vector<int> A(n + 1);
    for (size_t i = 0; i <= n; i++) A[i] = g_.declare(fmt::format("{}#args{}", prefix_, i));
    g_.define(A[n], Expr::empty());
    for (size_t k = n; k-- > 0;) {
      Expr member =
          Expr::seq({nl, Expr::lit(syn.key_open), Expr::lit(args[k].name), Expr::lit(syn.key_close), nl,
                     Expr::lit(syn.value_open), std::move(args[k].value), Expr::lit(syn.value_close)});
      g_.define(A[k], Expr::alt({Expr::seq({std::move(member), Expr::ref(A[k + 1])}),
                                 args[k].required ? Expr::nothing() : Expr::ref(A[k + 1])}));
    }
    return Expr::seq({Expr::ref(A[0]), nl});
  }

  // The types the chat parser reads a value by: the property's "type" and the "type" of each anyOf / oneOf
  // alternative (as glm47.cpp's param_types; references are not followed).
  static std::vector<std::string> declared_types(const ordered_json& prop) {
    std::vector<std::string> out;
    if (!prop.is_object()) return out;
    out = type_names(prop);
    for (const char* k : {"anyOf", "oneOf"})
      if (auto alts = prop.find(k); alts != prop.end() && alts->is_array())
        for (const auto& alt : *alts)
          if (alt.is_object() && alt.contains("type"))
            for (const auto& t : type_names(alt)) out.push_back(t);
    return out;
  }

  static std::string lower_ascii(std::string s) {
    for (char& c : s)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return s;
  }
  // The text of a marker (a special token's grammar bytes are its content between 0xFF bytes).
  static std::string marker_text(const std::string& m) {
    if (m.size() >= 2 && m.front() == '\xFF' && m.back() == '\xFF') return m.substr(1, m.size() - 2);
    return m;
  }

  Expr value_expr(const ordered_json& s, const std::vector<std::string>& types, const std::string& path,
                  const ToolCallSyntax& syn) {
    // The parser ends a value at the first value_close and a call at the first close.
    const std::vector<std::string> close = {marker_text(syn.value_close), marker_text(syn.close)};
    // A literal string written raw reads back as itself when the parser keeps it as text.
    auto raw_ok = [&](const std::string& v, bool untyped) {
      if (holds_any(v, close) || v.starts_with('\n') || v.ends_with('\n')) return false;
      if (untyped) {
        ordered_json j = ordered_json::parse(v, nullptr, false);
        return j.is_discarded() || j.is_string();
      }
      return lower_ascii(v) != "null";
    };
    bool has_string = false;
    for (const auto& t : types) has_string |= t == "string";
    if (types.empty()) {
      // Untyped: the parser takes the value as JSON when it parses as a non-string, as text otherwise.
      if (auto lits = literals(s, path)) {
        std::vector<Expr> alts;
        for (const auto& v : *lits) {
          if (!v.is_string())
            alts.push_back(literal(v));
          else if (raw_ok(v.get<std::string>(), true))
            alts.push_back(Expr::lit(v.get<std::string>()));
        }
        if (alts.empty()) refuse(path, "no value of the enum can be written in GLM-4.7's tool-call format");
        return Expr::alt(std::move(alts));
      }
      if (kinds(s, path) & kString)
        refuse(path,
               "a parameter that may be a string needs a declared \"type\" in GLM-4.7's tool-call format "
               "(its parser reads an untyped value as JSON whenever it parses)");
      return Expr::ref(rule_for(s, path));
    }
    if (has_string) {
      for (const auto& t : types)
        if (t != "string" && t != "null")
          refuse(path, fmt::format("a parameter that may be a string or {} cannot be told apart in GLM-4.7's "
                                   "tool-call format, where strings are written without quotes",
                                   t));
      return raw_string(s, path, close, 0);
    }
    unsigned allowed = kNull;
    for (const auto& t : types) allowed |= type_kinds(t);
    if (const unsigned extra = kinds(s, path) & ~allowed)
      refuse(path, fmt::format("the schema admits {}, which its declared type does not name; GLM-4.7's "
                               "parser reads values by the declared type",
                               kind_names(extra)));
    return Expr::ref(rule_for(s, path));
  }

  // Strings (and null) written raw: the parser keeps the text, except that a value reading "null" in any
  // case becomes null and one leading and one trailing newline are trimmed.
  static bool holds_any(const std::string& v, const std::vector<std::string>& markers) {
    for (const auto& m : markers)
      if (v.find(m) != std::string::npos) return true;
    return false;
  }

  Expr raw_string(const ordered_json& schema, const std::string& path, const std::vector<std::string>& close,
                  int depth) {
    if (depth > kMaxDepth) refuse(path, fmt::format("the schema nests deeper than {} levels", kMaxDepth));
    const ordered_json* sp = deref(schema, path);
    if (!sp) refuse(path, "$ref cycle");
    const ordered_json& s = *sp;
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(path, "the schema false matches nothing");
      return Expr::alt({plain_raw(close), Expr::lit("null")});
    }
    if (!s.is_object()) refuse(path, "a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!annotations().count(it.key()) && !supported().count(it.key())) refuse_keyword(path, it.key());
    for (const char* k : {"anyOf", "oneOf"})
      if (auto it = s.find(k); it != s.end()) {
        if (!it->is_array() || it->empty())
          refuse(path, fmt::format("{} must be a non-empty array of schemas", k));
        if (has_constraints(s, {k}))
          refuse(path, fmt::format("{} next to other constraints is not supported", k));
        if (std::string_view(k) == "oneOf") check_one_of(*it, path);
        std::vector<Expr> alts;
        for (size_t i = 0; i < it->size(); i++)
          alts.push_back(raw_string((*it)[i], fmt::format("{}/{}/{}", path, k, i), close, depth + 1));
        return Expr::alt(std::move(alts));
      }
    if (auto lits = literals(s, path)) {
      std::vector<Expr> alts;
      for (const auto& v : *lits) {
        if (v.is_null()) alts.push_back(Expr::lit("null"));
        if (!v.is_string()) continue;
        const std::string t = v.get<std::string>();
        if (!holds_any(t, close) && !t.starts_with('\n') && !t.ends_with('\n') && lower_ascii(t) != "null")
          alts.push_back(Expr::lit(t));
      }
      if (alts.empty()) refuse(path, "no value of the enum can be written in GLM-4.7's tool-call format");
      return Expr::alt(std::move(alts));
    }
    const auto types = type_names(s);
    bool str = types.empty(), null = false;
    for (const auto& t : types) {
      if (t == "string")
        str = true;
      else if (t == "null")
        null = true;
      else
        refuse(path, fmt::format("a {} is written as JSON in GLM-4.7's tool-call format, but the parameter's "
                                 "declared type is string",
                                 t));
    }
    for (const char* k : {"properties", "items", "prefixItems", "minimum", "maximum", "exclusiveMinimum",
                          "exclusiveMaximum", "additionalProperties", "required"})
      if (types.empty() && s.contains(k))
        refuse(path, fmt::format("\"{}\" does not apply to a string, the parameter's declared type", k));
    std::vector<Expr> alts;
    if (null) alts.push_back(Expr::lit("null"));
    if (str) alts.push_back(raw_string_content(s, path, close));
    return Expr::alt(std::move(alts));
  }

  // The raw text of a string schema (type string, maybe with pattern / format / length bounds).
  Expr raw_string_content(const ordered_json& s, const std::string& path,
                          const std::vector<std::string>& close) {
    auto min_len = count(s, "minLength", path), max_len = count(s, "maxLength", path);
    const bool has_pattern = s.contains("pattern"), has_format = s.contains("format");
    if (!has_pattern && !has_format && !min_len && !max_len) return plain_raw(close);
    if (has_pattern || has_format) {
      // The JSON encoding checks the keywords; the raw one leaves out '<' and '\n' (narrower, so never a
      // marker and never trimmed).
      (void)string_expr(s, path);
      std::string pattern;
      if (has_pattern) {
        pattern = s["pattern"].get<std::string>();
      } else {
        pattern = std::string("^") + formats().at(s["format"].get<std::string>()) + "$";
      }
      Expr e = pattern_content(pattern, Encoding::Raw);
      // The parser reads "null" (any case) as null: refuse a pattern that can produce it.
      Grammar probe;
      probe.root = probe.add("probe", e);
      Automaton a = compile(probe);
      for (int bits = 0; bits < 16; bits++) {
        std::string word = "null";
        for (int i = 0; i < 4; i++)
          if (bits & (1 << i)) word[i] = static_cast<char>(word[i] - 'a' + 'A');
        int32_t node = a.rule_start[probe.root];
        for (char c : word)
          if (node >= 0) node = a.step(node, static_cast<unsigned char>(c));
        if (node >= 0 && a.final[node])
          refuse(
              path,
              fmt::format("the pattern admits \"{}\", which GLM-4.7's tool-call parser reads as null", word));
      }
      return e;
    }
    const int64_t mn = min_len.value_or(0), mx = max_len ? *max_len : -1;
    if (mx >= 0 && mx < mn) refuse(path, "maxLength is below minLength");
    if (mn > 1000 || mx > 1000) refuse_keyword(path, mn > 1000 ? "minLength" : "maxLength", "at most 1000");
    // Characters but '<' and '\n', mn..mx of them, except the words reading "null".
    const Expr any = raw_chars(complement({{'\n', '\n'}, {'<', '<'}}));
    auto rest = [&](int64_t k, int64_t at_least) -> Expr {
      if (mx >= 0 && k + at_least > mx) return Expr::nothing();
      return Expr::repeat(any, static_cast<int>(std::max<int64_t>(at_least, mn - k)),
                          mx < 0 ? -1 : static_cast<int>(mx - k));
    };
    auto but = [&](char a) {
      const char b = static_cast<char>(a - 'a' + 'A');
      return raw_chars(
          complement({{'\n', '\n'}, {'<', '<'}, {char32_t(a), char32_t(a)}, {char32_t(b), char32_t(b)}}));
    };
    auto either = [](char a) {
      return Expr::alt({Expr::byte(a), Expr::byte(static_cast<unsigned char>(a - 'a' + 'A'))});
    };
    const std::string word = "null";
    Expr tail = Expr::seq({any, rest(5, 0)});  // after "null": at least one more
    for (int i = 3; i >= 0; i--) {
      std::vector<Expr> alts;
      if (i > 0 && mn <= i) alts.push_back(Expr::empty());
      if (i == 0 && mn == 0) alts.push_back(Expr::empty());
      if (mx < 0 || i + 1 <= mx) {
        alts.push_back(Expr::seq({but(word[i]), rest(i + 1, 0)}));
        alts.push_back(Expr::seq({either(word[i]), std::move(tail)}));
      }
      tail = Expr::alt(std::move(alts));
    }
    return tail;
  }

  // Raw UTF-8 characters of the set. Every non-ASCII character is one shared rule when the set holds them
  // all, so the DFAs of the rules using it do not repeat the multi-byte states in each context.
  Expr raw_chars(const Ranges& set) {
    ByteSet ascii;
    std::vector<Expr> alts;
    const Ranges r = normalize(set);
    bool all_high = false;
    for (auto [lo, hi] : r) {
      for (char32_t c = lo; c <= std::min<char32_t>(hi, 0x7F); c++) ascii.set(c);
      if (hi >= 0x80 && lo <= 0x80 && hi >= kMaxCp) all_high = true;
    }
    if (all_high) {
      auto known = shared_rules_->find("non-ASCII character");
      if (known == shared_rules_->end()) {
        std::vector<Expr> high;
        utf8_ranges(0x80, kMaxCp, high);
        known =
            shared_rules_
                ->emplace("non-ASCII character", g_.add("non-ASCII character", Expr::alt(std::move(high))))
                .first;
      }
      alts.push_back(Expr::ref(known->second));
    } else {
      for (auto [lo, hi] : r)
        if (hi >= 0x80) utf8_ranges(std::max<char32_t>(lo, 0x80), hi, alts);
    }
    if (ascii.any()) alts.push_back(Expr::bytes(ascii));
    return Expr::alt(std::move(alts));
  }

  // Any text holding none of the markers `closes` (which start with one ASCII character found nowhere else
  // in them) that does not read as null once one leading and one trailing newline are trimmed. Leading or
  // trailing newlines are allowed: trimmed, the value is still a string.
  Expr plain_raw(const std::vector<std::string>& closes) {
    const char m0 = closes.at(0).empty() ? '\0' : closes[0][0];
    for (const auto& c : closes)
      if (c.empty() || c[0] != m0 || c.find(m0, 1) != std::string::npos ||
          static_cast<unsigned char>(m0) >= 0x80)
        throw InvalidInput(
            "the markers after a raw value must start with one ASCII character found nowhere else in them");
    auto chars_but = [&](const std::set<char32_t>& ex) {
      Ranges r = {{char32_t(m0), char32_t(m0)}};
      for (char32_t c : ex) r.push_back({c, c});
      return raw_chars(complement(r));
    };
    // V: the first character and a proper prefix of a marker's rest; T: V then a character that neither
    // continues a marker nor starts one again. Text without the markers: (N | V* T)* V*.
    std::map<std::string, std::set<char32_t>> next;  // proper prefixes (first character included)
    for (const auto& c : closes)
      for (size_t i = 1; i < c.size(); i++) next[c.substr(0, i)].insert(static_cast<unsigned char>(c[i]));
    for (const auto& c : closes) next.erase(c);
    std::vector<Expr> vs, ts;
    for (const auto& [pre, cont] : next) {
      vs.push_back(Expr::lit(pre));
      ts.push_back(Expr::seq({Expr::lit(pre), chars_but(cont)}));
    }
    Expr V = Expr::alt(vs), T = Expr::alt(ts);
    // Three rules shared by every string value of the grammar (each node of a rule accepting text costs a
    // walk over the vocabulary when the grammar is compiled): the text, the text starting with the markers'
    // first character, and the value (the text minus what reads as null).
    const std::string key = fmt::format("raw text without {}", fmt::join(closes, " "));
    if (auto known = shared_rules_->find(key + " (value)"); known != shared_rules_->end())
      return Expr::ref(known->second);
    const int text = g_.add(
        key,
        Expr::seq({Expr::star(Expr::alt({chars_but({}), Expr::seq({Expr::star(V), T})})), Expr::star(V)}));
    Expr L = Expr::ref(text);
    const int lt = g_.add(key + " (from its first character)",
                          Expr::alt({Expr::seq({Expr::star(V), T, L}), Expr::plus(V)}));
    Expr starts_marker = Expr::ref(lt);
    auto but = [&](std::initializer_list<char32_t> ex) { return Expr::seq({chars_but(ex), L}); };
    auto either = [](char a) {
      return Expr::alt({Expr::byte(a), Expr::byte(static_cast<unsigned char>(a - 'a' + 'A'))});
    };
    // Walk "null" (case-insensitive, an optional newline around it): leave the word anywhere but at its end.
    Expr after_null = Expr::alt(
        {but({'\n'}), starts_marker, Expr::seq({Expr::byte('\n'), Expr::alt({but({}), starts_marker})})});
    Expr r3 =
        Expr::alt({Expr::empty(), but({'l', 'L'}), starts_marker, Expr::seq({either('l'), after_null})});
    Expr r2 = Expr::alt({Expr::empty(), but({'l', 'L'}), starts_marker, Expr::seq({either('l'), r3})});
    Expr r1 = Expr::alt({Expr::empty(), but({'u', 'U'}), starts_marker, Expr::seq({either('u'), r2})});
    Expr after_nl = Expr::alt({Expr::empty(), but({'n', 'N'}), starts_marker, Expr::seq({either('n'), r1})});
    const int value = g_.add(
        key + " (value)", Expr::alt({Expr::empty(), but({'\n', 'n', 'N'}), starts_marker,
                                     Expr::seq({Expr::byte('\n'), after_nl}), Expr::seq({either('n'), r1})}));
    (*shared_rules_)[key + " (value)"] = value;
    return Expr::ref(value);
  }

  static const std::map<std::string, std::string>& formats() {
    static const std::map<std::string, std::string> f = {
        {"date", kDate},
        {"time", kTime},
        {"date-time", std::string(kDate) + "T" + kTime},
        {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
        // Bounded (a local part of at most three dot-separated atoms, at most three domain labels), so a
        // model cannot wander inside an address.
        {"email",
         "[a-zA-Z0-9_+-]{1,32}(?:\\.[a-zA-Z0-9_+-]{1,32}){0,2}@(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,20}[a-zA-Z0-"
         "9])?\\.){1,3}"
         "[a-zA-Z]{2,12}"},
        {"ipv4", "(?:(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"},
    };
    return f;
  }

  static constexpr const char* kDate =
      "(?:\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0["
      "1-9]|1\\d|2[0-8]))"
      "|(?:\\d\\d(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)";
  static constexpr const char* kTime =
      "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,6})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)";

  const ordered_json& root_;
  Grammar& g_;
  std::string prefix_;
  Encoding enc_ = Encoding::Json;
  std::map<std::string, int> rules_;
  int string_ = -1, value_ = -1, any_object_ = -1;
  // Rules the compilers of one grammar share (raw text values), by name.
  std::map<std::string, int> own_shared_rules_;
  std::map<std::string, int>* shared_rules_ = &own_shared_rules_;
  static constexpr int kMaxDepth = 64;
  int depth_ = 0;
};

}  // namespace

Expr regex_string_content(Grammar& g, std::string_view pattern) {
  (void)g;
  return pattern_content(pattern, Encoding::Json);
}

Grammar json_schema_grammar(const ordered_json& schema) {
  Grammar g;
  SchemaCompiler c(schema, g);
  g.root = c.root_rule();
  return g;
}

Grammar json_object_grammar() {
  Grammar g;
  ordered_json dummy = ordered_json::object();
  SchemaCompiler c(dummy, g);
  g.root = c.any_object_rule();
  return g;
}

Grammar tool_call_grammar(const std::vector<ToolSpec>& tools, const ToolCallSyntax& syntax, int max_calls) {
  if (tools.empty()) throw InvalidInput("tool calls were required, but no tools were given");
  if (max_calls < 1) throw InvalidInput("at least one tool call must be allowed");
  Grammar g;
  std::vector<Expr> calls;
  const bool key_values = !syntax.key_open.empty();
  std::map<std::string, int> shared;
  if (key_values && (syntax.key_close.empty() || syntax.value_open.empty() || syntax.value_close.empty()))
    throw InvalidInput("key/value tool-call arguments need all four markers");
  for (size_t i = 0; i < tools.size(); i++) {
    const std::string& name = tools[i].name;
    const ordered_json& params =
        tools[i].parameters.is_null() ? ordered_json::object({{"type", "object"}}) : tools[i].parameters;
    if (key_values && (name.empty() || std::any_of(name.begin(), name.end(), [](char c) {
                         return c == '<' || c == '>' || static_cast<unsigned char>(c) <= ' ';
                       })))
      throw InvalidInput(
          fmt::format("tool name \"{}\" cannot be written in GLM-4.7's tool-call format (it must "
                      "be non-empty, without whitespace, '<' or '>')",
                      name));
    SchemaCompiler c(params, g, fmt::format("tool {} ", name),
                     key_values ? Encoding::JsonNoLt : Encoding::Json, &shared);
    Expr args;
    try {
      args = key_values ? c.root_key_values(syntax) : Expr::ref(c.root_rule());
    } catch (const InvalidInput& e) {
      throw InvalidInput(fmt::format("parameters of tool \"{}\": {}", name, e.what()));
    }
    calls.push_back(Expr::seq(
        {Expr::lit(syntax.open), Expr::lit(syntax.prefix + name), std::move(args), Expr::lit(syntax.close)}));
  }
  Expr call = Expr::alt(std::move(calls));
  if (key_values)  // calls may be set apart by a newline
    g.root = g.add(
        "tool calls",
        Expr::seq({call, Expr::repeat(Expr::seq({Expr::opt(Expr::byte('\n')), call}), 0, max_calls - 1)}));
  else
    g.root = g.add("tool calls", Expr::repeat(call, 1, max_calls));
  return g;
}

}  // namespace vatic::grammar
