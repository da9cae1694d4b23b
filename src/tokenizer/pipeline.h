#pragma once
// The pipeline stages of a tokenizer.json: normalizer, pre-tokenizer, post-processor, decoder.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/json.h"

namespace vatic::tok {

// A piece of (normalized) text on its way to the model.
struct Piece {
  std::string text;
  bool at_start = false;  // starts at offset 0 of the original input (Metaspace "first" scheme)
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens around one sequence.
  virtual void process(std::vector<int32_t>& ids) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

using TokenLookup = std::function<std::optional<int32_t>(std::string_view)>;

// Each returns nullptr for a JSON null and throws vatic::Error naming any unsupported construct.
std::unique_ptr<Normalizer> make_normalizer(const json& j);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j);
std::unique_ptr<PostProcessor> make_post_processor(const json& j, const TokenLookup& lookup);
std::unique_ptr<Decoder> make_decoder(const json& j);

// Bos-like id: the first special token a post-processor puts before the sequence, if any.
std::optional<int32_t> post_processor_bos(const json& j, const TokenLookup& lookup);

}  // namespace vatic::tok
