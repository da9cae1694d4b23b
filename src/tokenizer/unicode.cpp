#include "tokenizer/unicode.h"

#include <algorithm>
#include <vector>

#include "tokenizer/regex.h"

#include "tokenizer/unicode_tables.h"

namespace vatic::unicode {

namespace ut = unicode_tables;

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 if invalid; `maximal` receives the length of the
// maximal invalid subpart (at least 1) when invalid.
std::size_t check_seq(std::string_view s, std::size_t i, std::size_t& maximal) {
  auto at = [&](std::size_t k) -> int { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : -1; };
  int b0 = at(0);
  maximal = 1;
  if (b0 < 0x80) return 1;
  int need;
  int lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k <= need; ++k) {
    int b = at(static_cast<std::size_t>(k));
    int l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      maximal = static_cast<std::size_t>(k);
      return 0;
    }
  }
  return static_cast<std::size_t>(need + 1);
}

}  // namespace

std::size_t valid_prefix(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    std::size_t maximal;
    std::size_t n = check_seq(s, i, maximal);
    if (n == 0) return i;
    i += n;
  }
  return i;
}

std::string lossy(std::string_view s) {
  std::size_t ok = valid_prefix(s);
  if (ok == s.size()) return std::string(s);
  std::string out(s.substr(0, ok));
  std::size_t i = ok;
  while (i < s.size()) {
    std::size_t maximal;
    std::size_t n = check_seq(s, i, maximal);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += maximal;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

namespace {

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t ccc(char32_t c) {
  if (c < 0x300) return 0;
  const auto* b = ut::kCombiningClasses;
  const auto* e = b + ut::kCombiningClassCount;
  auto it = std::lower_bound(b, e, c, [](const ut::CombiningClass& x, char32_t v) { return x.cp < v; });
  return it != e && it->cp == c ? it->ccc : 0;
}

const ut::Decomposition* find_decomp(const ut::Decomposition* b, std::size_t n, char32_t c) {
  const auto* e = b + n;
  auto it = std::lower_bound(b, e, c, [](const ut::Decomposition& x, char32_t v) { return x.cp < v; });
  return it != e && it->cp == c ? it : nullptr;
}

void decompose(char32_t c, bool compat, std::vector<char32_t>& out) {
  if (c < 0xA0) {
    out.push_back(c);
    return;
  }
  if (c >= kSBase && c < kSBase + kSCount) {
    char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (compat) {
    if (const auto* d = find_decomp(ut::kCompat, ut::kCompatCount, c)) {
      out.insert(out.end(), ut::kCompatData + d->offset, ut::kCompatData + d->offset + d->length);
      return;
    }
  }
  if (const auto* d = find_decomp(ut::kCanonical, ut::kCanonicalCount, c)) {
    out.insert(out.end(), ut::kCanonicalData + d->offset, ut::kCanonicalData + d->offset + d->length);
    return;
  }
  out.push_back(c);
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* s = ut::kCompositions;
  const auto* e = s + ut::kCompositionCount;
  auto it = std::lower_bound(s, e, std::pair{a, b}, [](const ut::Composition& x, std::pair<char32_t, char32_t> v) {
    return x.first != v.first ? x.first < v.first : x.second < v.second;
  });
  return it != e && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

std::string normalize(std::string_view s, Form form) {
  bool ascii = std::all_of(s.begin(), s.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x80; });
  if (ascii) return std::string(s);
  bool compat = form == Form::NFKC || form == Form::NFKD;
  bool compose = form == Form::NFC || form == Form::NFKC;
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) decompose(next_cp(s, i), compat, cps);
  // Canonical ordering: stable sort runs of non-starters by combining class.
  for (std::size_t i = 0; i < cps.size();) {
    if (ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cps.size() && ccc(cps[j]) != 0) ++j;
    if (j - i > 1)
      std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j),
                       [](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  if (compose && !cps.empty()) {
    std::size_t starter = 0;
    bool have_starter = ccc(cps[0]) == 0;
    int last_ccc = have_starter ? 0 : 256;
    std::size_t w = 1;
    for (std::size_t r = 1; r < cps.size(); ++r) {
      char32_t c = cps[r];
      int cc = ccc(c);
      if (have_starter && (last_ccc < cc || (last_ccc == 0 && w == starter + 1))) {
        if (char32_t comp = compose_pair(cps[starter], c)) {
          cps[starter] = comp;
          continue;
        }
      }
      if (cc == 0) {
        starter = w;
        have_starter = true;
      }
      last_ccc = cc;
      cps[w++] = c;
    }
    cps.resize(w);
  }
  std::string out;
  out.reserve(s.size() + 8);
  for (char32_t c : cps) append_utf8(out, c);
  return out;
}

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  // Use PCRE2's Unicode tables through a tiny compiled pattern.
  static pcre2_code* re = [] {
    int err;
    PCRE2_SIZE off;
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>("^[\\p{L}\\p{M}\\p{Nd}\\p{Pc}\\p{Nl}]"), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  }();
  std::string buf;
  append_utf8(buf, c);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(buf.data()), buf.size(), 0, 0, md, nullptr);
  pcre2_match_data_free(md);
  return rc > 0;
}

}  // namespace vatic::unicode
