#pragma once
// Byte-pair-encoding model of a tokenizer.json ("model": {"type": "BPE", ...}).
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "util/json.h"

namespace vatic::tok {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Bpe {
 public:
  explicit Bpe(const json& model);
  Bpe(const Bpe&) = delete;
  Bpe& operator=(const Bpe&) = delete;

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;
  int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }
  std::optional<int32_t> unk_id() const { return unk_id_; }

 private:
  struct MergeEntry {
    uint64_t key;  // (left id << 32) | right id; 0xFFFF... = empty
    uint32_t rank;
    int32_t new_id;
  };
  const MergeEntry* find_merge(int32_t a, int32_t b) const;
  void add_merge(int32_t a, int32_t b, uint32_t rank, int32_t new_id);
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t char_id(char32_t cp, std::string_view s, bool first, bool last) const;

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<MergeEntry> merges_;  // open addressing, power-of-two capacity
  uint64_t merge_mask_ = 0;
  std::vector<int32_t> bmp_ids_;  // single-code-point tokens below U+10000 (-1: none); when no prefix/suffix
  std::unordered_map<char32_t, int32_t> astral_ids_;
  int32_t byte_ids_[256];
  std::optional<int32_t> unk_id_;
  std::string continuing_prefix_, end_suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  bool simple_chars_ = true;  // no continuing_subword_prefix / end_of_word_suffix

  static constexpr std::size_t kCacheMaxWord = 256, kCacheMaxEntries = 100000;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace vatic::tok
