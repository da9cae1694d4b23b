// The sampler: each option's effect, validation, seeded reproducibility, and the exactness of speculative
// (rejection) sampling.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "sample/sampler.h"
#include "util/error.h"

namespace vatic {
namespace {

std::map<int32_t, float> as_map(const Distribution& d) {
  std::map<int32_t, float> m;
  for (size_t i = 0; i < d.ids.size(); i++) m[d.ids[i]] = d.probs[i];
  return m;
}

SamplerOptions sampled(float t = 1.0f) {
  SamplerOptions o;
  o.temperature = t;
  return o;
}

TEST(Sampler, GreedyPicksTheArgmax) {
  Sampler s(SamplerOptions{}, 5);
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  auto d = s.distribution(l.data());
  ASSERT_EQ(d.ids.size(), 1u);
  EXPECT_EQ(d.ids[0], 1);
  EXPECT_EQ(s.sample(d), 1);
}

TEST(Sampler, TemperatureScalesTheSoftmax) {
  std::vector<float> l = {0.0f, std::log(3.0f)};
  auto d1 = as_map(Sampler(sampled(1.0f), 2).distribution(l.data()));
  EXPECT_NEAR(d1[1], 0.75f, 1e-6);
  auto d2 = as_map(Sampler(sampled(2.0f), 2).distribution(l.data()));
  EXPECT_NEAR(d2[1], std::sqrt(3.0f) / (1 + std::sqrt(3.0f)), 1e-6);
}

TEST(Sampler, TopKKeepsTheKBest) {
  auto o = sampled();
  o.top_k = 2;
  std::vector<float> l = {1.0f, 3.0f, 2.0f, 0.0f};
  auto d = as_map(Sampler(o, 4).distribution(l.data()));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d.count(1) && d.count(2));
  EXPECT_NEAR(d[1], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
}

TEST(Sampler, TopPKeepsTheCrossingToken) {
  auto o = sampled();
  o.top_p = 0.6f;
  // probabilities 0.5, 0.3, 0.2: cumulative before token = 0, 0.5, 0.8 -> keep the first two
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  auto d = as_map(Sampler(o, 3).distribution(l.data()));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d[0], 0.625f, 1e-6);
  EXPECT_NEAR(d[1], 0.375f, 1e-6);
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheBest) {
  auto o = sampled();
  o.min_p = 0.5f;
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  auto d = as_map(Sampler(o, 3).distribution(l.data()));
  EXPECT_EQ(d.size(), 2u);  // 0.2 < 0.5 * 0.5
  EXPECT_FALSE(d.count(2));
}

TEST(Sampler, RepeatPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplerOptions o;
  o.repeat_penalty = 2.0f;
  Sampler s(o, 3);
  s.set_history({0, 1});
  // Token 0 (logit 3 -> 1.5) loses to token 2 (logit 2); token 1 (-1 -> -2) stays last.
  std::vector<float> l = {3.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.distribution(l.data()).ids[0], 2);
  auto t = sampled();
  t.repeat_penalty = 2.0f;
  Sampler s2(t, 3);
  s2.set_history({0, 1});
  auto d = as_map(s2.distribution(l.data()));
  double z = std::exp(1.5) + std::exp(-2.0) + std::exp(2.0);
  EXPECT_NEAR(d[1], std::exp(-2.0) / z, 1e-6);
}

TEST(Sampler, RepeatLastNBoundsTheHistory) {
  SamplerOptions o;
  o.repeat_penalty = 10.0f;
  o.repeat_last_n = 1;
  Sampler s(o, 3);
  s.set_history({0, 1});  // only token 1 is within the window
  std::vector<float> l = {3.0f, 2.9f, 0.0f};
  EXPECT_EQ(s.distribution(l.data()).ids[0], 0);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  SamplerOptions o;
  o.presence_penalty = 0.5f;
  Sampler s(o, 2);
  s.set_history({0});
  std::vector<float> l = {1.0f, 0.6f};
  EXPECT_EQ(s.distribution(l.data()).ids[0], 1);  // 1.0 - 0.5 < 0.6
  SamplerOptions f;
  f.frequency_penalty = 0.3f;
  Sampler s2(f, 2);
  s2.set_history({0, 0});
  std::vector<float> l2 = {1.0f, 0.5f};
  EXPECT_EQ(s2.distribution(l2.data()).ids[0], 1);  // 1.0 - 0.6 < 0.5
  Sampler s3(f, 2);
  s3.set_history({0});
  EXPECT_EQ(s3.distribution(l2.data()).ids[0], 0);  // 1.0 - 0.3 > 0.5
}

TEST(Sampler, PenaltiesSeeTheDraftChain) {
  SamplerOptions o;
  o.presence_penalty = 1.0f;
  Sampler s(o, 2);
  std::vector<float> l = {1.0f, 0.5f};
  EXPECT_EQ(s.distribution(l.data()).ids[0], 0);
  EXPECT_EQ(s.distribution(l.data(), {0}).ids[0], 1);
}

TEST(Sampler, SameSeedSameDrawsDifferentSeedDifferentDraws) {
  auto o = sampled();
  o.seed = 42;
  std::vector<float> l(50);
  for (int i = 0; i < 50; i++) l[i] = std::sin(float(i));
  auto draws = [&](int64_t seed) {
    auto oo = o;
    oo.seed = seed;
    Sampler s(oo, 50);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; i++) out.push_back(s.sample(s.distribution(l.data())));
    return out;
  };
  EXPECT_EQ(draws(42), draws(42));
  EXPECT_NE(draws(42), draws(43));
}

TEST(Sampler, SeededSamplersDrawTheSameStream) {
  auto o = sampled();
  o.seed = 7;
  Sampler a(o, 2), b(o, 2);
  for (int i = 0; i < 8; i++) EXPECT_EQ(a.uniform(), b.uniform());
  double u = Sampler(o, 2).uniform();
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
}

TEST(Sampler, InvalidOptionsAreRejectedWithAClearMessage) {
  auto expect_bad = [](SamplerOptions o, const std::string& word) {
    try {
      o.validate();
      FAIL() << "accepted " << word;
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  SamplerOptions o;
  o.temperature = -1;
  expect_bad(o, "temperature");
  o = {};
  o.top_p = 0;
  expect_bad(o, "top_p");
  o = {};
  o.top_p = 1.5f;
  expect_bad(o, "top_p");
  o = {};
  o.min_p = 2;
  expect_bad(o, "min_p");
  o = {};
  o.top_k = -3;
  expect_bad(o, "top_k");
  o = {};
  o.top_logprobs = 21;
  expect_bad(o, "top_logprobs");
  o = {};
  o.repeat_last_n = -2;
  expect_bad(o, "repeat_last_n");
}

TEST(Sampler, Logprobs) {
  std::vector<float> l = {0.0f, std::log(3.0f)};
  EXPECT_NEAR(Sampler::logprob(l.data(), 2, 1).logprob, std::log(0.75f), 1e-6);
  auto top = Sampler::top_logprobs(l.data(), 2, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_NEAR(top[1].logprob, std::log(0.25f), 1e-6);
}

// Exact: P(output = x) = q(x)·min(1, p(x)/q(x)) + P(reject)·residual(x) must equal p(x).
TEST(SpeculativeSampling, AcceptancePlusResidualIsExactlyTheTarget) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  for (int trial = 0; trial < 200; trial++) {
    const int V = 2 + trial % 7;
    Distribution p, q;
    double sp = 0, sq = 0;
    std::vector<double> pv(V), qv(V);
    for (int i = 0; i < V; i++) {
      pv[i] = (trial % 3 == 0 && i == 0) ? 0.0 : U(rng);  // some zero-probability tokens
      qv[i] = (trial % 4 == 1 && i == V - 1) ? 0.0 : U(rng);
      sp += pv[i];
      sq += qv[i];
    }
    for (int i = 0; i < V; i++) {
      if (pv[i] > 0) p.ids.push_back(i), p.probs.push_back(float(pv[i] / sp));
      if (qv[i] > 0) q.ids.push_back(i), q.probs.push_back(float(qv[i] / sq));
    }
    // Acceptance probability of each draft, enumerated (u is uniform: P(u < a) = a).
    double reject = 0;
    std::vector<double> out(V, 0.0);
    for (size_t j = 0; j < q.ids.size(); j++) {
      int32_t d = q.ids[j];
      double a = std::min(1.0, double(p.prob_of(d)) / q.probs[j]);
      // accept_draft agrees with the formula at the boundary
      EXPECT_EQ(accept_draft(p, q, d, std::max(0.0, a - 1e-9)), a > 0);
      EXPECT_FALSE(accept_draft(p, q, d, std::min(1.0 - 1e-12, a + 1e-7)) && a < 1.0 - 1e-6);
      out[d] += q.probs[j] * a;
      reject += q.probs[j] * (1 - a);
    }
    Distribution r = residual(p, q);
    for (size_t j = 0; j < r.ids.size(); j++) out[r.ids[j]] += reject * r.probs[j];
    for (int i = 0; i < V; i++) EXPECT_NEAR(out[i], p.prob_of(i), 1e-6) << "trial " << trial << " token " << i;
  }
}

}  // namespace
}  // namespace vatic

namespace vatic {
namespace {

// An allowed-token mask (a grammar's) renormalises the distribution over the allowed tokens: each allowed token
// keeps its probability relative to the others, and greedy picks the best allowed token, never a masked one.
TEST(SamplerMask, RenormalisesOverAllowedTokens) {
  const int64_t V = 130;  // more than two mask words, the last one partial
  std::vector<float> logits(V);
  std::mt19937 rng(5);
  for (auto& l : logits) l = std::normal_distribution<float>(0, 2)(rng);
  std::vector<uint64_t> mask(3, 0);
  std::vector<int32_t> allowed = {3, 17, 64, 65, 99, 127, 129};
  for (int32_t t : allowed) mask[t >> 6] |= uint64_t(1) << (t & 63);
  SamplerOptions o;
  o.temperature = 0.7f;
  Sampler s(o, V);
  Distribution d = s.distribution(logits.data(), {}, mask.data());
  double z = 0;
  for (int32_t t : allowed) z += std::exp(logits[t] / 0.7);
  auto m = as_map(d);
  ASSERT_EQ(m.size(), allowed.size());
  for (int32_t t : allowed) EXPECT_NEAR(m[t], std::exp(logits[t] / 0.7) / z, 1e-5) << t;

  SamplerOptions g;
  Sampler greedy(g, V);
  logits[argmax(logits.data(), V)] = 100.0f;  // the overall best is outside the mask unless it is allowed
  int32_t best = allowed[0];
  for (int32_t t : allowed)
    if (logits[t] > logits[best]) best = t;
  Distribution gd = greedy.distribution(logits.data(), {}, mask.data());
  ASSERT_EQ(gd.ids.size(), 1u);
  EXPECT_EQ(gd.ids[0], best);
}

TEST(SamplerMask, TopKAppliesAfterTheMask) {
  const int64_t V = 10;
  std::vector<float> logits = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  std::vector<uint64_t> mask = {(1u << 5) | (1u << 7) | (1u << 9)};
  SamplerOptions o;
  o.temperature = 1.0f;
  o.top_k = 2;
  Sampler s(o, V);
  auto m = as_map(s.distribution(logits.data(), {}, mask.data()));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_TRUE(m.count(5) && m.count(7));
  EXPECT_NEAR(m[5], 1.0 / (1.0 + std::exp(-2.0)), 1e-5);
}

}  // namespace
}  // namespace vatic
