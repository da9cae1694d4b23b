#pragma once
// Internal state of a vatic::Tokenizer (exposed for tests and benchmarks only).
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pipeline.h"

namespace vatic::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, normalized = false, single_word = false;
};

// Leftmost-longest matcher over a set of strings (byte trie).
class AddedTokenMatcher {
 public:
  void add(const std::string& pattern, int32_t token_index);
  bool empty() const { return nodes_ == 1; }
  struct Match {
    std::size_t begin, end;
    int32_t token_index;
  };
  // Leftmost-longest, non-overlapping matches.
  void find_all(std::string_view s, std::vector<Match>& out) const;

 private:
  int32_t child(int32_t node, unsigned char b) const {
    auto it = edges_.find(static_cast<uint64_t>(node) << 8 | b);
    return it == edges_.end() ? -1 : it->second;
  }
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> value_{-1};  // per node: token index or -1
  int32_t nodes_ = 1;
  std::array<bool, 256> first_{};
};

struct Impl {
  std::unique_ptr<Bpe> model;
  std::vector<AddedToken> added;
  std::unordered_map<int32_t, std::size_t> added_by_id;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> added_by_content;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized = false
  AddedTokenMatcher normalized_matcher;  // added tokens with normalized = true (matched on normalized text)
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  int32_t vocab_size = 0;
  std::optional<int32_t> bos, pad;
  std::vector<int32_t> eos;

  std::optional<int32_t> token_to_id(std::string_view s) const;
  std::optional<std::string_view> id_to_token(int32_t id) const;
  const AddedToken* added_token(int32_t id) const {
    auto it = added_by_id.find(id);
    return it == added_by_id.end() ? nullptr : &added[it->second];
  }
  void encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const;

 private:
  void split_added(std::string_view s, const AddedTokenMatcher& m, std::vector<std::pair<std::string_view, int32_t>>& out) const;
  void encode_piece(std::string text, bool at_start, std::vector<int32_t>& out) const;
};

}  // namespace vatic::tok
