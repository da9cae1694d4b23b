// The bundled demo pair (models/demo) against transformers: tokenization of the reference prompts, greedy
// continuations, and speculative decoding with its trained drafter reproducing them token for token.
#include <gtest/gtest.h>

#include "formats/model_source.h"
#include "models/fixture_util.h"
#include "models/loader.h"
#include "tokenizer/tokenizer.h"
#include "test_device.h"

namespace vatic {
namespace {

using namespace vatic::testing;

std::filesystem::path demo_dir(const std::string& name) {
  return std::filesystem::path(VATIC_SOURCE_DIR) / "models" / "demo" / name;
}

const json& references() {
  static json j = json::parse(read_file(fixtures() / "demo" / "references.json"));
  return j;
}

TEST(DemoModel, TokenizerMatchesTheReferencePrompts) {
  Tokenizer tok = Tokenizer::load(demo_dir("gemma4-demo"));
  for (const auto& c : references()["cases"])
    EXPECT_EQ(tok.encode(c["prompt_text"].get<std::string>(), true), ints(c["prompt_ids"]));
}

TEST(DemoModel, GreedyAndSpeculativeContinuationsMatchTransformers) {
  auto lm = load_language_model(ModelSource::from_directory(demo_dir("gemma4-demo")), test_device());
  auto ds = ModelSource::from_directory(demo_dir("gemma4-demo-assistant"));
  auto drafter = load_drafter(*lm, &ds);
  int64_t rounds = 0, accepted = 0;
  for (const auto& c : references()["cases"]) {
    auto prompt = ints(c["prompt_ids"]);
    auto want = ints(c["greedy"]);
    GenerateStats plain_stats, spec_stats;
    EXPECT_EQ(decode(*lm, nullptr, prompt, static_cast<int>(want.size()), 0, &plain_stats), want);
    EXPECT_EQ(decode(*lm, drafter.get(), prompt, static_cast<int>(want.size()), 4, &spec_stats), want);
    rounds += spec_stats.rounds;
    accepted += spec_stats.accepted;
  }
  // A trained drafter is accepted far more often than a random one would be (those accept ~nothing).
  ASSERT_GT(rounds, 0);
  EXPECT_GT(1.0 + double(accepted) / double(rounds), 2.0);
}

}  // namespace
}  // namespace vatic
