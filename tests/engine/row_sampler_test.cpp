// The candidates path of sampling (engine/row_sampler.h) against the full-row sampler: every option
// combination gives the same distribution (ids in the same order, probabilities within float rounding) and
// the same seeded draws, the fallback to the whole row happens exactly when the candidates cannot prove the
// result, and the generation loop (plain steps, drafts, verification, grammar, logprobs) emits the same
// tokens on both paths. The rows live on test_device() (the test environment skips the binary when it is
// absent), so on a GPU this checks the device's candidates against the host sampler.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/generator.h"
#include "engine/row_sampler.h"
#include "formats/model_source.h"
#include "grammar/json_schema.h"
#include "models/loader.h"
#include "ops/ops.h"
#include "test_device.h"
#include "tokenizer/tokenizer.h"

namespace vatic {
namespace {

namespace fs = std::filesystem;

void expect_same(const Distribution& got, const Distribution& want, const std::string& what) {
  ASSERT_EQ(got.ids, want.ids) << what;
  for (size_t i = 0; i < want.ids.size(); i++)
    ASSERT_NEAR(got.probs[i], want.probs[i], 2e-5) << what << " at " << i;
}

struct Case {
  float temperature;
  int top_k;
  float top_p, min_p;
  bool penalties, mask;
  int candidates;
  std::string str() const {
    return fmt::format("T={} top_k={} top_p={} min_p={} penalties={} mask={} candidates={}", temperature,
                       top_k, top_p, min_p, penalties, mask, candidates);
  }
};

TEST(RowSampler, CandidatesGiveTheFullRowDistribution) {
  const Device dev = test_device();
  const int64_t V = 5003;  // not a multiple of 64: the mask's last word is partial
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.5f);
  std::vector<float> host(3 * V);
  for (auto& x : host) x = nd(rng);
  for (int64_t i = 0; i < 40; i++) host[V + i * 11] = host[V + i * 11 + 1];  // ties in row 1
  for (int64_t i = 0; i < V; i += 5) host[2 * V + i] = -INFINITY;            // masked-out columns in row 2
  const Tensor logits = ops::to_device(Tensor::from_floats(host, {3, V}), dev);
  std::vector<int32_t> history, extra;
  for (int i = 0; i < 80; i++) history.push_back(static_cast<int32_t>(rng() % 200));  // repeats: counts > 1
  for (int i = 0; i < 3; i++) extra.push_back(static_cast<int32_t>(rng() % 200));
  std::vector<uint64_t> mask((V + 63) / 64);
  for (auto& w : mask) w = (uint64_t(rng()) << 32 | rng()) & (uint64_t(rng()) << 32 | rng());  // ~25% allowed

  int checked = 0, fallbacks = 0, candidate_rows = 0;
  for (float T : {0.0f, 0.3f, 0.8f, 1.5f})
    for (int top_k : {0, 1, 7, 40, 300})
      for (float top_p : {1.0f, 0.9f, 0.5f})
        for (float min_p : {0.0f, 0.05f, 0.3f})
          for (bool penalties : {false, true})
            for (bool masked : {false, true})
              for (int cands : {16, 256}) {
                if (T == 0 && (top_k || top_p < 1 || min_p > 0 || cands != 16)) continue;
                const Case c{T, top_k, top_p, min_p, penalties, masked, cands};
                SamplerOptions o;
                o.temperature = T;
                o.top_k = top_k;
                o.top_p = top_p;
                o.min_p = min_p;
                o.seed = 11;
                if (penalties) {
                  o.repeat_penalty = 1.3f;
                  o.presence_penalty = 0.4f;
                  o.frequency_penalty = 0.15f;
                  o.repeat_last_n = 64;
                }
                Sampler full(o, V), cand(o, V);
                full.set_history(history);
                cand.set_history(history);
                RowSampler rows(cand, V, SamplingPath::Candidates, cands);
                for (int64_t r = 0; r < 3; r++) {
                  SCOPED_TRACE(c.str() + fmt::format(" row {}", r));
                  const uint64_t* m = masked ? mask.data() : nullptr;
                  const Distribution want = full.distribution(host.data() + r * V, extra, m);
                  const int64_t before = rows.counters().fallbacks;
                  const int64_t retries_before = rows.counters().wide_retries;
                  const Distribution got = rows.distribution(logits, r, extra, m);
                  expect_same(got, want, "distribution");
                  const bool fell_back = rows.counters().fallbacks > before;
                  // The only rows that must be read whole: no top_k, and the result holds more than the
                  // candidates even at the cap (one of which is the witness); beyond the first candidates they
                  // are taken again at the cap.
                  const int64_t n = static_cast<int64_t>(want.ids.size());
                  const bool must = T > 0 && top_k == 0 && n > RowSampler::kMaxTopK - 1;
                  EXPECT_EQ(fell_back, must) << n << " tokens in the distribution";
                  EXPECT_EQ(rows.counters().wide_retries > retries_before, T > 0 && top_k == 0 && n > cands);
                  // One seed draws one token from either.
                  for (int i = 0; i < 4; i++) ASSERT_EQ(full.sample(want), cand.sample(got));
                  checked++;
                  fallbacks += fell_back;
                }
                candidate_rows += static_cast<int>(rows.counters().candidate_rows);
              }
  // Both outcomes were exercised many times.
  EXPECT_GT(fallbacks, 20);
  EXPECT_GT(candidate_rows, checked / 2);
}

TEST(RowSampler, RowsWithNothingFiniteToDrawFallBack) {
  const Device dev = test_device();
  const int64_t V = 300;
  std::vector<float> host(V, -INFINITY);
  host[7] = 1.0f;
  host[250] = 2.0f;
  const Tensor logits = ops::to_device(Tensor::from_floats(host, {1, V}), dev);
  std::vector<uint64_t> mask((V + 63) / 64, 0);
  mask[0] = (1ull << 9) | (1ull << 12);  // only -inf tokens allowed: the lowest allowed id is the choice
  for (float T : {0.0f, 1.0f}) {
    SamplerOptions o;
    o.temperature = T;
    Sampler s(o, V);
    RowSampler rows(s, V, SamplingPath::Candidates, 16);
    expect_same(rows.distribution(logits, 0, {}, mask.data()), s.distribution(host.data(), {}, mask.data()),
                "mask");
    EXPECT_EQ(rows.counters().fallbacks, 1);
    // Without the mask the two finite tokens are the whole support: the candidates hold it.
    expect_same(rows.distribution(logits, 0), s.distribution(host.data()), "sparse row");
    EXPECT_EQ(rows.counters().fallbacks, 1);
  }
  SamplerOptions o;
  o.temperature = 1.0f;
  o.top_k = RowSampler::kMaxTopK + 1;
  std::vector<float> dense(V);
  for (int64_t i = 0; i < V; i++) dense[i] = std::sin(float(i));
  Sampler s(o, V);
  RowSampler rows(s, V, SamplingPath::Candidates);
  expect_same(rows.distribution(ops::to_device(Tensor::from_floats(dense, {V}), dev), 0),
              s.distribution(dense.data()), "top_k above the cap");
  EXPECT_EQ(rows.counters().full_rows, 1);
}

// Sampling by temperature alone: the distribution stays implicit on the device, and every draw, probability,
// acceptance test and residual draw is the one the host sampler makes from the whole row (up to rounding at a
// boundary of the cumulative sums).
TEST(RowSampler, SamplingByTemperatureAloneStaysImplicit) {
  const Device dev = test_device();
  // One block and a tail only; whole blocks; blocks and a tail.
  for (int64_t V : {int64_t(300), 2 * RowSampler::kBlock, int64_t(5003)}) {
    std::mt19937 rng(static_cast<unsigned>(V));
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> host(2 * V);
    for (auto& x : host) x = nd(rng);
    for (int64_t i = 0; i < V; i += 7) host[i] = -INFINITY;  // tokens that cannot be drawn in row 0
    const Tensor logits = ops::to_device(Tensor::from_floats(host, {2, V}), dev);
    std::vector<int32_t> history;
    for (int i = 0; i < 60; i++) history.push_back(static_cast<int32_t>(rng() % 100));
    std::vector<uint64_t> mask((V + 63) / 64);
    for (auto& w : mask) w = (uint64_t(rng()) << 32 | rng()) | (uint64_t(rng()) << 32 | rng());  // ~75% allowed
    for (float T : {0.4f, 1.0f, 1.7f})
      for (bool penalties : {false, true})
        for (bool masked : {false, true}) {
          SCOPED_TRACE(fmt::format("V={} T={} penalties={} mask={}", V, T, penalties, masked));
          SamplerOptions o;
          o.temperature = T;
          o.seed = 5;
          if (penalties) {
            o.repeat_penalty = 1.4f;
            o.frequency_penalty = 0.2f;
          }
          Sampler full(o, V), dev_sampler(o, V);
          full.set_history(history);
          dev_sampler.set_history(history);
          RowSampler rows(dev_sampler, V, SamplingPath::Candidates, 16);
          const uint64_t* m = masked ? mask.data() : nullptr;
          Distribution want[2];
          RowDistribution got[2];
          for (int r = 0; r < 2; r++) {
            want[r] = full.distribution(host.data() + r * V, {}, m);
            got[r] = rows.row_distribution(logits, r, {}, m);
            ASSERT_TRUE(got[r].implicit());
            double total = 0;
            for (double b : got[r].block_mass) total += b;
            EXPECT_NEAR(total, 1.0, 1e-9);
          }
          EXPECT_EQ(rows.counters().implicit_rows, 2);
          EXPECT_EQ(rows.counters().candidate_rows + rows.counters().full_rows, 0);
          for (int32_t id = 0; id < V; id += 13) {
            const double w = want[0].prob_of(id);
            EXPECT_NEAR(rows.prob_of(got[0], id), w, 1e-6 * w + 1e-12) << id;
          }
          // One seed, one token, up to rounding: the implicit distribution's normaliser comes from the device's
          // f32 block sums, so a draw may differ from the host's only where the uniform number lies within
          // rounding of the host's cumulative sum at every id between the two.
          Sampler uniforms(o, V);
          // Whether the device's draw `a` and the host's `b` from w at uniform number u agree up to that rounding.
          auto same_up_to_rounding = [](const Distribution& w, double u, int32_t a, int32_t b) {
            if (a == b) return true;
            double cum = 0;
            for (size_t j = 0; j < w.ids.size(); j++) {
              cum += w.probs[j];
              if (w.ids[j] >= std::min(a, b) && w.ids[j] < std::max(a, b) && std::fabs(cum - u) > 1e-5) return false;
            }
            return true;
          };
          int differ = 0;
          for (int i = 0; i < 300; i++) {
            const Distribution& w = want[i % 2];
            const double u = uniforms.uniform();
            const int32_t a = rows.sample(got[i % 2]), b = full.sample(w);
            ASSERT_TRUE(same_up_to_rounding(w, u, a, b)) << "draw " << i << ": " << a << " against the host's " << b;
            differ += a != b;
          }
          EXPECT_LE(differ, 3);
          // Speculative acceptance of drafts from row 1 against row 0, at several uniform numbers, and the draw
          // after a rejection.
          for (int i = 0; i < 40; i++) {
            const int32_t d = full.sample(want[1]);
            dev_sampler.uniform();  // the streams stay in step
            uniforms.uniform();
            for (double u : {0.01, 0.3, 0.7, 0.99})
              ASSERT_EQ(rows.accept(got[0], got[1], d, u), accept_draft(want[0], want[1], d, u)) << d << " " << u;
          }
          // The draw after a rejection, from the residual's per-block masses on the device: the host's token up
          // to rounding at a boundary, as above, and no row read whole.
          const int64_t reads = rows.counters().full_rows;
          const Distribution res = residual(want[0], want[1]);
          int res_differ = 0;
          for (int i = 0; i < 100; i++) {
            const double u = uniforms.uniform();
            const int32_t a = rows.sample_residual(got[0], got[1]), b = full.sample(res);
            ASSERT_TRUE(same_up_to_rounding(res, u, a, b))
                << "residual draw " << i << ": " << a << " against the host's " << b;
            res_differ += a != b;
          }
          EXPECT_LE(res_differ, 2);
          EXPECT_EQ(rows.counters().full_rows, reads) << "a residual draw reads no row whole";
          // p against itself: no rejection is possible, and the residual keeps p (one uniform number each).
          for (int i = 0; i < 10; i++) {
            uniforms.uniform();
            ASSERT_EQ(rows.sample_residual(got[0], got[0]), full.sample(residual(want[0], want[0]))) << i;
          }
        }
  }
}

TEST(RowSampler, LogprobsFromTheDevice) {
  const Device dev = test_device();
  const int64_t V = 4099;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> host(2 * V);
  for (auto& x : host) x = nd(rng);
  const Tensor logits = ops::to_device(Tensor::from_floats(host, {2, V}), dev);
  SamplerOptions o;
  Sampler s(o, V);
  RowSampler rows(s, V, SamplingPath::Candidates);
  for (int64_t r = 0; r < 2; r++) {
    for (int32_t id : {0, 17, 4098}) {
      TokenLogprob chosen{};
      std::vector<TokenLogprob> top;
      rows.logprobs(logits, r, id, 5, &chosen, &top);
      const TokenLogprob want = Sampler::logprob(host.data() + r * V, V, id);
      EXPECT_EQ(chosen.id, id);
      EXPECT_NEAR(chosen.logprob, want.logprob, 1e-4);
      const auto want_top = Sampler::top_logprobs(host.data() + r * V, V, 5);
      ASSERT_EQ(top.size(), want_top.size());
      for (size_t i = 0; i < top.size(); i++) {
        EXPECT_EQ(top[i].id, want_top[i].id);
        EXPECT_NEAR(top[i].logprob, want_top[i].logprob, 1e-4);
      }
    }
  }
}

// Through the generation loop with the bundled demo pair.
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

struct GenRun {
  std::vector<TokenEvent> events;
  GenerateStats stats;
};

GenRun run(GenerateOptions o, SamplingPath path, bool drafter) {
  Demo& d = demo_pair();
  o.sampling_path = path;
  Generator gen(*d.lm, drafter ? d.drafter.get() : nullptr);
  auto st = d.lm->new_state();
  GenRun r;
  r.stats = gen.generate(*st, d.tok->encode("It is a truth universally acknowledged, that", true), o,
                         [&](const TokenEvent& e) {
                           r.events.push_back(e);
                           return true;
                         });
  return r;
}

TEST(RowSamplerGeneration, BothPathsEmitTheSameTokens) {
  struct Opt {
    const char* name;
    std::function<void(GenerateOptions&)> set;
    bool drafter;
  };
  const char* schema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},)"
                       R"("age":{"type":"integer","maximum":120}},"required":["name","age"]})";
  auto grammar = std::make_shared<grammar::CompiledGrammar>(
      grammar::compile(grammar::json_schema_grammar(ordered_json::parse(schema))), demo_pair().vocab);
  const std::vector<Opt> opts = {
      {"top_k", [](GenerateOptions& o) { o.sampling.top_k = 40; }, false},
      {"top_p", [](GenerateOptions& o) { o.sampling.top_p = 0.9f; }, false},
      {"min_p", [](GenerateOptions& o) { o.sampling.min_p = 0.05f; }, false},
      {"all filters",
       [](GenerateOptions& o) {
         o.sampling.top_k = 64;
         o.sampling.top_p = 0.95f;
         o.sampling.min_p = 0.02f;
       },
       false},
      {"penalties",
       [](GenerateOptions& o) {
         o.sampling.top_p = 0.8f;
         o.sampling.repeat_penalty = 1.2f;
         o.sampling.presence_penalty = 0.3f;
         o.sampling.frequency_penalty = 0.2f;
       },
       false},
      {"greedy penalties",
       [](GenerateOptions& o) {
         o.sampling.temperature = 0;
         o.sampling.repeat_penalty = 1.5f;
       },
       false},
      {"logprobs",
       [](GenerateOptions& o) {
         o.sampling.top_k = 20;
         o.sampling.logprobs = true;
         o.sampling.top_logprobs = 3;
       },
       false},
      {"greedy logprobs",
       [](GenerateOptions& o) {
         o.sampling.temperature = 0;
         o.sampling.logprobs = true;
       },
       false},
      {"speculative",
       [](GenerateOptions& o) {
         o.sampling.top_k = 40;
         o.draft_depth = 3;
       },
       true},
      {"speculative top_p penalties",
       [](GenerateOptions& o) {
         o.sampling.top_p = 0.9f;
         o.sampling.repeat_penalty = 1.3f;
         o.draft_depth = 2;
       },
       true},
      {"grammar",
       [&](GenerateOptions& o) {
         o.sampling.top_k = 40;
         o.grammar = grammar;
       },
       false},
      {"grammar speculative",
       [&](GenerateOptions& o) {
         o.sampling.top_p = 0.9f;
         o.grammar = grammar;
         o.draft_depth = 2;
       },
       true},
      {"pure temperature",
       [](GenerateOptions& o) { o.sampling.temperature = 1.0f; },
       false},
      {"pure temperature speculative",
       [](GenerateOptions& o) {
         o.sampling.temperature = 1.0f;
         o.draft_depth = 2;
       },
       true},
      {"pure temperature speculative penalties",
       [](GenerateOptions& o) {
         o.sampling.temperature = 1.3f;
         o.sampling.repeat_penalty = 1.2f;
         o.draft_depth = 3;
       },
       true},
  };
  for (const auto& opt : opts) {
    SCOPED_TRACE(opt.name);
    for (int64_t seed : {int64_t(1)}) {
      GenerateOptions o;
      o.max_tokens = 16;
      o.ignore_eos = true;
      o.sampling.temperature = 0.8f;
      o.sampling.seed = seed;
      opt.set(o);
      if (o.grammar) o.ignore_eos = false;
      const GenRun want = run(o, SamplingPath::FullRow, opt.drafter);
      const GenRun got = run(o, SamplingPath::Candidates, opt.drafter);
      ASSERT_EQ(got.events.size(), want.events.size());
      for (size_t i = 0; i < want.events.size(); i++) {
        ASSERT_EQ(got.events[i].token, want.events[i].token) << "token " << i;
        ASSERT_EQ(got.events[i].logprob.has_value(), want.events[i].logprob.has_value());
        if (want.events[i].logprob) {
          EXPECT_NEAR(got.events[i].logprob->logprob, want.events[i].logprob->logprob, 1e-4);
        }
        ASSERT_EQ(got.events[i].top.size(), want.events[i].top.size());
        for (size_t j = 0; j < want.events[i].top.size(); j++) {
          EXPECT_EQ(got.events[i].top[j].id, want.events[i].top[j].id);
          EXPECT_NEAR(got.events[i].top[j].logprob, want.events[i].top[j].logprob, 1e-4);
        }
      }
      EXPECT_EQ(want.stats.sampling.candidate_rows, 0);
      if (opt.drafter) {
        EXPECT_GT(got.stats.rounds, 0);
      }
      // Pure temperature sampling over 4096 tokens stays implicit; only a rejected draft's residual draw reads
      // the two rows.
      if (std::string(opt.name).rfind("pure temperature", 0) == 0) {
        EXPECT_EQ(got.stats.sampling.candidate_rows, 0);
        EXPECT_EQ(got.stats.sampling.fallbacks, 0);
        EXPECT_GT(got.stats.sampling.implicit_rows, 0);
        EXPECT_EQ(got.stats.sampling.full_rows % 2, 0);
        EXPECT_LE(got.stats.sampling.full_rows, 2 * got.stats.rounds);
        if (!opt.drafter) {
          EXPECT_EQ(got.stats.sampling.full_rows, 0);
        }
      } else if (o.sampling.top_k > 0 || o.sampling.temperature == 0) {
        EXPECT_EQ(got.stats.sampling.fallbacks, 0);
        EXPECT_EQ(got.stats.sampling.full_rows, 0);
        EXPECT_GT(got.stats.sampling.candidate_rows, 0);
      } else {
        EXPECT_GT(got.stats.sampling.candidate_rows, 0);
      }
    }
  }
}

}  // namespace
}  // namespace vatic
