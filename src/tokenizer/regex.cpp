#include "tokenizer/regex.h"

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace vatic::tok {

Regex::Regex(std::string_view pattern, bool literal) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
  if (literal) options |= PCRE2_LITERAL;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err, &off, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("invalid regex /{}/ at offset {}: {}", std::string(pattern), off, reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::find_all(std::string_view s, std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  out.clear();
  if (s.empty()) return;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  std::size_t pos = 0;
  while (pos <= s.size()) {
    int rc = pcre2_match(code_, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("regex /{}/ failed: {}", pattern_, reinterpret_cast<const char*>(msg));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    std::size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e > b) {
      pos = e;
    } else {  // empty match: step over one character
      if (e >= s.size()) break;
      pos = e + unicode::seq_len(static_cast<unsigned char>(s[e]));
    }
  }
  pcre2_match_data_free(md);
}

}  // namespace vatic::tok
