#pragma once
// Byte-pair-encoding model of a tokenizer.json ("model": {"type": "BPE", ...}).
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "util/json.h"

namespace vatic::tok {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

using VocabList = std::vector<std::pair<std::string, int64_t>>;
using MergeList = std::vector<std::pair<std::string, std::string>>;

class Bpe {
 public:
  // `model` holds the options (vocab and merges in it are ignored); vocab and merges are given apart so a
  // large file can be read without building a JSON tree for them.
  Bpe(const json& model, const VocabList& vocab, const MergeList& merges);
  // Reads "vocab" and "merges" out of a model JSON object.
  static VocabList vocab_from_json(const json& model);
  static MergeList merges_from_json(const json& model);
  Bpe(const Bpe&) = delete;
  Bpe& operator=(const Bpe&) = delete;

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's text (valid for the Bpe's lifetime), or nullopt for an id without a token.
  std::optional<std::string_view> id_to_token(int32_t id) const;
  static constexpr uint32_t kMissing = 0xFFFFFFFFu;
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
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

  // Vocabulary: token strings in one arena, looked up through an open-addressing table of ids.
  std::string_view token_at(int32_t id) const {
    const auto& r = tokens_[static_cast<std::size_t>(id)];
    return std::string_view(arena_).substr(r.first, r.second);
  }
  int32_t find_token(std::string_view s, uint64_t h) const;
  std::string arena_;
  std::vector<std::pair<uint32_t, uint32_t>> tokens_;  // per id: (offset, length); length kMissing = no token
  std::vector<int32_t> table_;                         // ids, -1 = empty
  uint64_t table_mask_ = 0;
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
