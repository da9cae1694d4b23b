// Speculative decoding with the Gemma 4 assistant drafters against the transformers fixtures: drafter rounds
// (drafted step by step and chained), first-round draft logits, and exact equality of speculative and plain greedy
// output at every depth.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/generator.h"
#include "formats/model_source.h"
#include "models/fixture_util.h"
#include "models/loader.h"
#include "test_device.h"

namespace vatic {
namespace {

using namespace vatic::testing;

struct Pair {
  std::unique_ptr<LanguageModel> target;
  std::unique_ptr<Drafter> drafter;
};

Pair load_pair(const std::string& assistant) {
  const std::string target = fixture_index()["models"][assistant]["target"].get<std::string>();
  Pair p;
  p.target = load_language_model(ModelSource::from_directory(model_dir(target)), test_device());
  ModelSource ds = ModelSource::from_directory(model_dir(assistant));
  p.drafter = load_drafter(*p.target, &ds);
  return p;
}

std::vector<int32_t> greedy_drafts(Pair& p, const std::vector<int32_t>& context, int32_t last, int steps,
                                   std::vector<Tensor>* logits = nullptr, Tensor* hidden = nullptr) {
  auto st = p.target->new_state();
  ForwardResult r = p.target->forward(*st, context, 1);
  if (hidden) *hidden = r.hidden;
  std::vector<int32_t> out;
  auto l = p.drafter->draft(*st, last, r.hidden, steps, [&](const Tensor& lg) {
    auto v = ops::to_vector(lg);
    out.push_back(argmax(v.data(), static_cast<int64_t>(v.size())));
    return out.back();
  });
  if (logits) *logits = l;
  return out;
}

std::vector<int32_t> generate(Pair& p, const std::vector<int32_t>& prompt, int max_tokens, int depth,
                              GenerateStats* stats = nullptr, bool speculative = true) {
  return decode(*p.target, speculative ? p.drafter.get() : nullptr, prompt, max_tokens, depth, stats, 6);
}

class AssistantFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(AssistantFixture, DrafterRoundsMatchReference) {
  Pair p = load_pair(GetParam());
  const auto& cases = fixture_index()["models"][GetParam()]["cases"];
  int checked = 0;
  for (size_t c = 0; c < cases.size(); c++) {
    auto seq = ints(cases[c]["prompt"]);
    auto greedy = ints(cases[c]["greedy"]);
    seq.insert(seq.end(), greedy.begin(), greedy.end());
    for (const auto& round : cases[c]["rounds"]) {
      const size_t L = round["context_len"].get<size_t>();
      std::vector<int32_t> ctx(seq.begin(), seq.begin() + L - 1);
      auto drafts = greedy_drafts(p, ctx, seq[L - 1], 4);
      EXPECT_EQ(drafts, ints(round["drafts"])) << "case " << c << " context_len " << L;
      // The same drafts chained where the drafter runs (on a GPU: one device graph, argmax to next step there).
      auto st = p.target->new_state();
      ForwardResult r = p.target->forward(*st, ctx, 1);
      EXPECT_EQ(p.drafter->draft_greedy(*st, seq[L - 1], r.hidden, 4), ints(round["drafts"]))
          << "chained, case " << c << " context_len " << L;
      checked++;
    }
  }
  EXPECT_GT(checked, 40);
}

TEST_P(AssistantFixture, FirstRoundDraftLogitsAndHidden) {
  Pair p = load_pair(GetParam());
  TensorStore ref(fixtures() / "models" / (GetParam() + ".reference.safetensors"));
  const auto& cases = fixture_index()["models"][GetParam()]["cases"];
  for (size_t c = 0; c < cases.size(); c++) {
    auto prompt = ints(cases[c]["prompt"]);
    auto greedy = ints(cases[c]["greedy"]);
    std::vector<Tensor> logits;
    Tensor hidden;
    greedy_drafts(p, prompt, greedy[0], 4, &logits, &hidden);
    Tensor want_h = ops::to_f32(ref.get("prompt" + std::to_string(c) + ".target_last_hidden"));
    auto got_h = ops::to_vector(hidden);
    EXPECT_LT(rel_error(got_h.data(), want_h.data<float>(), want_h.numel()), 1e-4);
    Tensor want = ops::to_f32(ref.get("prompt" + std::to_string(c) + ".draft_logits"));
    const int64_t V = want.dim(1);
    for (int s = 0; s < 4; s++) {
      auto got = ops::to_vector(logits[s]);
      // Compare the entries the drafter scored (all of them for the plain head; the centroid-selected set
      // otherwise, where the engine puts -inf and transformers a fill value).
      std::vector<float> a, b;
      for (int64_t i = 0; i < V; i++) {
        if (!std::isfinite(got[i])) continue;
        a.push_back(got[i]);
        b.push_back(want.data<float>()[s * V + i]);
      }
      ASSERT_GT(a.size(), 0u);
      EXPECT_LT(rel_error(a.data(), b.data(), static_cast<int64_t>(a.size())), 1e-4) << "case " << c << " step " << s;
    }
  }
}

TEST_P(AssistantFixture, SpeculativeGreedyEqualsReferenceAtEveryDepth) {
  Pair p = load_pair(GetParam());
  const auto& cases = fixture_index()["models"][GetParam()]["cases"];
  for (size_t c = 0; c < cases.size(); c++) {
    auto prompt = ints(cases[c]["prompt"]);
    auto greedy = ints(cases[c]["greedy"]);
    for (int depth = 1; depth <= 6; depth++) {
      GenerateStats s;
      EXPECT_EQ(generate(p, prompt, static_cast<int>(greedy.size()), depth, &s), greedy)
          << "case " << c << " depth " << depth;
      EXPECT_GT(s.rounds, 0);
    }
    EXPECT_EQ(generate(p, prompt, static_cast<int>(greedy.size()), -1), greedy) << "case " << c << " adaptive";
  }
}

TEST_P(AssistantFixture, LongGenerationPastTheSlidingWindow) {
  // Well past 3x the sliding window (8 or 16 in the fixtures): the ring wraps many times during verification.
  Pair p = load_pair(GetParam());
  auto prompt = ints(fixture_index()["models"][GetParam()]["cases"][1]["prompt"]);
  auto plain = generate(p, prompt, 72, 0, nullptr, false);
  ASSERT_EQ(plain.size(), 72u);
  for (int depth : {1, 3, 6, -1}) EXPECT_EQ(generate(p, prompt, 72, depth), plain) << "depth " << depth;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, AssistantFixture,
                         ::testing::Values("gemma4-e2b-tiny-assistant", "gemma4-dense-tiny-assistant"));

}  // namespace
}  // namespace vatic
