// tokenizer.json files built to hurt the loader: nesting deep enough to overflow a recursive reader, and sparse ids
// that would size tables by the largest id.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/json.h"

namespace vatic {
namespace {

std::string with_model(const std::string& rest, const std::string& vocab = R"({"a": 0, "b": 1})") {
  return R"({"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": null, "post_processor": null, )" +
         rest + R"(, "model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": []}})";
}

std::string error_of(const std::string& text) {
  try {
    Tokenizer::from_json(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerHostile, DeeplyNestedSequenceDecoderIsRefused) {
  const int depth = 50000;
  std::string decoder;
  for (int i = 0; i < depth; i++) decoder += R"({"type": "Sequence", "decoders": [)";
  decoder += R"({"type": "Fuse"})";
  for (int i = 0; i < depth; i++) decoder += "]}";
  std::string e = error_of(with_model(R"("decoder": )" + decoder));
  EXPECT_NE(e.find("nested deeper"), std::string::npos) << e;
  // A Sequence a real tokenizer would use still loads.
  std::string shallow = R"({"type": "Sequence", "decoders": [{"type": "Sequence", "decoders": [{"type": "Fuse"}]}]})";
  EXPECT_EQ(error_of(with_model(R"("decoder": )" + shallow)), "");
}

TEST(TokenizerHostile, SparseIdsAreRefusedBeforeAllocating) {
  std::string e = error_of(with_model(R"("decoder": null)", R"({"a": 0, "b": 1000000000})"));
  EXPECT_NE(e.find("dense"), std::string::npos) << e;
  std::string added = R"({"version": "1.0", "added_tokens": [{"id": 2000000000, "content": "<x>", "special": true}],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
  e = error_of(added);
  EXPECT_NE(e.find("dense"), std::string::npos) << e;
  // Ids a little past the vocabulary (added tokens after it) are fine.
  EXPECT_EQ(error_of(with_model(R"("decoder": null)", R"({"a": 0, "b": 5})")), "");
}

TEST(TokenizerHostile, ErrorsDoNotQuoteTheFile) {
  std::string e = error_of("{\"version\": SECRET-CONTENT");
  EXPECT_FALSE(e.empty());
  EXPECT_EQ(e.find("SECRET"), std::string::npos) << e;
}

}  // namespace
}  // namespace vatic
