// Constrained decoding through the real generation loop with the bundled demo pair (models/demo): the output
// follows the schema, greedy and sampled, with and without speculation, and greedy constrained output with
// speculation equals greedy constrained output without it.
#include <gtest/gtest.h>

#include "engine/generator.h"
#include "formats/model_source.h"
#include "grammar/json_schema.h"
#include "models/fixture_util.h"
#include "models/loader.h"
#include "tokenizer/tokenizer.h"
#include "test_device.h"

namespace vatic {
namespace {

namespace fs = std::filesystem;

fs::path demo(const char* name) {
  return fs::path(VATIC_SOURCE_DIR) / "models" / "demo" / name;
}

struct Demo {
  std::unique_ptr<LanguageModel> lm;
  std::unique_ptr<Drafter> drafter;
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<const grammar::TokenVocab> vocab;
};

Demo& demo_pair() {
  static Demo d = [] {
    Demo x;
    x.lm = load_language_model(ModelSource::from_directory(demo("gemma4-demo")), test_device());
    auto ds = ModelSource::from_directory(demo("gemma4-demo-assistant"));
    x.drafter = load_drafter(*x.lm, &ds);
    x.tok = std::make_unique<Tokenizer>(Tokenizer::load(demo("gemma4-demo")));
    x.vocab = std::make_shared<grammar::TokenVocab>(
        grammar::TokenVocab::from_tokenizer(*x.tok, x.lm->info().vocab_size));
    return x;
  }();
  return d;
}

std::shared_ptr<const grammar::CompiledGrammar> compile(const std::string& schema) {
  grammar::Grammar g = schema == "json" ? grammar::json_object_grammar()
                                        : grammar::json_schema_grammar(ordered_json::parse(schema));
  auto cg = std::make_shared<grammar::CompiledGrammar>(grammar::compile(g), demo_pair().vocab);
  return cg;
}

struct Out {
  std::vector<int32_t> ids;
  std::string text;
  GenerateStats stats;
};

Out generate(const std::shared_ptr<const grammar::CompiledGrammar>& g, bool use_drafter, int depth,
             float temperature, int64_t seed, int max_tokens = 200) {
  Demo& d = demo_pair();
  Generator gen(*d.lm, use_drafter ? d.drafter.get() : nullptr);
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.draft_depth = depth;
  o.grammar = g;
  o.sampling.temperature = temperature;
  o.sampling.seed = seed;
  if (temperature > 0) o.sampling.top_k = 40;
  auto st = d.lm->new_state();
  Out out;
  out.stats = gen.generate(*st, d.tok->encode("Elizabeth wrote down the facts as JSON:", true), o,
                           [&](const TokenEvent& e) {
                             out.ids.push_back(e.token);
                             return true;
                           });
  out.text = d.tok->decode(out.ids);
  return out;
}

// The schemas bound every string, so the demo model (trained on Jane Austen, not on JSON) always finishes.
const char* kPerson = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":12},
  "age":{"type":"integer","minimum":16,"maximum":60},
  "married":{"type":"boolean"},
  "mood":{"enum":["happy","vexed","indifferent"]},
  "sisters":{"type":"array","items":{"type":"string","minLength":1,"maxLength":8},"minItems":1,"maxItems":3}},
  "required":["name","age","married","mood","sisters"],"additionalProperties":false})";

void expect_person(const std::string& text) {
  SCOPED_TRACE(text);
  ordered_json j;
  ASSERT_NO_THROW(j = ordered_json::parse(text));
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 5u);
  ASSERT_TRUE(j["name"].is_string());
  EXPECT_LE(j["name"].get<std::string>().size(), 12u * 4);
  ASSERT_TRUE(j["age"].is_number_integer());
  EXPECT_GE(j["age"].get<int>(), 16);
  EXPECT_LE(j["age"].get<int>(), 60);
  EXPECT_TRUE(j["married"].is_boolean());
  ASSERT_TRUE(j["mood"].is_string());
  EXPECT_TRUE(j["mood"] == "happy" || j["mood"] == "vexed" || j["mood"] == "indifferent");
  ASSERT_TRUE(j["sisters"].is_array());
  EXPECT_GE(j["sisters"].size(), 1u);
  EXPECT_LE(j["sisters"].size(), 3u);
}

TEST(GrammarGeneration, GreedyOutputFollowsTheSchema) {
  auto g = compile(kPerson);
  Out o = generate(g, false, 0, 0.0f, 1, 600);
  EXPECT_EQ(o.stats.done_reason, "stop");
  expect_person(o.text);
}

TEST(GrammarGeneration, SpeculativeGreedyEqualsPlainGreedy) {
  for (const char* schema : {kPerson, "json"}) {
    SCOPED_TRACE(schema);
    auto g = compile(schema);
    Out plain = generate(g, false, 0, 0.0f, 1, 80);
    for (int depth : {2, -1}) {
      Out spec = generate(g, true, depth, 0.0f, 1, 80);
      EXPECT_EQ(spec.ids, plain.ids) << "depth " << depth << "\nplain: " << plain.text
                                     << "\nspec:  " << spec.text;
      if (depth > 0) {
        EXPECT_GT(spec.stats.rounds, 0);
      }
    }
  }
}

TEST(GrammarGeneration, SampledOutputFollowsTheSchemaWithAndWithoutSpeculation) {
  auto g = compile(kPerson);
  for (int64_t seed = 1; seed <= 3; seed++) {
    for (bool spec : {false, true}) {
      Out o = generate(g, spec, spec ? 3 : 0, 1.0f, seed, 600);
      EXPECT_EQ(o.stats.done_reason, "stop") << o.text;
      expect_person(o.text);
    }
  }
}

TEST(GrammarGeneration, JsonModeGivesAnObject) {
  auto g = compile("json");
  Out o = generate(g, true, -1, 0.7f, 5, 400);
  if (o.stats.done_reason == "stop") {
    ordered_json j;
    ASSERT_NO_THROW(j = ordered_json::parse(o.text)) << o.text;
    EXPECT_TRUE(j.is_object());
  } else {
    // Out of tokens in the middle of a string: what came out is still a prefix of an object.
    EXPECT_EQ(o.text.substr(0, 1), "{") << o.text;
  }
}

}  // namespace
}  // namespace vatic
