// Behaviour of the tokenizer components, checked against documented Hugging Face semantics and
// Unicode facts (never against values produced by this implementation).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "test_common.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace vatic {
namespace {

using test::fixtures;

std::vector<std::string> pre_tokenize(const json& cfg, const std::string& text) {
  auto pt = tok::make_pre_tokenizer(cfg);
  std::vector<tok::Piece> pieces{{text, true}};
  pt->pre_tokenize(pieces);
  std::vector<std::string> out;
  for (auto& p : pieces) out.push_back(p.text);
  return out;
}

// The examples of the Hugging Face docs for SplitDelimiterBehavior on "the-final--countdown".
TEST(TokenizerSplit, Behaviors) {
  auto split = [](const char* behavior, bool invert = false) {
    return pre_tokenize({{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}},
                        "the-final--countdown");
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Removed"), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split("Isolated"), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithPrevious"), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithNext"), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split("Contiguous"), (V{"the", "-", "final", "--", "countdown"}));
  // invert: the pattern describes what to keep.
  EXPECT_EQ(split("Removed", true), (V{"-", "-", "-"}));
}

TEST(TokenizerSplit, RegexUsesUnicodeProperties) {
  json cfg = {{"type", "Split"}, {"pattern", {{"Regex", "\\p{L}+|\\p{N}+"}}}, {"behavior", "Isolated"}, {"invert", false}};
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize(cfg, "Grüße42日本"), (V{"Grüße", "42", "日本"}));
  EXPECT_THROW(tok::make_pre_tokenizer(
                   {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}, {"invert", false}}),
               Error);
}

TEST(TokenizerPreTokenizer, ByteLevelMapsBytesLikeGpt2) {
  using V = std::vector<std::string>;
  // GPT-2: space is "Ġ" (U+0120), newline is "Ċ" (U+010A); prefix space when asked.
  EXPECT_EQ(pre_tokenize({{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}, "Hello world\n"),
            (V{"ĠHello", "Ġworld", "Ċ"}));
  EXPECT_EQ(pre_tokenize({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}, "a b"),
            (V{"aĠb"}));
  // é is C3 A9 -> "Ã©"
  EXPECT_EQ(pre_tokenize({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}, "é"), (V{"Ã©"}));
}

TEST(TokenizerPreTokenizer, Metaspace) {
  using V = std::vector<std::string>;
  json cfg = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(pre_tokenize(cfg, "Hey friend"), (V{"▁Hey", "▁friend"}));
  cfg["split"] = false;
  EXPECT_EQ(pre_tokenize(cfg, "Hey friend"), (V{"▁Hey▁friend"}));
  cfg["prepend_scheme"] = "never";
  EXPECT_EQ(pre_tokenize(cfg, "Hey friend"), (V{"Hey▁friend"}));
}

TEST(TokenizerUnicode, NormalizationForms) {
  using unicode::Form;
  EXPECT_EQ(unicode::normalize("e\xCC\x81", Form::NFC), "\xC3\xA9");   // e + U+0301 -> U+00E9
  EXPECT_EQ(unicode::normalize("\xC3\xA9", Form::NFD), "e\xCC\x81");
  EXPECT_EQ(unicode::normalize("\xEF\xAC\x81", Form::NFKC), "fi");     // U+FB01 ligature
  EXPECT_EQ(unicode::normalize("\xEF\xAC\x81", Form::NFC), "\xEF\xAC\x81");
  EXPECT_EQ(unicode::normalize("\xE2\x91\xA0", Form::NFKD), "1");      // circled digit one
  EXPECT_EQ(unicode::normalize("\xED\x95\x9C", Form::NFD), "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB");  // 한
  EXPECT_EQ(unicode::normalize("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB", Form::NFC), "\xED\x95\x9C");
  // Canonical ordering puts U+0323 (ccc 220) before U+0307 (ccc 230), so
  // d + U+0307 + U+0323 -> NFC U+1E0D (d with dot below) + U+0307.
  EXPECT_EQ(unicode::normalize("d\xCC\x87\xCC\xA3", Form::NFC), "\xE1\xB8\x8D\xCC\x87");
  EXPECT_EQ(unicode::normalize("\xE2\x84\xAB", Form::NFC), "\xC3\x85");  // ANGSTROM SIGN -> Å (singleton)
}

TEST(TokenizerUnicode, LossyMatchesRustFromUtf8Lossy) {
  EXPECT_EQ(unicode::lossy("a\xE2\x82"), "a\xEF\xBF\xBD");                 // truncated sequence: one U+FFFD
  EXPECT_EQ(unicode::lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");        // two invalid bytes
  EXPECT_EQ(unicode::lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: 3
}

// A tiny BPE tokenizer.json built in the test.
json tiny(json vocab, json merges) {
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", nullptr},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

TEST(TokenizerBpe, MergeEncodingsAndRanks) {
  json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}};
  // "b c" has the better rank, so "abc" -> a + bc, and "a bc" is not a merge.
  auto t1 = Tokenizer::from_json(tiny(vocab, {"b c", "a b", "ab c"}).dump());
  auto t2 = Tokenizer::from_json(tiny(vocab, json::array({json::array({"b", "c"}), json::array({"a", "b"}), json::array({"ab", "c"})})).dump());
  EXPECT_EQ(t1.encode("abc", false), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(t2.encode("abc", false), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(t1.encode("abab", false), (std::vector<int32_t>{3, 3}));
  // With "a b" first: ab + c -> abc.
  auto t3 = Tokenizer::from_json(tiny(vocab, {"a b", "b c", "ab c"}).dump());
  EXPECT_EQ(t3.encode("abc", false), (std::vector<int32_t>{5}));
  // ignore_merges: a word that is in the vocabulary is taken whole.
  json j = tiny(vocab, {"b c"});
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(Tokenizer::from_json(j.dump()).encode("abc", false), (std::vector<int32_t>{5}));
  j["model"]["ignore_merges"] = false;
  EXPECT_EQ(Tokenizer::from_json(j.dump()).encode("abc", false), (std::vector<int32_t>{0, 4}));
}

TEST(TokenizerBpe, UnknownAndByteFallback) {
  json vocab = {{"<unk>", 0}, {"a", 1}};
  json j = tiny(vocab, json::array());
  j["model"]["unk_token"] = "<unk>";
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(Tokenizer::from_json(j.dump()).encode("axya", false), (std::vector<int32_t>{1, 0, 0, 1}));
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(Tokenizer::from_json(j.dump()).encode("axya", false), (std::vector<int32_t>{1, 0, 1}));
  // Byte fallback: "é" (C3 A9) becomes <0xC3> <0xA9>.
  j["model"]["vocab"]["<0xC3>"] = 2;
  j["model"]["vocab"]["<0xA9>"] = 3;
  j["model"]["byte_fallback"] = true;
  EXPECT_EQ(Tokenizer::from_json(j.dump()).encode("aéx", false), (std::vector<int32_t>{1, 2, 3, 0}));
}

TEST(TokenizerBpe, MergeWithMissingTokenIsRefused) {
  EXPECT_THROW(Tokenizer::from_json(tiny({{"a", 0}, {"b", 1}}, {"a b"}).dump()), Error);
}

json with_added(json j, json token) {
  j["added_tokens"].push_back(token);
  return j;
}

TEST(TokenizerAddedTokens, StripAndSingleWord) {
  json vocab = {{"h", 0}, {"i", 1}, {" ", 2}, {"x", 3}};
  json mask = {{"id", 4},          {"content", "<mask>"}, {"single_word", false}, {"lstrip", false},
               {"rstrip", false},  {"normalized", false}, {"special", true}};
  json j = tiny(vocab, json::array());
  using V = std::vector<int32_t>;
  EXPECT_EQ(Tokenizer::from_json(with_added(j, mask).dump()).encode("hi <mask> x", false), (V{0, 1, 2, 4, 2, 3}));
  mask["lstrip"] = true;
  EXPECT_EQ(Tokenizer::from_json(with_added(j, mask).dump()).encode("hi <mask> x", false), (V{0, 1, 4, 2, 3}));
  mask["rstrip"] = true;
  EXPECT_EQ(Tokenizer::from_json(with_added(j, mask).dump()).encode("hi <mask> x", false), (V{0, 1, 4, 3}));
  mask["lstrip"] = mask["rstrip"] = false;
  mask["single_word"] = true;
  auto t = Tokenizer::from_json(with_added(j, mask).dump());
  EXPECT_EQ(t.encode("hi <mask> x", false), (V{0, 1, 2, 4, 2, 3}));
  // Glued to a word: not a match (and "<mask>" then has no vocabulary entries: dropped, no unk token).
  EXPECT_EQ(t.encode("hi<mask>", false), (V{0, 1}));
}

TEST(TokenizerAddedTokens, NormalizedTokensMatchAfterNormalization) {
  json vocab = {{"a", 0}, {"_", 1}};
  json tokj = {{"id", 2},         {"content", "a a"},   {"single_word", false}, {"lstrip", false},
               {"rstrip", false}, {"normalized", true}, {"special", false}};
  json j = tiny(vocab, json::array());
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "_"}};
  auto t = Tokenizer::from_json(with_added(j, tokj).dump());
  // The token's content is normalized too ("a_a") and matched on the normalized text.
  EXPECT_EQ(t.encode("a a_a", false), (std::vector<int32_t>{2, 1, 0}));
}

TEST(TokenizerErrors, UnsupportedConstructsAreNamed) {
  json base = tiny({{"a", 0}}, json::array());
  auto expect_error = [](const json& j, const std::string& needle) {
    try {
      Tokenizer::from_json(j.dump());
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  json j = base;
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_error(j, "unsupported normalizer type \"Lowercase\" in tokenizer.json");
  j = base;
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "StripAccents"}}}}};
  expect_error(j, "unsupported normalizer type \"StripAccents\"");
  j = base;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(j, "unsupported pre_tokenizer type \"Whitespace\"");
  j = base;
  j["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
  expect_error(j, "unsupported decoder type \"WordPiece\"");
  j = base;
  j["post_processor"] = {{"type", "Madeup"}};
  expect_error(j, "unsupported post_processor type \"Madeup\"");
  j = base;
  j["model"]["type"] = "Unigram";
  expect_error(j, "unsupported model type \"Unigram\"");
  j = base;
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}, {"invert", false}};
  expect_error(j, "unsupported Split behavior \"Sideways\"");
  expect_error(json::parse("{\"model\": 1}"), "model");
  try {
    Tokenizer::from_json("{\"version\": \"1.0\", \"model\": {", "broken.json");
    ADD_FAILURE() << "no error for invalid JSON";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("invalid JSON in broken.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::load(fixtures() / "does-not-exist" / "tokenizer.json"), Error);
}

// SentencePiece-style tokenizer with byte fallback: "a€b" where "€" (E2 82 AC) is not in the vocabulary.
Tokenizer byte_fallback_tokenizer() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"a", 2}, {"b", 3}, {"▁", 4}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 5 + b;
  }
  json j = tiny(vocab, json::array());
  j["model"]["unk_token"] = "<unk>";
  j["model"]["byte_fallback"] = true;
  j["added_tokens"].push_back({{"id", 1},
                               {"content", "<s>"},
                               {"single_word", false},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"normalized", false},
                               {"special", true}});
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"pair", json::array()},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}}}}};
  return Tokenizer::from_json(j.dump());
}

TEST(TokenizerStreaming, HoldsBackSplitCharacters) {
  Tokenizer t = byte_fallback_tokenizer();
  auto ids = t.encode("a€b", true);
  const int32_t e2 = 5 + 0xE2, x82 = 5 + 0x82, xac = 5 + 0xAC;
  ASSERT_EQ(ids, (std::vector<int32_t>{1, 2, e2, x82, xac, 3}));
  StreamingDecoder shown(t, false);
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(shown.push(id));
  EXPECT_EQ(chunks, (std::vector<std::string>{"<s>", "a", "", "", "€", "b"}));
  EXPECT_EQ(shown.flush(), "");
  // A character cut off at the end comes out of flush() as U+FFFD, like decode().
  StreamingDecoder cut(t, true);
  std::string out;
  for (int32_t id : {1, 2, e2, x82}) out += cut.push(id);
  EXPECT_EQ(out, "a");
  EXPECT_EQ(cut.flush(), t.decode({e2, x82}));
  EXPECT_EQ(t.decode({e2, x82}), "\xEF\xBF\xBD\xEF\xBF\xBD");  // HF ByteFallback: one U+FFFD per byte
}

TEST(TokenizerSpecial, ShowAndHide) {
  Tokenizer t = byte_fallback_tokenizer();
  auto ids = t.encode("<s>a b", true);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 1, 2, 4, 3}));  // the literal "<s>" is the special token too
  EXPECT_EQ(t.encode("<s>a b", false), (std::vector<int32_t>{1, 2, 4, 3}));
  EXPECT_EQ(t.decode(ids, false), "<s><s>a b");
  EXPECT_EQ(t.decode(ids, true), "a b");
  EXPECT_TRUE(t.is_special(1));
  EXPECT_FALSE(t.is_special(2));
  EXPECT_EQ(t.bos_id(), 1);
  StreamingDecoder hidden(t, true);
  std::string out;
  for (int32_t id : ids) out += hidden.push(id);
  out += hidden.flush();
  EXPECT_EQ(out, "a b");
}

TEST(TokenizerFixture, GemmaFixtureSpecialsAndDirectoryMetadata) {
  Tokenizer t = Tokenizer::load(fixtures() / "models" / "gemma4-e2b-tiny");
  auto ids = t.encode("<bos>literal special?", true);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 2);
  EXPECT_EQ(t.decode(ids, false).rfind("<bos><bos>literal special?", 0), 0u);
  EXPECT_EQ(t.decode(ids, true), "literal special?");
  EXPECT_EQ(t.bos_id(), 2);
  json gen = test::read_json(fixtures() / "models" / "gemma4-e2b-tiny" / "generation_config.json");
  std::vector<int32_t> eos;
  if (gen["eos_token_id"].is_array())
    eos = gen["eos_token_id"].get<std::vector<int32_t>>();
  else
    eos = {gen["eos_token_id"].get<int32_t>()};
  EXPECT_EQ(t.eos_ids(), eos);
}

TEST(TokenizerCli, DebugTokenize) {
  std::filesystem::path vatic = VATIC_BINARY;
  if (!std::filesystem::exists(vatic)) GTEST_SKIP() << vatic << " is not built";
  auto dir = std::filesystem::temp_directory_path() / ("vatic-tok-cli-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  json index = test::read_json(fixtures() / "models" / "index.json");
  json texts = json::array();
  for (const auto& c : index["tokenizers"]["gemma4-e2b-tiny"]) texts.push_back(c["text"]);
  std::ofstream(dir / "texts.json") << texts.dump();
  std::string cmd = vatic.string() + " debug tokenize " + (fixtures() / "models" / "gemma4-e2b-tiny").string() +
                    " --texts " + (dir / "texts.json").string() + " > " + (dir / "out.json").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  json out = test::read_json(dir / "out.json");
  ASSERT_EQ(out.size(), texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(out[i]["ids_with_specials"], index["tokenizers"]["gemma4-e2b-tiny"][i]["ids"]);
    EXPECT_EQ(out[i]["decoded"], texts[i]);
  }
  std::string bad = vatic.string() + " debug tokenize " + (dir / "missing.json").string() + " --texts " +
                    (dir / "texts.json").string() + " 2> " + (dir / "err.txt").string();
  EXPECT_NE(std::system(bad.c_str()), 0);
  std::ifstream err(dir / "err.txt");
  std::string line;
  std::getline(err, line);
  EXPECT_EQ(line.rfind("Error: ", 0), 0u) << line;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vatic
