// The Llama, Qwen3, Qwen3-MoE and Gemma 3 families against transformers (tests/fixtures/families): prompt
// logits, per-step decode logits, greedy tokens; chunked prefill and rewind; what the registry says about
// each.
#include <gtest/gtest.h>

#include <cstdio>

#include "chat/format.h"
#include "chat/parser.h"
#include "chat/renderer.h"
#include "formats/model_source.h"
#include "models/decoder.h"
#include "models/fixture_util.h"
#include "models/loader.h"
#include "models/registry.h"
#include "sample/sampler.h"
#include "test_device.h"

namespace vatic {
namespace {

namespace fs = std::filesystem;
using namespace vatic::testing;

fs::path family_dir(const std::string& name) {
  return fixtures() / "families" / name;
}
const json& family_index() {
  static json j = json::parse(read_file(fixtures() / "families" / "index.json"));
  return j;
}
std::unique_ptr<LanguageModel> load(const std::string& name) {
  return load_language_model(ModelSource::from_directory(family_dir(name)), test_device());
}
std::vector<float> logits_of(LanguageModel& lm, SequenceState& st, const std::vector<int32_t>& toks,
                             int64_t n_out) {
  return ops::to_vector(lm.forward(st, toks, n_out).logits);
}
double max_rel(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t r = 0; r * V < a.size() && r * V < b.size(); r++)
    m = std::max(m, rel_error(a.data() + r * V, b.data() + r * V, V));
  return m;
}

class FamilyParity : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyParity, PromptAndStepLogitsAndGreedyTokens) {
  const std::string name = GetParam();
  auto lm = load(name);
  TensorStore ref(fixtures() / "families" / (name + ".reference.safetensors"));
  const auto& cases = family_index()["models"][name]["cases"];
  ASSERT_EQ(lm->info().architecture, family_index()["models"][name]["family"].get<std::string>());
  const int64_t V = lm->info().vocab_size;
  double worst_prompt = 0, worst_step = 0;
  for (size_t c = 0; c < cases.size(); c++) {
    SCOPED_TRACE("case " + std::to_string(c));
    auto prompt = ints(cases[c]["prompt"]);
    auto greedy = ints(cases[c]["greedy"]);
    auto st = lm->new_state();
    std::vector<float> got = logits_of(*lm, *st, prompt, static_cast<int64_t>(prompt.size()));
    Tensor want = ops::to_f32(ref.get("prompt" + std::to_string(c) + ".logits"));
    ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel());
    for (size_t r = 0; r < prompt.size(); r++) {
      double e = rel_error(got.data() + r * V, want.data<float>() + r * V, V);
      worst_prompt = std::max(worst_prompt, e);
      EXPECT_LT(e, 1e-4) << "prompt row " << r;
    }
    Tensor steps = ops::to_f32(ref.get("prompt" + std::to_string(c) + ".step_logits"));
    // The decode references of the byte-level fixtures (Llama, Qwen3) continue the prompt without its leading
    // BOS (their generator fed prompt[1:] to generate(); the prompt logits include it). Gemma 3's keep it.
    if (name != "gemma3-tiny") {
      ASSERT_EQ(prompt.front(), lm->info().bos_id);
      prompt.erase(prompt.begin());
      st = lm->new_state();
      got = logits_of(*lm, *st, prompt, 1);
    }
    std::vector<float> last(got.end() - V, got.end());
    std::vector<int32_t> out;
    for (size_t s = 0; s < greedy.size(); s++) {
      double e = rel_error(last.data(), steps.data<float>() + s * V, V);
      worst_step = std::max(worst_step, e);
      EXPECT_LT(e, 1e-4) << "step " << s;
      int32_t t = argmax(last.data(), V);
      out.push_back(t);
      last = logits_of(*lm, *st, {t}, 1);
    }
    EXPECT_EQ(out, greedy);
  }
  std::printf("[families parity] %s: max rel error prompt rows %.3g, decode steps %.3g\n", name.c_str(),
              worst_prompt, worst_step);
}

TEST_P(FamilyParity, ChunkedPrefillAndRewindEqualOnePass) {
  auto lm = load(GetParam());
  const int64_t V = lm->info().vocab_size;
  const auto& c = family_index()["models"][GetParam()]["cases"][2];
  auto prompt = ints(c["prompt"]);
  auto greedy = ints(c["greedy"]);
  Generator gen(*lm, nullptr);
  auto s1 = lm->new_state();
  std::vector<float> one = ops::to_vector(gen.prefill_logits(*s1, prompt, 0));
  for (int64_t chunk : {1, 5, 16}) {
    auto s2 = lm->new_state();
    EXPECT_LT(max_rel(ops::to_vector(gen.prefill_logits(*s2, prompt, chunk)), one, V), 1e-5)
        << "chunk " << chunk;
  }
  // Rewind into the sequence, run something else, rewind again and replay: equal to a fresh pass.
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), greedy.begin(), greedy.begin() + 10);
  const int64_t cut = static_cast<int64_t>(prompt.size()) + 3;
  std::vector<int32_t> tail(seq.begin() + cut, seq.end());
  auto fresh = lm->new_state();
  std::vector<float> want = logits_of(*lm, *fresh, seq, static_cast<int64_t>(tail.size()));
  auto st = lm->new_state();
  logits_of(*lm, *st, seq, 1);
  ASSERT_TRUE(st->can_rewind_to(cut));
  st->rewind(cut);
  logits_of(*lm, *st, {7, 9, 11, 13}, 4);
  st->rewind(cut);
  EXPECT_LT(max_rel(logits_of(*lm, *st, tail, static_cast<int64_t>(tail.size())), want, V), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FamilyParity,
                         ::testing::Values("llama3-tiny", "llama-untied-bias-tiny", "qwen3-tiny",
                                           "qwen3-moe-tiny", "gemma3-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(FamilyRegistry, KnowsEveryArchitectureAndOnlyThose) {
  for (const char* a : {"LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Gemma3ForCausalLM",
                        "Gemma3ForConditionalGeneration", "Gemma4ForConditionalGeneration",
                        "Gemma4ForCausalLM", "Gemma4AssistantForCausalLM", "Glm4MoeLiteForCausalLM"})
    EXPECT_NE(find_family(a), nullptr) << a;
  EXPECT_EQ(find_family("MistralForCausalLM"), nullptr);
  try {
    family_of(json{{"architectures", {"PhiForCausalLM"}}}, "x/config.json");
    FAIL() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("PhiForCausalLM"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("Qwen3MoeForCausalLM"), std::string::npos);
  }
  // model_type fallback
  EXPECT_EQ(config_architecture(json{{"model_type", "qwen3_moe"}}, "c"), "Qwen3MoeForCausalLM");
  EXPECT_EQ(config_architecture(json{{"model_type", "gemma3_text"}}, "c"), "Gemma3ForCausalLM");
}

TEST(FamilyRegistry, KvBytesAndSummaries) {
  auto cfg = [](const std::string& n) { return json::parse(read_file(family_dir(n) / "config.json")); };
  // llama3-tiny: 3 layers x 2 KV heads x 16 x (K+V) x 4 bytes.
  ConfigSummary s = family_of(cfg("llama3-tiny"), "c").summary(cfg("llama3-tiny"), "c");
  EXPECT_EQ(s.kv_bytes_per_token, 3 * 2 * 16 * 2 * 4);
  EXPECT_EQ(s.num_layers, 3);
  // qwen3-tiny: head_dim 24 (not 64 / 4).
  s = family_of(cfg("qwen3-tiny"), "c").summary(cfg("qwen3-tiny"), "c");
  EXPECT_EQ(s.kv_bytes_per_token, 3 * 2 * 24 * 2 * 4);
  // gemma3-tiny: only the one full layer grows with the context.
  s = family_of(cfg("gemma3-tiny"), "c").summary(cfg("gemma3-tiny"), "c");
  EXPECT_EQ(s.kv_bytes_per_token, 1 * 2 * 16 * 2 * 4);
  s = family_of(cfg("qwen3-moe-tiny"), "c").summary(cfg("qwen3-moe-tiny"), "c");
  EXPECT_EQ(s.num_experts, 8);
  auto lm = load("qwen3-moe-tiny");
  EXPECT_EQ(lm->info().kv_bytes_per_token, static_cast<size_t>(3 * 2 * 16 * 2 * 4));
  EXPECT_EQ(lm->info().eos_ids, std::vector<int32_t>{1});
}

TEST(FamilyRegistry, Gemma3SlidingPatternAndRopeFromOlderConfigs) {
  // The released configs: sliding_window_pattern, rope_theta / rope_local_base_freq / rope_scaling.
  json c = json::parse(read_file(family_dir("gemma3-tiny") / "config.json"));
  c.erase("layer_types");
  c.erase("rope_parameters");
  c.erase("_sliding_window_pattern");
  c["sliding_window_pattern"] = 4;
  c["rope_theta"] = 1000000.0;
  c["rope_local_base_freq"] = 10000.0;
  c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  const auto& fam = gemma3_family();
  DecoderSpec s = static_cast<const DecoderFamily&>(fam).spec(c, "c");
  ASSERT_EQ(s.layers.size(), 4u);
  EXPECT_TRUE(s.layers[0].sliding && s.layers[1].sliding && s.layers[2].sliding);
  EXPECT_FALSE(s.layers[3].sliding);
  EXPECT_EQ(s.layers[3].rope.type, "linear");
  EXPECT_EQ(s.layers[3].rope.factor, 8.0);
  EXPECT_EQ(s.layers[0].rope.theta, 10000.0);
  EXPECT_EQ(s.layers[0].rope.type, "default");
}

TEST(FamilyRegistry, Gemma3MultimodalWrapperLoadsTheTextPart) {
  // Gemma3ForConditionalGeneration as released: text fields under text_config (defaults left out), tensors
  // under language_model.model.*, a vision tower beside them.
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("vatic-gemma3-mm-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  json text = json::parse(read_file(family_dir("gemma3-tiny") / "config.json"));
  text.erase("architectures");
  json top = {{"architectures", {"Gemma3ForConditionalGeneration"}},
              {"model_type", "gemma3"},
              {"text_config", text},
              {"eos_token_id", {1, 106}},
              {"vision_config", {{"hidden_size", 8}}}};
  write_file_atomic(dir / "config.json", top.dump());
  fs::copy_file(family_dir("gemma3-tiny") / "tokenizer.json", dir / "tokenizer.json");
  std::vector<NamedTensor> ts;
  {
    TensorStore src(family_dir("gemma3-tiny"));
    for (const auto& n : src.names()) ts.push_back({"language_model." + n, ops::to_host(src.get(n))});
    ts.push_back({"vision_tower.patch.weight", ops::to_host(src.get("model.norm.weight"))});
  }
  write_safetensors(dir / "model.safetensors", ts);
  auto mm = load_language_model(ModelSource::from_directory(dir), test_device());
  auto lm = load("gemma3-tiny");
  EXPECT_EQ(mm->info().architecture, "Gemma3ForConditionalGeneration");
  EXPECT_EQ(mm->info().parameter_count, lm->info().parameter_count);  // the vision tower is not counted
  const std::vector<int32_t> prompt = {2, 40, 41, 42, 300, 7, 8, 9, 10, 11, 12};
  auto s1 = mm->new_state();
  auto s2 = lm->new_state();
  EXPECT_EQ(logits_of(*mm, *s1, prompt, 3), logits_of(*lm, *s2, prompt, 3));
  // Its expected tensors follow the stored prefix too.
  const auto& fam = gemma3_family();
  TensorStore st(dir);
  auto want = fam.expected_tensors(top, "c", [&](const std::string& n) { return st.has(n); });
  for (const auto& e : want)
    if (!e.optional) {
      EXPECT_TRUE(st.has(e.name)) << e.name;
    }
  fs::remove_all(dir);
}

TEST(FamilyRegistry, ChatDefaultsNameFormatsThatExist) {
  for (const ModelFamily* f : model_families()) {
    SCOPED_TRACE(f->name());
    EXPECT_FALSE(f->turn_end_tokens().empty());
    for (const auto& a : f->architectures()) {
      json cfg = {{"architectures", {a}}};
      if (f->drafter_only(cfg)) continue;
      ChatDefaults d = f->chat_defaults(cfg);
      ASSERT_FALSE(d.renderer.empty()) << a;
      EXPECT_EQ(chat::make_renderer(d.renderer)->name(), d.renderer);
      EXPECT_TRUE(chat::make_parser(d.parser));
      EXPECT_EQ(chat::parser_capabilities(d.parser).tools, d.tools) << a;
      EXPECT_EQ(chat::parser_capabilities(d.parser).thinking, d.thinking) << a;
    }
  }
  // Gemma 4: the per-layer-embedding models (E2B/E4B) take the small template, the others the large one.
  json e2b = {{"architectures", {"Gemma4ForConditionalGeneration"}},
              {"text_config", {{"hidden_size_per_layer_input", 256}}}};
  EXPECT_EQ(gemma4_family().chat_defaults(e2b).renderer, "gemma4-small");
  json big = {{"architectures", {"Gemma4ForCausalLM"}}, {"hidden_size", 5376}};
  EXPECT_EQ(gemma4_family().chat_defaults(big).renderer, "gemma4-large");
  EXPECT_EQ(glm4_moe_lite_family().chat_defaults(json::object()).parser, "glm-4.7");
  EXPECT_EQ(llama_family().chat_defaults(json::object()).renderer, "llama3");
  EXPECT_TRUE(qwen3_moe_family().chat_defaults(json::object()).thinking);
  EXPECT_FALSE(gemma3_family().chat_defaults(json::object()).tools);
}

TEST(FamilyRegistry, BadConfigsAreClearErrors) {
  json c = json::parse(read_file(family_dir("qwen3-moe-tiny") / "config.json"));
  c["num_experts_per_tok"] = 9;
  EXPECT_THROW(qwen3_moe_family().summary(c, "c"), InvalidInput);
  c = json::parse(read_file(family_dir("llama3-tiny") / "config.json"));
  c["rope_parameters"]["rope_type"] = "yarn";
  try {
    llama_family().summary(c, "x/config.json");
    FAIL() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("yarn"), std::string::npos);
  }
  c = json::parse(read_file(family_dir("llama3-tiny") / "config.json"));
  c["num_key_value_heads"] = 3;
  EXPECT_THROW(llama_family().summary(c, "c"), InvalidInput);
}

}  // namespace
}  // namespace vatic
