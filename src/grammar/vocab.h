#pragma once
// The model's vocabulary as the grammar sees it: the bytes each token adds to the decoded text, and the
// tokens sorted by those bytes (with the common prefix of neighbours) so a walk over them shares work between
// tokens with a common prefix, as a walk over a trie would.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vatic {
class Tokenizer;
}

namespace vatic::grammar {

class TokenVocab {
 public:
  // `size` is the model's vocabulary (it may exceed the tokenizer's). Special tokens read as
  // special_bytes(content), which only grammars that name them allow; ids without text get no bytes and are
  // never allowed (stop tokens are handled separately).
  static TokenVocab from_tokenizer(const Tokenizer& tok, int64_t size);
  // For tests: token i is `bytes[i]` (empty = never allowed).
  static TokenVocab from_bytes(std::vector<std::string> bytes);

  // What a special token reads as in a grammar: its content between two 0xFF bytes. 0xFF never occurs in
  // UTF-8, so text tokens holding it are left out and only the special token itself can match.
  static std::string special_bytes(std::string_view content) {
    // Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict for "literal" + std::string.
    std::string s;
    s.reserve(content.size() + 2);
    s.push_back('\xFF');
    s.append(content);
    s.push_back('\xFF');
    return s;
  }

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  // Tokens with bytes, sorted by them; lcp[i] = common prefix length of sorted[i-1] and sorted[i] (lcp[0] =
  // 0).
  const std::vector<int32_t>& sorted() const { return sorted_; }
  const std::vector<uint16_t>& lcp() const { return lcp_; }
  size_t max_token_bytes() const { return max_len_; }
  // sorted()[first_byte_begin(b) .. first_byte_begin(b + 1)) are the tokens starting with byte b.
  size_t first_byte_begin(int b) const { return first_[b]; }

 private:
  void index();
  std::vector<std::string> bytes_;
  std::vector<int32_t> sorted_;
  std::vector<uint16_t> lcp_;
  size_t max_len_ = 0;
  std::vector<size_t> first_ = std::vector<size_t>(257, 0);
};

}  // namespace vatic::grammar
