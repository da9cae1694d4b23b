#pragma once
// Hugging Face `tokenizers` compatible tokenizer, loaded from a tokenizer.json.
//
// Supported (anything else in a tokenizer.json is refused with an error naming it):
//   model:          BPE (vocab, merges in "a b" or ["a","b"] form, unk_token, fuse_unk, byte_fallback,
//                   ignore_merges, continuing_subword_prefix, end_of_word_suffix)
//   added_tokens:   special or not, with lstrip / rstrip / normalized / single_word
//   normalizer:     Replace, NFC, NFD, NFKC, NFKD, Prepend, Sequence
//   pre_tokenizer:  Split (string or regex, every behavior, invert), ByteLevel, Metaspace, Sequence
//   post_processor: TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence
//   decoder:        Replace, ByteFallback, Fuse, Strip, ByteLevel, Metaspace, Sequence
// `truncation` and `padding` are ignored (they only concern batch encoding for training).
//
// A Tokenizer is immutable after loading; encode/decode may be called from several threads at once.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vatic {

namespace tok {
struct Impl;
}

class Tokenizer {
 public:
  // `path` is a tokenizer.json or a model directory holding one. From a directory, bos/eos ids are also
  // read from tokenizer_config.json, generation_config.json and config.json when present.
  static Tokenizer load(const std::filesystem::path& path);
  // Parses the text of a tokenizer.json. `origin` names it in error messages.
  static Tokenizer from_json(std::string_view json_text, std::string_view origin = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Encodes UTF-8 text (invalid sequences are read as U+FFFD). Added tokens found in the text are always
  // recognised; `add_special_tokens` runs the post-processor (e.g. prepends <bos>).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Decodes ids through the decoder. Unknown ids are dropped, as Hugging Face tokenizers does.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's string as stored in the vocabulary (e.g. "▁the", "Ġthe", "<0x0A>"); nullopt if unknown.
  std::optional<std::string> id_to_token(int32_t id) const;
  // True for added tokens marked "special" (hidden by skip_special_tokens).
  bool is_special(int32_t id) const;
  bool is_added(int32_t id) const;
  // One past the largest id (model vocabulary plus added tokens).
  int32_t vocab_size() const;

  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;            // the first of eos_ids()
  const std::vector<int32_t>& eos_ids() const;       // every end-of-sequence id known
  std::optional<int32_t> pad_id() const;
  std::optional<int32_t> unk_id() const;

  const tok::Impl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::unique_ptr<tok::Impl> impl);
  std::unique_ptr<tok::Impl> impl_;
};

// Incremental detokenizer for generation: feed ids one at a time, get back only text that is final.
// Text is held back while it ends in an incomplete UTF-8 character (e.g. a character split across
// byte-fallback tokens), so every returned chunk is complete UTF-8, and the concatenation of all chunks
// plus flush() equals decode() of the whole sequence (same skip_special_tokens).
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  // Returns the text that became final with this id (possibly empty).
  std::string push(int32_t id);
  // Returns whatever is still held back (incomplete characters come out as U+FFFD), and resets.
  std::string flush();
  void reset();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;  // context tokens followed by not yet emitted tokens
  std::string prefix_;        // decode of ids_[0, prefix_index_)
  std::size_t prefix_index_ = 0;
};

}  // namespace vatic
