#pragma once
// UTF-8 helpers and Unicode normalization (NFC/NFD/NFKC/NFKD) for the tokenizer.
#include <cstdint>
#include <string>
#include <string_view>

namespace vatic::unicode {

enum class Form { NFC, NFD, NFKC, NFKD };

// Decodes the code point at s[i] (s must be valid UTF-8) and advances i.
inline char32_t next_cp(std::string_view s, std::size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  if (b < 0xE0) {
    char32_t c = (b & 0x1Fu) << 6 | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
    i += 2;
    return c;
  }
  if (b < 0xF0) {
    char32_t c = (b & 0x0Fu) << 12 | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 6 |
                 (static_cast<unsigned char>(s[i + 2]) & 0x3Fu);
    i += 3;
    return c;
  }
  char32_t c = (b & 0x07u) << 18 | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 12 |
               (static_cast<unsigned char>(s[i + 2]) & 0x3Fu) << 6 | (static_cast<unsigned char>(s[i + 3]) & 0x3Fu);
  i += 4;
  return c;
}

// Byte length of the UTF-8 sequence starting with lead byte b (1 for invalid leads).
inline std::size_t seq_len(unsigned char b) { return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

void append_utf8(std::string& out, char32_t cp);

// Length of the longest valid UTF-8 prefix of s.
std::size_t valid_prefix(std::string_view s);
// Returns s with invalid UTF-8 replaced by U+FFFD the way Rust's String::from_utf8_lossy does it
// (one replacement per maximal invalid subpart).
std::string lossy(std::string_view s);
inline bool is_valid(std::string_view s) { return valid_prefix(s) == s.size(); }

std::string normalize(std::string_view s, Form form);

// Unicode White_Space property.
bool is_whitespace(char32_t c);
// Approximation of a regex \w character (letters, marks, digits, connector punctuation).
bool is_word_char(char32_t c);

}  // namespace vatic::unicode
