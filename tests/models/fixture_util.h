#pragma once
// Helpers for tests that compare against the reference fixtures (tests/fixtures/models, made with transformers).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "formats/model_source.h"
#include "formats/safetensors.h"
#include "models/loader.h"
#include "ops/ops.h"
#include "sample/sampler.h"
#include "test_device.h"
#include "util/files.h"
#include "util/json.h"

namespace vatic::testing {

inline std::filesystem::path fixtures() { return VATIC_FIXTURES_DIR; }
inline std::filesystem::path model_dir(const std::string& name) { return fixtures() / "models" / name; }
inline const json& fixture_index() {
  static json j = json::parse(read_file(fixtures() / "models" / "index.json"));
  return j;
}
inline std::vector<int32_t> ints(const json& a) { return a.get<std::vector<int32_t>>(); }

// ‖a − b‖ / ‖b‖ over all elements.
inline double rel_error(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Decodes `n` tokens after `prompt` on a fresh sequence (EOS ignored): greedy unless `sampling` says otherwise,
// speculative with `drafter` at `depth` (-1 = adaptive, 0 = plain); `clock` replaces the depth policy's clock.
inline std::vector<int32_t> decode(LanguageModel& lm, Drafter* drafter, const std::vector<int32_t>& prompt, int n,
                                   int depth, GenerateStats* stats = nullptr, int max_depth = 4,
                                   std::function<double()> clock = nullptr) {
  Generator gen(lm, drafter);
  if (clock) gen.set_clock(std::move(clock));
  GenerateOptions o;
  o.max_tokens = n;
  o.draft_depth = depth;
  o.max_draft_depth = max_depth;
  o.ignore_eos = true;
  auto st = lm.new_state();
  std::vector<int32_t> out;
  GenerateStats s = gen.generate(*st, prompt, o, [&](const TokenEvent& e) {
    out.push_back(e.token);
    return true;
  });
  if (stats) *stats = s;
  return out;
}

// On an accelerator, decode-sized forwards replay recorded graphs. Their logits must be those of the same forwards
// run op by op, through single steps, verification-sized forwards, rewinds (rejected drafts), the sliding ring
// wrapping and the full-attention cache growing (which moves its buffers and forces new recordings).
inline void expect_graph_replays_equal_eager(const std::string& name) {
  if (test_device().is_cpu()) GTEST_SKIP() << "needs an accelerator (VATIC_TEST_DEVICE=cuda): the CPU has no graphs";
  auto graphed = load_language_model(ModelSource::from_directory(model_dir(name)), test_device());
  setenv("VATIC_GRAPHS", "0", 1);
  auto eager = load_language_model(ModelSource::from_directory(model_dir(name)), test_device());
  unsetenv("VATIC_GRAPHS");
  auto sg = graphed->new_state(), se = eager->new_state();
  const int64_t V = graphed->info().vocab_size;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; i++) prompt.push_back(static_cast<int32_t>((i * 7919 + 13) % V));
  graphed->forward(*sg, prompt, 1);
  eager->forward(*se, prompt, 1);
  int32_t tok = 5;
  for (int step = 0; step < 300; step++) {
    SCOPED_TRACE(fmt::format("step {} at length {}", step, sg->length()));
    // Every fifth step a verification-sized forward of 4 tokens of which 2 are then rejected.
    const bool verify = step % 5 == 4;
    std::vector<int32_t> toks = {tok};
    if (verify)
      for (int j = 1; j < 4; j++) toks.push_back(static_cast<int32_t>((tok + 31 * j) % V));
    const int64_t n = static_cast<int64_t>(toks.size());
    const int64_t base = sg->length();
    ForwardResult rg = graphed->forward(*sg, toks, n), re = eager->forward(*se, toks, n);
    std::vector<float> g = ops::to_vector(rg.logits), e = ops::to_vector(re.logits);
    ASSERT_EQ(g.size(), e.size());
    ASSERT_LT(rel_error(g.data(), e.data(), static_cast<int64_t>(g.size())), 1e-6);
    if (verify) {
      sg->rewind(base + 2);
      se->rewind(base + 2);
    }
    tok = argmax(g.data() + (verify ? 1 : n - 1) * V, V);
  }
  EXPECT_GT(graphed->recorded_graphs(), 0u) << "no forward was replayed from a graph";
}

}  // namespace vatic::testing
