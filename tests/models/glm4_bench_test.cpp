// Decode throughput of a random-weight GLM4-MoE-Lite with GLM-4.7-Flash widths at reduced depth. Disabled (it
// writes several GB of weights and asserts nothing); run it by hand:
//   [VATIC_GLM_BENCH_LAYERS=4] [VATIC_GLM_BENCH_DIR=/tmp/glm-bench] [VATIC_GLM_BENCH_TOKENS=32]
//     test_models --gtest_also_run_disabled_tests --gtest_filter='Glm4Bench.*'
// The model directory is kept (and reused when its config matches) so that repeated runs skip the generation.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/generator.h"
#include "formats/model_source.h"
#include "models/loader.h"
#include "ops/ops.h"
#include "sample/sampler.h"
#include "util/files.h"
#include "test_device.h"

namespace vatic {
namespace {

namespace fs = std::filesystem;

int env_int(const char* name, int def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : def;
}

json flash_config(int layers) {
  return json{{"architectures", {"Glm4MoeLiteForCausalLM"}},
              {"model_type", "glm4_moe_lite"},
              {"hidden_size", 2048},
              {"num_hidden_layers", layers},
              {"num_attention_heads", 20},
              {"num_key_value_heads", 20},
              {"q_lora_rank", 768},
              {"kv_lora_rank", 512},
              {"qk_nope_head_dim", 192},
              {"qk_rope_head_dim", 64},
              {"v_head_dim", 256},
              {"intermediate_size", 10240},
              {"moe_intermediate_size", 1536},
              {"n_routed_experts", 64},
              {"n_shared_experts", 1},
              {"num_experts_per_tok", 4},
              {"n_group", 1},
              {"topk_group", 1},
              {"norm_topk_prob", true},
              {"routed_scaling_factor", 1.8},
              {"first_k_dense_replace", 1},
              {"rope_theta", 1000000.0},
              {"rope_interleave", true},
              {"rms_norm_eps", 1e-5},
              {"vocab_size", 154880},
              {"max_position_embeddings", 202752},
              {"tie_word_embeddings", false},
              {"eos_token_id", {154820, 154827, 154829}},
              {"num_nextn_predict_layers", 1},
              {"hidden_act", "silu"}};
}

// Fast deterministic fill: uniform in [-a, a] (std a/√3), or 1 ± small noise for norms, as BF16.
Tensor random_bf16(const Shape& s, float a, bool norm, uint64_t& state) {
  Tensor t = Tensor::empty(s, DType::BF16);
  uint16_t* p = t.data<uint16_t>();
  for (int64_t i = 0; i < t.numel(); i++) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    float u = static_cast<float>(state >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
    p[i] = f32_to_bf16(norm ? 1.0f + 0.05f * u : a * u);
  }
  return t;
}

void write_model(const fs::path& dir, const json& cfg) {
  fs::create_directories(dir);
  const int64_t H = 2048, V = 154880, nh = 20, ql = 768, kvl = 512, nope = 192, rope = 64, v = 256, I = 10240,
                E = 64, MI = 1536;
  const int L = cfg["num_hidden_layers"].get<int>();
  uint64_t state = 0x9E3779B97F4A7C15ull;
  const float a = 0.035f;  // std ≈ 0.02
  json wm = json::object();
  auto shard = [&](const std::string& file, std::vector<NamedTensor> ts) {
    for (auto& [n, t] : ts) wm[n] = file;
    write_safetensors(dir / file, ts);
  };
  shard("embed.safetensors", {{"model.embed_tokens.weight", random_bf16({V, H}, a, false, state)},
                              {"lm_head.weight", random_bf16({V, H}, a, false, state)},
                              {"model.norm.weight", random_bf16({H}, a, true, state)}});
  for (int i = 0; i <= L; i++) {  // layer L is the MTP layer
    const std::string p = "model.layers." + std::to_string(i) + ".";
    std::vector<NamedTensor> ts = {
        {p + "input_layernorm.weight", random_bf16({H}, a, true, state)},
        {p + "post_attention_layernorm.weight", random_bf16({H}, a, true, state)},
        {p + "self_attn.q_a_proj.weight", random_bf16({ql, H}, a, false, state)},
        {p + "self_attn.q_a_layernorm.weight", random_bf16({ql}, a, true, state)},
        {p + "self_attn.q_b_proj.weight", random_bf16({nh * (nope + rope), ql}, a, false, state)},
        {p + "self_attn.kv_a_proj_with_mqa.weight", random_bf16({kvl + rope, H}, a, false, state)},
        {p + "self_attn.kv_a_layernorm.weight", random_bf16({kvl}, a, true, state)},
        {p + "self_attn.kv_b_proj.weight", random_bf16({nh * (nope + v), kvl}, a, false, state)},
        {p + "self_attn.o_proj.weight", random_bf16({H, nh * v}, a, false, state)}};
    if (i == 0) {
      ts.push_back({p + "mlp.gate_proj.weight", random_bf16({I, H}, a, false, state)});
      ts.push_back({p + "mlp.up_proj.weight", random_bf16({I, H}, a, false, state)});
      ts.push_back({p + "mlp.down_proj.weight", random_bf16({H, I}, a, false, state)});
    } else {
      ts.push_back({p + "mlp.gate.weight", random_bf16({E, H}, a, false, state)});
      ts.push_back({p + "mlp.gate.e_score_correction_bias", Tensor::from_floats(std::vector<float>(E, 0.0f), {E})});
      ts.push_back({p + "mlp.experts.gate_proj.weight", random_bf16({E, MI, H}, a, false, state)});
      ts.push_back({p + "mlp.experts.up_proj.weight", random_bf16({E, MI, H}, a, false, state)});
      ts.push_back({p + "mlp.experts.down_proj.weight", random_bf16({E, H, MI}, a, false, state)});
      ts.push_back({p + "mlp.shared_experts.gate_proj.weight", random_bf16({MI, H}, a, false, state)});
      ts.push_back({p + "mlp.shared_experts.up_proj.weight", random_bf16({MI, H}, a, false, state)});
      ts.push_back({p + "mlp.shared_experts.down_proj.weight", random_bf16({H, MI}, a, false, state)});
    }
    if (i == L) {
      ts.push_back({p + "enorm.weight", random_bf16({H}, a, true, state)});
      ts.push_back({p + "hnorm.weight", random_bf16({H}, a, true, state)});
      ts.push_back({p + "eh_proj.weight", random_bf16({H, 2 * H}, a, false, state)});
      ts.push_back({p + "shared_head.norm.weight", random_bf16({H}, a, true, state)});
    }
    shard("layer" + std::to_string(i) + ".safetensors", std::move(ts));
  }
  std::ofstream(dir / "model.safetensors.index.json") << json{{"weight_map", wm}}.dump();
  std::ofstream(dir / "config.json") << cfg.dump(2);  // last: marks the directory complete
}

// A benchmark, not a test: disabled so ctest never runs it; run it with
// test_models --gtest_also_run_disabled_tests --gtest_filter='Glm4Bench.*'.
TEST(Glm4Bench, DISABLED_RandomFlashWidthsDecode) {
  const int layers = env_int("VATIC_GLM_BENCH_LAYERS", 4), n = env_int("VATIC_GLM_BENCH_TOKENS", 32);
  const char* d = std::getenv("VATIC_GLM_BENCH_DIR");
  const fs::path dir = d && *d ? fs::path(d) : fs::temp_directory_path() / "vatic-glm-bench";
  const json cfg = flash_config(layers);
  if (!fs::exists(dir / "config.json") || json::parse(read_file(dir / "config.json")) != cfg) {
    fs::remove_all(dir);
    auto t0 = std::chrono::steady_clock::now();
    write_model(dir, cfg);
    std::printf("[glm4 bench] wrote %s in %.1f s\n", dir.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  auto t0 = std::chrono::steady_clock::now();
  auto lm = load_language_model(ModelSource::from_directory(dir), test_device());
  auto drafter = load_drafter(*lm, nullptr);
  ASSERT_NE(drafter, nullptr);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto& info = lm->info();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 16; i++) prompt.push_back(100 + 37 * i);

  GenerateOptions o;
  o.max_tokens = n;
  o.ignore_eos = true;
  auto run = [&](Drafter* dr, int depth) {
    Generator gen(*lm, dr);
    auto st = lm->new_state();
    if (dr) dr->rewind(0);
    GenerateOptions oo = o;
    oo.draft_depth = depth;
    return gen.generate(*st, prompt, oo, [](const TokenEvent&) { return true; });
  };
  run(nullptr, 0);  // warm the page cache
  GenerateStats plain = run(nullptr, 0);
  GenerateStats spec = run(drafter.get(), 1);

  // One MTP draft step (block + LM head) on its own.
  auto st = lm->new_state();
  ForwardResult r = lm->forward(*st, prompt, 1, true);
  drafter->rewind(0);
  drafter->observe(prompt, r.hidden, 0);
  Tensor last = r.hidden.slice(0, 15, 16);
  const int reps = 8;
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; i++)
    drafter->draft(*st, 5, last, 1, [](const Tensor& l) { return argmax(ops::to_vector(l).data(), l.dim(-1)); });
  const double step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count() / reps;

  std::printf(
      "[glm4 bench] %d layers (+1 MTP), H 2048, 64 experts top-4, vocab 154880: %.2f B params, %.2f GB weights, load "
      "%.1f s\n",
      layers, double(info.parameter_count) / 1e9, double(info.weight_bytes) / 1e9, load_s);
  std::printf("[glm4 bench] kv bytes/token %zu (f32 latent+rope; bf16 would be %zu); full 47 layers: %zu\n",
              info.kv_bytes_per_token, info.kv_bytes_per_token / 2, size_t(47) * (512 + 64) * 4);
  std::printf("[glm4 bench] prefill %lld tokens: %.1f tok/s; decode %lld tokens: %.2f tok/s (%.1f ms/token)\n",
              static_cast<long long>(plain.prompt_tokens), double(plain.prompt_tokens) / plain.prefill_seconds,
              static_cast<long long>(plain.generated), double(plain.generated) / plain.decode_seconds,
              1e3 * plain.decode_seconds / double(plain.generated));
  std::printf("[glm4 bench] MTP draft step %.1f ms; speculative depth 1 (random MTP, acceptance %.2f): %.2f tok/s\n",
              step_ms, spec.acceptance_length(), double(spec.generated) / spec.decode_seconds);
}

}  // namespace
}  // namespace vatic
