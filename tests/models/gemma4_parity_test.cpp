// Gemma 4 targets against transformers: prompt logits, per-step decode logits and greedy tokens.
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/generator.h"
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

TEST_P(Gemma4Parity, GraphReplaysEqualEagerForwards) { expect_graph_replays_equal_eager(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Fixtures, Gemma4Parity,
                         ::testing::Values("gemma4-e2b-tiny", "gemma4-moe-tiny", "gemma4-dense-tiny"));

}  // namespace
}  // namespace vatic
