// Speculative decoding with a draft model of the target's tokenizer (its own KV cache, following the target
// through observe/rewind): greedy output equals plain greedy at every depth, a target drafting for itself has
// every draft accepted, and sampled output keeps the target's distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/engine.h"
#include "engine/generator.h"
#include "formats/model_source.h"
#include "models/fixture_util.h"
#include "models/loader.h"
#include "models/model_drafter.h"
#include "sample/sampler.h"
#include "test_device.h"

namespace vatic {
namespace {

using namespace vatic::testing;

std::filesystem::path family_dir(const std::string& n) {
  return fixtures() / "families" / n;
}
const json& family_index() {
  static json j = json::parse(read_file(fixtures() / "families" / "index.json"));
  return j;
}
std::unique_ptr<LanguageModel> load(const std::string& n) {
  return load_language_model(ModelSource::from_directory(family_dir(n)), test_device());
}
std::unique_ptr<Drafter> drafter_for(LanguageModel& target, const std::string& n) {
  auto src = ModelSource::from_directory(family_dir(n));
  return load_drafter(target, &src);
}

struct Pair {
  const char* target;
  const char* draft;
};

class DraftModelGreedy : public ::testing::TestWithParam<Pair> {};

TEST_P(DraftModelGreedy, EqualsPlainGreedyAtEveryDepth) {
  auto lm = load(GetParam().target);
  auto drafter = drafter_for(*lm, GetParam().draft);
  ASSERT_TRUE(dynamic_cast<ModelDrafter*>(drafter.get()));
  for (const auto& c : family_index()["models"][GetParam().target]["cases"]) {
    auto prompt = ints(c["prompt"]);
    auto plain = decode(*lm, nullptr, prompt, 40, 0);
    for (int depth : {1, 2, 3, 4, 5, 6, -1}) {
      GenerateStats s;
      auto out = decode(*lm, drafter.get(), prompt, 40, depth, &s, 6);
      EXPECT_EQ(out, plain) << "depth " << depth << " prompt length " << prompt.size();
      EXPECT_GT(s.rounds, 0) << "depth " << depth;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, DraftModelGreedy,
                         ::testing::Values(Pair{"llama3-tiny", "llama-untied-bias-tiny"},
                                           Pair{"qwen3-moe-tiny", "qwen3-tiny"},
                                           Pair{"qwen3-tiny", "qwen3-moe-tiny"}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.target) + "_by_" + info.param.draft;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(DraftModel, ATargetDraftingForItselfHasEveryDraftAccepted) {
  // The same checkpoint as drafter: if its cache follows the target exactly (positions, rewinds after
  // rejected rounds, catching up after plain steps), its greedy drafts are the target's greedy tokens.
  auto lm = load("gemma3-tiny");
  auto drafter = drafter_for(*lm, "gemma3-tiny");
  auto prompt =
      ints(family_index()["models"]["gemma3-tiny"]["cases"][2]["prompt"]);  // longer than the window
  auto plain = decode(*lm, nullptr, prompt, 30, 0);
  for (int depth : {1, 3, 6}) {
    GenerateStats s;
    auto out = decode(*lm, drafter.get(), prompt, 30, depth, &s, 6);
    EXPECT_EQ(out, plain);
    EXPECT_EQ(s.accepted, s.drafted) << "depth " << depth;
    EXPECT_GT(s.drafted, 0);
  }
}

TEST(DraftModel, FollowsTheTargetAcrossRequestsThatReuseAPrefix) {
  auto lm = load("llama3-tiny");
  auto drafter = drafter_for(*lm, "llama-untied-bias-tiny");
  auto self = drafter_for(*lm, "llama3-tiny");
  const auto& cases = family_index()["models"]["llama3-tiny"]["cases"];
  auto p1 = ints(cases[2]["prompt"]);
  std::vector<int32_t> p2(p1.begin(), p1.begin() + 20);
  p2.push_back(7);
  p2.push_back(99);
  for (Drafter* d : {drafter.get(), self.get()}) {
    Generator gen(*lm, d);
    GenerateOptions o;
    o.max_tokens = 16;
    o.draft_depth = 3;
    o.ignore_eos = true;
    auto st = lm->new_state();
    std::vector<int32_t> live;  // what the state holds
    // As the engine does: keep the longest prefix shared with the new prompt (20 tokens between p1 and p2);
    // the generator rewinds the drafter with the target.
    for (const auto* p : {&p1, &p2, &p1}) {
      size_t lcp = 0;
      while (lcp < live.size() && lcp < p->size() && live[lcp] == (*p)[lcp]) lcp++;
      st->rewind(static_cast<int64_t>(lcp));
      std::vector<int32_t> out;
      GenerateStats s = gen.generate(*st, *p, o, [&](const TokenEvent& e) {
        out.push_back(e.token);
        return true;
      });
      EXPECT_EQ(out, decode(*lm, nullptr, *p, 16, 0));
      live = *p;
      live.insert(live.end(), out.begin(), out.end());
      live.resize(static_cast<size_t>(st->length()));
      if (d == self.get()) {
        EXPECT_EQ(s.accepted, s.drafted);
      }
    }
  }
}

TEST(DraftModel, EngineWithPrefixCacheRestoresStaysExact) {
  // The engine restores a prefix the drafter never followed (it went on with another prompt meanwhile): the
  // drafter drafts from what it has and the output stays the plain greedy one.
  ModelSource src = ModelSource::from_directory(family_dir("qwen3-tiny"));
  src.draft = std::make_shared<ModelSource>(ModelSource::from_directory(family_dir("qwen3-tiny")));
  Engine engine(src, test_device());
  ASSERT_TRUE(engine.has_drafter());
  auto lm = load("qwen3-tiny");
  const auto& cases = family_index()["models"]["qwen3-tiny"]["cases"];
  auto a = ints(cases[2]["prompt"]);
  auto b = ints(cases[1]["prompt"]);
  GenerateOptions o;
  o.max_tokens = 12;
  o.draft_depth = 3;
  o.ignore_eos = true;
  auto run = [&](const std::vector<int32_t>& p) {
    std::vector<int32_t> out;
    GenerateStats s = engine.generate(p, o, [&](const TokenEvent& e) {
      out.push_back(e.token);
      return true;
    });
    EXPECT_EQ(out, decode(*lm, nullptr, p, 12, 0)) << "prompt of " << p.size();
    return std::make_pair(out, s);
  };
  auto [out_a, s_a] = run(a);
  run(b);
  // a, what it produced, and one more token: a's snapshot (prompt + 11 produced) is restored from the prefix
  // cache while the drafter followed b.
  std::vector<int32_t> a3 = a;
  a3.insert(a3.end(), out_a.begin(), out_a.end());
  a3.push_back(5);
  auto [out_a3, s_a3] = run(a3);
  EXPECT_EQ(s_a3.prompt_reused, static_cast<int64_t>(a.size()) + 11);
  EXPECT_GT(s_a3.rounds, 0);
  run(b);
}

TEST(DraftModel, VocabularyMismatchIsRefused) {
  auto lm = load("llama3-tiny");
  auto src = ModelSource::from_directory(fixtures() / "models" / "gemma4-dense-tiny");
  // Same vocabulary size (512) loads: the store is where tokenizers are compared. A different size never
  // does.
  auto tmp = std::filesystem::temp_directory_path() / ("vatic-draft-vocab-" + std::to_string(::getpid()));
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  for (const auto& e : std::filesystem::directory_iterator(family_dir("qwen3-tiny")))
    std::filesystem::copy_file(e.path(), tmp / e.path().filename());
  json cfg = json::parse(read_file(tmp / "config.json"));
  cfg["vocab_size"] = 256;
  write_file_atomic(tmp / "config.json", cfg.dump());
  auto bad = ModelSource::from_directory(tmp);
  EXPECT_THROW(load_drafter(*lm, &bad), InvalidInput);
  std::filesystem::remove_all(tmp);
}

// Wilson-Hilferty approximation of the chi-square upper tail.
double chi_square_p(double x, int k) {
  double z = (std::cbrt(x / k) - (1 - 2.0 / (9 * k))) / std::sqrt(2.0 / (9 * k));
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

TEST(DraftModelSampling, OutputFollowsTheTargetDistribution) {
  auto lm = load("llama3-tiny");
  auto drafter = drafter_for(*lm, "llama-untied-bias-tiny");
  const std::vector<int32_t> prompt = {0, 164, 256, 445};
  const int64_t V = lm->info().vocab_size;
  GenerateOptions o;
  // Three tokens: the first drawn directly, the second through one speculative round of depth 1.
  o.max_tokens = 3;
  o.draft_depth = 2;
  o.ignore_eos = true;
  o.sampling.temperature = 1.5f;
  std::map<int32_t, std::vector<float>> cond;
  auto target_dist = [&](int32_t first) -> const std::vector<float>& {
    auto it = cond.find(first);
    if (it != cond.end()) return it->second;
    auto st = lm->new_state();
    std::vector<int32_t> seq = prompt;
    seq.push_back(first);
    auto logits = ops::to_vector(lm->forward(*st, seq, 1).logits);
    Sampler s(o.sampling, V);
    Distribution d = s.distribution(logits.data());
    std::vector<float> p(V, 0.0f);
    for (size_t i = 0; i < d.ids.size(); i++) p[d.ids[i]] = d.probs[i];
    return cond.emplace(first, p).first->second;
  };
  Generator gen(*lm, drafter.get());
  auto st = lm->new_state();
  const int N = 20000;
  std::vector<double> observed(V, 0.0), expected(V, 0.0);
  int64_t rounds = 0, accepted = 0;
  for (int i = 0; i < N; i++) {
    o.sampling.seed = i;
    std::vector<int32_t> out;
    auto s = gen.generate(*st, prompt, o, [&](const TokenEvent& e) {
      out.push_back(e.token);
      return true;
    });
    ASSERT_EQ(out.size(), 3u);
    rounds += s.rounds;
    accepted += s.accepted;
    observed[out[1]] += 1;
    const auto& p = target_dist(out[0]);
    for (int64_t t = 0; t < V; t++) expected[t] += p[t];
  }
  EXPECT_GT(rounds, N / 2);
  EXPECT_GT(accepted, 100);
  EXPECT_LT(accepted, rounds);
  double chi = 0, pooled_o = 0, pooled_e = 0;
  int bins = 0;
  for (int64_t t = 0; t < V; t++) {
    if (expected[t] >= 5) {
      chi += (observed[t] - expected[t]) * (observed[t] - expected[t]) / expected[t];
      bins++;
    } else {
      pooled_o += observed[t];
      pooled_e += expected[t];
    }
  }
  if (pooled_e >= 5) {
    chi += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    bins++;
  }
  ASSERT_GT(bins, 3);
  const double p = chi_square_p(chi, bins - 1);
  EXPECT_GT(p, 0.001) << "chi-square " << chi << " over " << bins << " bins; accepted " << accepted << "/"
                      << rounds;
}

}  // namespace
}  // namespace vatic
