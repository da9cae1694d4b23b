// Random-weight checkpoints of `vatic bench` (cli/bench_random.h): a checkpoint for a config holds exactly the
// tensors a real checkpoint of that config holds (names and shapes, checked against the fixture checkpoints), it
// loads and runs, the assistant made for a Gemma 4 target fits it, the released configs cut to fewer layers stay
// valid, and the decode byte count follows the rules it states.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "cli/bench_random.h"
#include "formats/model_source.h"
#include "models/loader.h"
#include "models/registry.h"
#include "ops/ops.h"

namespace vatic::cli {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) { return fs::path(VATIC_FIXTURES_DIR) / "models" / name; }

json read(const fs::path& p) { return json::parse(std::ifstream(p)); }

class BenchRandom : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vatic-bench-random-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ::setenv("VATIC_CACHE", dir_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("VATIC_CACHE");
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(BenchRandom, CheckpointsHoldTheTensorsOfRealOnes) {
  for (const char* m : {"gemma4-e2b-tiny", "gemma4-dense-tiny", "gemma4-moe-tiny", "glm4-moe-lite-tiny",
                        "gemma4-e2b-tiny-assistant"}) {
    SCOPED_TRACE(m);
    const json config = read(fixture(m) / "config.json");
    const fs::path d = ensure_random_checkpoint(config, m);
    const TensorStore got(d), want(fixture(m));
    // GLM's fixture carries its MTP layer, which the model's own tensors do not include.
    std::vector<std::string> names;
    const int layers = config.value("num_hidden_layers", 0);
    for (const auto& n : want.names())
      if (!(config.contains("num_nextn_predict_layers") &&
            n.find("layers." + std::to_string(layers) + ".") != std::string::npos))
        names.push_back(n);
    EXPECT_EQ(got.names(), names);
    for (const auto& n : got.names()) {
      if (!want.has(n)) continue;
      EXPECT_EQ(got.get(n).shape(), want.get(n).shape()) << n;
    }
    // Written once: a second call finds it.
    const auto t = fs::last_write_time(d / "model.safetensors");
    EXPECT_EQ(ensure_random_checkpoint(config, m), d);
    EXPECT_EQ(fs::last_write_time(d / "model.safetensors"), t);
    EXPECT_FALSE(fs::exists(d.string() + ".partial"));
  }
}

TEST_F(BenchRandom, GeneratedModelsLoadAndTheirAssistantsFit) {
  for (const char* m : {"gemma4-e2b-tiny", "gemma4-dense-tiny", "gemma4-moe-tiny"}) {
    SCOPED_TRACE(m);
    const json config = read(fixture(m) / "config.json");
    const ModelSource target = ModelSource::from_directory(ensure_random_checkpoint(config, m));
    ModelSource draft = ModelSource::from_directory(
        ensure_random_checkpoint(gemma4_assistant_config_for(config), std::string(m) + "-assistant"));
    auto lm = load_language_model(target, Device::CPU);
    auto drafter = load_drafter(*lm, &draft);
    ASSERT_TRUE(drafter);
    auto st = lm->new_state();
    const ForwardResult r = lm->forward(*st, {2, 10, 11, 12}, 1);
    for (float x : ops::to_vector(r.logits)) ASSERT_TRUE(std::isfinite(x));
    int drafted = 0;
    drafter->draft(*st, 13, r.hidden, 3, [&](const Tensor&) { return static_cast<int32_t>(20 + drafted++); });
    EXPECT_EQ(drafted, 3);
  }
}

TEST_F(BenchRandom, ModelsInMemoryEqualTheirCheckpoints) {
  const json config = read(fixture("gemma4-e2b-tiny") / "config.json");
  for (QuantType q : {QuantType::None, QuantType::Int8, QuantType::Int4}) {
    SCOPED_TRACE(quant_type_name(q));
    const ModelSource mem = random_model_in_memory(config, "e2b", Device::CPU, q, 32, false);
    ASSERT_TRUE(mem.tensors);
    EXPECT_TRUE(mem.weights.empty());
    fs::path d = ensure_random_checkpoint(config, "e2b");
    if (q != QuantType::None) d = quantized_copy(d, q, 32, false);
    const TensorStore disk(d);
    // The same tensors, bit for bit, and the same quantization metadata.
    ASSERT_EQ(mem.tensors->names(), disk.names());
    for (const auto& n : disk.names()) {
      const Tensor a = mem.tensors->get(n), b = disk.get(n);
      ASSERT_EQ(a.shape(), b.shape()) << n;
      ASSERT_EQ(a.dtype(), b.dtype()) << n;
      EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << n;
    }
    EXPECT_EQ(mem.tensors->metadata(), disk.metadata());
    EXPECT_EQ(mem.tensors->total_bytes(), disk.total_bytes());
    // And the same model: equal logits.
    auto a = load_language_model(mem, Device::CPU), b = load_language_model(ModelSource::from_directory(d), Device::CPU);
    auto sa = a->new_state(), sb = b->new_state();
    EXPECT_EQ(ops::to_vector(a->forward(*sa, {2, 10, 11, 12}, 1).logits),
              ops::to_vector(b->forward(*sb, {2, 10, 11, 12}, 1).logits));
  }
  // Only a config.json was written for the models in memory.
  for (const auto& e : fs::recursive_directory_iterator(dir_)) {
    if (e.is_regular_file() && e.path().parent_path().filename().string().ends_with("-config")) {
      EXPECT_EQ(e.path().filename(), "config.json") << e.path();
    }
  }
}

TEST_F(BenchRandom, GlmCheckpointsCarryTheirMtpLayer) {
  json config = read(fixture("glm4-moe-lite-tiny") / "config.json");
  config["num_nextn_predict_layers"] = 1;
  const fs::path d = ensure_random_checkpoint(config, "glm-mtp");
  const TensorStore ts(d);
  const std::string p = "model.layers." + std::to_string(config["num_hidden_layers"].get<int>()) + ".";
  EXPECT_TRUE(ts.has(p + "eh_proj.weight"));
  EXPECT_TRUE(ts.has(p + "mlp.gate.weight")) << "the MTP layer is a MoE layer";
  auto lm = load_language_model(ModelSource::from_directory(d), Device::CPU);
  auto drafter = load_drafter(*lm, nullptr);
  ASSERT_TRUE(drafter);
  EXPECT_TRUE(drafter->wants_hidden());
  auto st = lm->new_state();
  const std::vector<int32_t> prompt = {2, 10, 11, 12};
  const ForwardResult r = lm->forward(*st, prompt, 1, true);
  drafter->observe(prompt, r.hidden, 0);
  int drafted = 0;
  const auto rows = drafter->draft(*st, 13, r.hidden.slice(0, 3, 4), 2, [&](const Tensor& logits) {
    for (float x : ops::to_vector(logits)) EXPECT_TRUE(std::isfinite(x));
    return static_cast<int32_t>(20 + drafted++);
  });
  EXPECT_EQ(drafted, 2);
}

TEST_F(BenchRandom, ReleasedConfigsCutToFewerLayers) {
  const fs::path configs = fs::path(VATIC_FIXTURES_DIR) / "configs";
  for (const char* f : {"gemma-4-E2B-it.json", "gemma-4-E4B-it.json", "gemma-4-26B-A4B-it.json",
                        "gemma-4-31B-it.json", "GLM-4.7-Flash.json"}) {
    SCOPED_TRACE(f);
    const json full = read(configs / f);
    for (int layers : {6, 12}) {
      const json cut = cut_to_layers(full, layers);
      const ModelFamily& fam = family_of(cut, f);
      EXPECT_EQ(fam.summary(cut, f).num_layers, layers);
      const json& t = cut.contains("text_config") ? cut["text_config"] : cut;
      if (t.contains("layer_types")) {
        EXPECT_EQ(t["layer_types"].size(), static_cast<size_t>(layers));
        // The cut keeps sharing KV layers when the model does, with an owner of each type before them.
        const int shared = t.value("num_kv_shared_layers", 0);
        const json& ft = full.contains("text_config") ? full["text_config"] : full;
        if (ft.value("num_kv_shared_layers", 0) == 0) {
          EXPECT_EQ(shared, 0);
        } else if (layers == 12) {
          EXPECT_GT(shared, 0);
        }
        std::set<std::string> owners, all;
        for (int i = 0; i < layers; i++) {
          all.insert(t["layer_types"][i].get<std::string>());
          if (i < layers - shared) owners.insert(t["layer_types"][i].get<std::string>());
        }
        EXPECT_EQ(owners, all);
      }
      EXPECT_FALSE(fam.expected_tensors(cut, f, [](const std::string&) { return false; }).empty());
      if (&fam == &gemma4_family()) {
        const json a = gemma4_assistant_config_for(cut);
        EXPECT_NO_THROW(fam.check_drafter_fit(cut, f, a, "assistant"));
        // The released assistants' sizes: a centroid head for the models with per-layer embeddings.
        const bool small = std::string(f).find("E2B") != std::string::npos ||
                           std::string(f).find("E4B") != std::string::npos;
        EXPECT_EQ(a["text_config"]["hidden_size"].get<int>(), small ? 256 : 1024);
        EXPECT_EQ(a["use_ordered_embeddings"].get<bool>(), small);
        if (small) {
          EXPECT_EQ(a["num_centroids"].get<int>(), 2048);
        }
      }
    }
    EXPECT_EQ(cut_to_layers(full, 0), full);
    EXPECT_THROW(cut_to_layers(full, 1000), InvalidInput);
  }
  // Per-layer settings of the layers cut away go too (the fixtures set head geometry per layer).
  for (const char* m : {"gemma4-moe-tiny", "gemma4-e2b-tiny"}) {
    SCOPED_TRACE(m);
    const json cut = cut_to_layers(read(fixture(m) / "config.json"), 2);
    EXPECT_NO_THROW(family_of(cut, m).summary(cut, m));
  }
}

TEST_F(BenchRandom, DecodeBytesCountWhatAStepReads) {
  // MoE: routed experts count the share each token uses; everything else in full (tied embedding = LM head).
  {
    const json config = read(fixture("gemma4-moe-tiny") / "config.json");
    const TensorStore ts(ensure_random_checkpoint(config, "moe"));
    const json& t = config["text_config"];
    const double share = t["top_k_experts"].get<double>() / t["num_experts"].get<double>();
    double all = 0, experts = 0;
    for (const auto& n : ts.names()) {
      const double b = static_cast<double>(ts.get(n).nbytes());
      all += b;
      if (n.find(".experts.") != std::string::npos) experts += b;
    }
    ASSERT_GT(experts, 0);
    EXPECT_NEAR(decode_weight_bytes(ts, config), all - experts + experts * share, 1e-9 * all);
  }
  // Untied LM head: the token embedding is read by row; a layer past the model's own (an MTP layer) not at all.
  {
    json config = read(fixture("glm4-moe-lite-tiny") / "config.json");
    const int layers = config["num_hidden_layers"].get<int>();
    json with_mtp = config;
    with_mtp["num_hidden_layers"] = layers + 1;  // the extra layer's tensors stand for the MTP layer's
    if (with_mtp.contains("mlp_layer_types")) with_mtp["mlp_layer_types"].push_back("sparse");
    const TensorStore ts(ensure_random_checkpoint(with_mtp, "glm"));
    config["num_nextn_predict_layers"] = 1;
    const double share = config["num_experts_per_tok"].get<double>() / config["n_routed_experts"].get<double>();
    double want = 0;
    int mtp = 0;
    for (const auto& n : ts.names()) {
      const Tensor x = ts.get(n);
      const double b = static_cast<double>(x.nbytes());
      if (n.find("layers." + std::to_string(layers) + ".") != std::string::npos)
        mtp++;
      else if (n == "model.embed_tokens.weight")
        want += b / static_cast<double>(x.dim(0));
      else if (n.find(".experts.") != std::string::npos)
        want += b * share;
      else
        want += b;
    }
    EXPECT_GT(mtp, 0);
    EXPECT_NEAR(decode_weight_bytes(ts, config), want, 1e-9 * want);
  }
}

TEST_F(BenchRandom, PromptFlopsCountEachMatrixPerTokenAndTheHeadOnce) {
  // Qwen3 (tied head): q, k, v, o, gate, up and down per layer and token from the config's widths, the LM head
  // (the token table) for the last row only; norms and the table's lookups nothing.
  const json config = read(fs::path(VATIC_FIXTURES_DIR) / "families" / "qwen3-tiny" / "config.json");
  const TensorStore ts(ensure_random_checkpoint(config, "qwen3"));
  const double H = config["hidden_size"], D = config["head_dim"], Hq = config["num_attention_heads"],
               Hkv = config["num_key_value_heads"], I = config["intermediate_size"], L = config["num_hidden_layers"],
               V = config["vocab_size"];
  const double layer = H * Hq * D + 2 * H * Hkv * D + Hq * D * H + 3 * H * I;
  for (int64_t T : {1, 7, 512})
    EXPECT_DOUBLE_EQ(prompt_matmul_flops(ts, config, T), 2 * (static_cast<double>(T) * L * layer + V * H)) << T;
}

}  // namespace
}  // namespace vatic::cli
