// The adaptive draft depth and the distribution produced by speculative sampling through the real loop.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "engine/generator.h"
#include "formats/model_source.h"
#include "models/fixture_util.h"
#include "models/loader.h"
#include "test_device.h"

namespace vatic {
namespace {

using namespace vatic::testing;

// A drafter that always proposes what the target will choose (its greedy continuation, computed up front).
class OracleDrafter : public Drafter {
 public:
  explicit OracleDrafter(std::vector<int32_t> sequence, int64_t vocab)
      : seq_(std::move(sequence)), vocab_(vocab) {}
  std::vector<Tensor> draft(SequenceState& st, int32_t, const Tensor&, int steps,
                            const std::function<int32_t(const Tensor&)>& choose) override {
    std::vector<Tensor> out;
    for (int j = 0; j < steps; j++) {
      size_t at = static_cast<size_t>(st.length()) + 1 + j;
      std::vector<float> l(vocab_, 0.0f);
      l[at < seq_.size() ? seq_[at] : 0] = 100.0f;
      Tensor t = Tensor::from_floats(l, {1, vocab_});
      out.push_back(t);
      choose(t);
    }
    return out;
  }
  std::string name() const override { return "oracle"; }

 private:
  std::vector<int32_t> seq_;
  int64_t vocab_;
};

// Every round costs one unit of time whatever its depth: on this clock a deeper round pays exactly when its
// drafts are accepted, so the policy's choices do not depend on the load of the machine running the test.
std::function<double()> fake_clock() {
  auto t = std::make_shared<double>(0.0);
  auto calls = std::make_shared<int64_t>(0);
  return [t, calls] { return (*calls)++ % 2 == 0 ? *t : (*t += 1.0); };
}

std::vector<int32_t> run(LanguageModel& lm, Drafter* d, const std::vector<int32_t>& prompt, int n, int depth,
                         GenerateStats* stats) {
  return decode(lm, d, prompt, n, depth, stats, 4, fake_clock());
}

TEST(AdaptiveDepth, FallsToPlainDecodingWhenDraftsDoNotPay) {
  auto lm = load_language_model(ModelSource::from_directory(model_dir("gemma4-e2b-tiny")), test_device());
  auto ds = ModelSource::from_directory(model_dir("gemma4-e2b-tiny-assistant"));
  auto drafter = load_drafter(*lm, &ds);
  auto prompt = ints(fixture_index()["models"]["gemma4-e2b-tiny"]["cases"][0]["prompt"]);
  GenerateStats s;
  run(*lm, drafter.get(), prompt, 80, -1, &s);
  ASSERT_GT(s.depth_trace.size(), 30u);
  // Random-weight drafts are (almost) never accepted: after a short warm-up the depth stays at 0 or 1
  // (an occasional probe one deeper is allowed, but never the maximum).
  int deep = 0;
  for (size_t i = 12; i < s.depth_trace.size(); i++) deep += s.depth_trace[i] > 1;
  EXPECT_LE(deep, 3) << "depth kept drafting deep with useless drafts";
  int tail_zero = 0;
  for (size_t i = s.depth_trace.size() - 10; i < s.depth_trace.size(); i++)
    tail_zero += s.depth_trace[i] == 0;
  EXPECT_GE(tail_zero, 7);
}

TEST(AdaptiveDepth, ClimbsToTheMaximumWhenDraftsAlwaysAgree) {
  auto lm = load_language_model(ModelSource::from_directory(model_dir("gemma4-dense-tiny")), test_device());
  auto prompt = ints(fixture_index()["models"]["gemma4-dense-tiny"]["cases"][1]["prompt"]);
  GenerateStats plain_stats;
  auto plain = run(*lm, nullptr, prompt, 120, 0, &plain_stats);
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), plain.begin(), plain.end());
  OracleDrafter oracle(seq, lm->info().vocab_size);
  GenerateStats s;
  auto out = run(*lm, &oracle, prompt, 120, -1, &s);
  EXPECT_EQ(out, plain);
  ASSERT_GT(s.depth_trace.size(), 5u);
  // The last step is capped by the remaining budget; the rounds before it run at the maximum.
  const std::vector<int> tail(s.depth_trace.end() - 4, s.depth_trace.end() - 1);
  EXPECT_EQ(tail, std::vector<int>({4, 4, 4})) << "depth did not climb to the maximum";
  EXPECT_EQ(s.accepted, s.drafted);
  EXPECT_GT(s.acceptance_length(), 3.0);
}

// The controller's bookkeeping alone, with made-up round times.
TEST(AdaptiveDepth, StartsAtDepthOneAndKeepsSlowProbesFromRaisingCosts) {
  DepthController d(4);
  // Depth 1 first; its first round (after no round at all) only seeds its cost once it is run again.
  EXPECT_EQ(d.next(), 1);
  d.record(1, 0, 0.010);  // position 0 rejected once ...
  EXPECT_EQ(d.next(), 1);
  // ... then accepted twice: its acceptance is the mean of the three samples, shrunk toward an even chance by
  // one pseudo-sample: (2 + 0.5) / 4.
  d.record(1, 1, 0.010);
  d.record(1, 1, 0.010);
  EXPECT_NEAR(d.acceptance(0), 0.625, 1e-12);
  // The cost the controller assumes for depth n (its rate is expected tokens over cost).
  auto cost = [&](int n) { return d.expected_tokens(n) / d.expected_rate(n); };
  EXPECT_DOUBLE_EQ(cost(1), 0.010);
  // Unmeasured: plain decoding is taken to cost what depth 1 does, a deeper depth in proportion to its
  // tokens.
  EXPECT_DOUBLE_EQ(cost(0), 0.010);
  EXPECT_DOUBLE_EQ(cost(2), 0.015);
  // A depth's estimate starts as the minimum of its first two clean rounds (the first round after a change is
  // not clean), so one slow round does not set it.
  d.record(4, 4, 0.020);
  d.record(4, 4, 0.030);
  EXPECT_DOUBLE_EQ(cost(4), 0.030);
  d.record(4, 4, 0.020);
  EXPECT_DOUBLE_EQ(cost(4), 0.020);
  // A slow round right after a change does not raise a cost; the same time in a row does, by at most a
  // quarter of the estimate at the moving average's rate: 20 ms + 0.3 · 5 ms.
  d.record(1, 1, 1.0);
  EXPECT_DOUBLE_EQ(cost(1), 0.010);
  d.record(4, 4, 1.0);
  EXPECT_DOUBLE_EQ(cost(4), 0.020);
  d.record(4, 4, 1.0);
  EXPECT_DOUBLE_EQ(cost(4), 0.0215);
  // A shallower depth is never taken to cost more than a deeper one was measured to.
  d.record(2, 1, 0.050);
  d.record(2, 1, 0.050);
  EXPECT_DOUBLE_EQ(cost(2), 0.0215);
}

// The depths a controller of depth 4 chooses on a made-up machine: in round r a draft at position i is
// accepted with probability accept(r, i), and a round of depth n takes ms(r, n) milliseconds, 5 % noise
// added.
std::vector<int> made_up_trace(unsigned seed, int rounds, const std::function<double(int, int)>& accept,
                               const std::function<double(int, int)>& ms) {
  DepthController d(4);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int> trace;
  for (int round = 0; round < rounds; round++) {
    const int n = d.next();
    trace.push_back(n);
    int accepted = 0;
    while (accepted < n && u(rng) < accept(round, accepted)) accepted++;
    d.record(n, accepted, ms(round, n) * (1.0 + 0.05 * u(rng)) * 1e-3);
  }
  return trace;
}

// Rounds from `from` on that drafted, and all rounds from `from` on, over seeds 1..20.
std::pair<int, int> drafting_from(int from, int rounds, const std::function<double(int, int)>& accept,
                                  const std::function<double(int, int)>& ms) {
  int drafting = 0, counted = 0;
  for (unsigned seed = 1; seed <= 20; seed++) {
    const std::vector<int> trace = made_up_trace(seed, rounds, accept, ms);
    for (size_t i = static_cast<size_t>(from); i < trace.size(); i++, counted++) drafting += trace[i] > 0;
  }
  return {drafting, counted};
}

// A made-up machine where one draft pays and more do not: a round of depth n costs 1 + 0.45 n ms, position 0
// is accepted 75 % of the time and later positions 50 % (depth 1 1.21 tokens a ms, depth 2 1.12, plain 1.0,
// depth 3 0.98), and a reply's first rounds are four times slower. The controller must settle on depth 1.
TEST(AdaptiveDepth, SettlesOnTheMeasuredBestDepth) {
  const std::vector<int> trace = made_up_trace(
      7, 200, [](int, int i) { return i == 0 ? 0.75 : 0.5; },
      [](int round, int n) { return (1.0 + 0.45 * n) * (round < 4 ? 4.0 : 1.0); });
  EXPECT_EQ(trace[0], 1) << "did not start shallow";
  int at_one = 0, deep = 0;
  for (size_t i = 50; i < trace.size(); i++) {
    at_one += trace[i] == 1;
    deep += trace[i] >= 3;
  }
  EXPECT_GE(at_one, 135) << "did not settle on depth 1";
  EXPECT_LE(deep, 5);
}

// A made-up machine where plain decoding is cheap next to a round that drafts (plain 1 ms, a round of depth n
// 1 + 0.6 n ms: one draft pays above an acceptance of 0.6) and the drafts of a reply's first eight rounds are
// rarely accepted (25 %), later ones nearly always (position 0 90 %, later positions 80 %: depth 1 1.19
// tokens a ms, depth 2 1.19, plain 1.0). The early rejections send the controller to plain decoding; its
// probes one deeper, accepted, must bring it back within a short reply, not only after probes grown 64 rounds
// apart.
TEST(AdaptiveDepth, ProbesThatPayBringItBackSoon) {
  const auto [drafting, rounds] = drafting_from(
      64, 128, [](int round, int i) { return round < 8 ? 0.25 : (i == 0 ? 0.9 : 0.8); },
      [](int, int n) { return 1.0 + 0.6 * n; });
  // The second half of the reply drafts in most rounds (backing off after every probe: 43 of 1,280).
  EXPECT_GE(drafting, rounds / 2) << drafting << " of " << rounds << " rounds drafted";
}

// Drafts that are accepted but do not pay: plain 1 ms, a round of depth n 1 + 1.2 n ms, every draft accepted
// 95 % of the time (depth 1 0.89 tokens a ms against plain's 1.0). Once parked at 0, the probes one deeper
// are accepted as the estimate expects, so they must still back off.
TEST(AdaptiveDepth, AcceptedProbesThatDoNotPayStillBackOff) {
  const auto [drafting, rounds] = drafting_from(
      64, 200, [](int, int) { return 0.95; }, [](int, int n) { return 1.0 + 1.2 * n; });
  // Probes 16, 32, 64 rounds apart: a handful in 136 rounds (a probe every 4 rounds would be 34 a seed).
  EXPECT_LE(drafting, rounds / 20) << drafting << " of " << rounds << " rounds drafted";
}

// A made-up machine like a small model on two CPU cores: plain 0.9 ms, a round of depth 1..4 1.15, 1.37, 1.66,
// 1.95 ms, positions accepted 83, 69, 51, 50 % of the time (depth 1 1.59 tokens a ms, depth 2 1.75, depth 3
// 1.62), and a reply's first twelve rounds twice as slow. Plain decoding's cost and a deeper depth's first
// samples are taken in those slow rounds; estimates that stale (above what depth 1 costs later, or above what
// probes measure) once kept the controller at depth 1 or sent it to depth 3.
TEST(AdaptiveDepth, SettlesOnTheBestDepthPastASlowStart) {
  const std::vector<double> ms = {0.9, 1.15, 1.37, 1.66, 1.95}, accept = {0.83, 0.69, 0.51, 0.5};
  int at_two = 0, counted = 0;
  for (unsigned seed = 1; seed <= 20; seed++) {
    const std::vector<int> trace = made_up_trace(
        seed, 60, [&](int, int i) { return accept[static_cast<size_t>(i)]; },
        [&](int round, int n) { return ms[static_cast<size_t>(n)] * (round < 12 ? 2.0 : 1.0); });
    for (size_t i = 30; i < trace.size(); i++, counted++) at_two += trace[i] == 2;
  }
  // Stale estimates: 222 of 600 rounds at depth 2.
  EXPECT_GE(at_two, counted * 2 / 3) << at_two << " of " << counted << " rounds at depth 2";
}

TEST(AdaptiveDepth, RecoversAfterDraftsStartToPay) {
  // First useless drafts (depth falls), then the oracle on the same controller: depth climbs back.
  auto lm = load_language_model(ModelSource::from_directory(model_dir("gemma4-dense-tiny")), test_device());
  auto ds = ModelSource::from_directory(model_dir("gemma4-dense-tiny-assistant"));
  auto random_drafter = load_drafter(*lm, &ds);
  auto prompt = ints(fixture_index()["models"]["gemma4-dense-tiny"]["cases"][1]["prompt"]);
  DepthController depth(4);
  auto go = [&](Drafter* d, int n) {
    Generator gen(*lm, d, &depth);
    gen.set_clock(fake_clock());
    GenerateOptions o;
    o.max_tokens = n;
    o.ignore_eos = true;
    auto st = lm->new_state();
    std::vector<int32_t> out;
    auto s = gen.generate(*st, prompt, o, [&](const TokenEvent& e) {
      out.push_back(e.token);
      return true;
    });
    return std::make_pair(out, s);
  };
  auto [plain, s0] = go(random_drafter.get(), 150);
  EXPECT_LE(s0.depth_trace[s0.depth_trace.size() - 2], 1);
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), plain.begin(), plain.end());
  OracleDrafter oracle(seq, lm->info().vocab_size);
  auto [out, s1] = go(&oracle, 150);
  EXPECT_EQ(out, plain);
  EXPECT_GE(s1.depth_trace[s1.depth_trace.size() - 2], 3) << "depth did not recover";
}

// Wilson-Hilferty approximation of the chi-square upper tail.
double chi_square_p(double x, int k) {
  double z = (std::cbrt(x / k) - (1 - 2.0 / (9 * k))) / std::sqrt(2.0 / (9 * k));
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

TEST(SpeculativeSampling, OutputFollowsTheTargetDistributionThroughTheRealLoop) {
  auto lm = load_language_model(ModelSource::from_directory(model_dir("gemma4-dense-tiny")), test_device());
  auto ds = ModelSource::from_directory(model_dir("gemma4-dense-tiny-assistant"));
  auto drafter = load_drafter(*lm, &ds);
  const std::vector<int32_t> prompt = {2, 300, 17, 45};
  const int64_t V = lm->info().vocab_size;
  GenerateOptions o;
  // Three tokens: the first is drawn directly, the second goes through one speculative round of depth 1
  // (depth is capped so the round's extra token stays within the budget).
  o.max_tokens = 3;
  o.draft_depth = 2;
  o.ignore_eos = true;
  // A high temperature over the whole vocabulary makes the random drafter's proposals overlap the target's
  // distribution, so both acceptance and rejection (residual) paths are taken many times.
  o.sampling.temperature = 2.0f;
  // p(second | prompt, first) for every first token, computed directly.
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
  // Both paths of the acceptance test must have been exercised.
  EXPECT_GT(rounds, N / 2);
  EXPECT_GT(accepted, 100);
  EXPECT_LT(accepted, rounds);
  double chi = 0;
  int bins = 0;
  double pooled_o = 0, pooled_e = 0;
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
  EXPECT_GT(p, 0.001) << "chi-square " << chi << " over " << bins << " bins";
}

}  // namespace
}  // namespace vatic
