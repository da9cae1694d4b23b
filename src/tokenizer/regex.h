#pragma once
// PCRE2 (UTF + UCP, JIT when available) regex used by the tokenizer's Split / Replace components.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

namespace vatic::tok {

class Regex {
 public:
  // `literal`: the pattern is a plain string matched verbatim.
  Regex(std::string_view pattern, bool literal);
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex();

  // Non-overlapping matches, left to right, as byte ranges [begin, end). `s` must be valid UTF-8.
  void find_all(std::string_view s, std::vector<std::pair<std::size_t, std::size_t>>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  pcre2_code* code_ = nullptr;
};

}  // namespace vatic::tok
