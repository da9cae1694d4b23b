// Gemma 4 targets against transformers: prompt logits, per-step decode logits and greedy tokens.
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/generator.h"
#include "models/gemma4/gemma4_model.h"
#include "formats/model_source.h"
#include "models/fixture_util.h"
#include "models/loader.h"
#include "test_device.h"

namespace vatic {
namespace {

using namespace vatic::testing;

class Gemma4Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Gemma4Parity, PromptAndStepLogitsAndGreedyTokens) {
  const std::string name = GetParam();
  auto lm = load_language_model(ModelSource::from_directory(model_dir(name)), test_device());
  TensorStore ref(fixtures() / "models" / (name + ".reference.safetensors"));
  const auto& cases = fixture_index()["models"][name]["cases"];
  const int64_t V = lm->info().vocab_size;
  for (size_t c = 0; c < cases.size(); c++) {
    SCOPED_TRACE("case " + std::to_string(c));
    auto prompt = ints(cases[c]["prompt"]);
    auto greedy = ints(cases[c]["greedy"]);
    // One forward over the whole prompt.
    auto st = lm->new_state();
    ForwardResult r = lm->forward(*st, prompt, static_cast<int64_t>(prompt.size()));
    Tensor want = ops::to_f32(ref.get("prompt" + std::to_string(c) + ".logits"));
    std::vector<float> got = ops::to_vector(r.logits);
    ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel());
    EXPECT_LT(rel_error(got.data(), want.data<float>(), want.numel()), 1e-4);
    // Greedy decoding with the cache, comparing every step's logits.
    Tensor steps = ops::to_f32(ref.get("prompt" + std::to_string(c) + ".step_logits"));
    std::vector<float> last(got.end() - V, got.end());
    std::vector<int32_t> out;
    for (size_t s = 0; s < greedy.size(); s++) {
      EXPECT_LT(rel_error(last.data(), steps.data<float>() + s * V, V), 1e-4) << "step " << s;
      int32_t t = argmax(last.data(), V);
      out.push_back(t);
      last = ops::to_vector(lm->forward(*st, {t}, 1).logits);
    }
    EXPECT_EQ(out, greedy);
  }
}

// On an accelerator, decode-sized forwards replay recorded graphs. Their logits must be those of the same forwards
// run op by op, through single steps, verification-sized forwards, rewinds (rejected drafts), the sliding ring
// wrapping and the full-attention cache growing (which moves its buffers and forces new recordings).
TEST_P(Gemma4Parity, GraphReplaysEqualEagerForwards) {
  if (test_device().is_cpu()) GTEST_SKIP() << "needs an accelerator (VATIC_TEST_DEVICE=cuda): the CPU has no graphs";
  const std::string name = GetParam();
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
  auto* model = dynamic_cast<Gemma4Model*>(graphed.get());
  ASSERT_NE(model, nullptr);
  EXPECT_GT(model->recorded_graphs(), 0u) << "no forward was replayed from a graph";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Gemma4Parity,
                         ::testing::Values("gemma4-e2b-tiny", "gemma4-moe-tiny", "gemma4-dense-tiny"));

}  // namespace
}  // namespace vatic
