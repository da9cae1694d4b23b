#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <string>

#include "formats/config_json.h"
#include "formats/safetensors.h"
#include "models/gemma4/gemma4_config.h"
#include "models/glm4_moe_lite/glm4_moe_lite_config.h"
#include "models/registry.h"

namespace vatic {
namespace {

namespace fs = std::filesystem;

fs::path model_dir(const std::string& name) { return fs::path(VATIC_FIXTURES_DIR) / "models" / name; }
fs::path config_file(const std::string& name) { return fs::path(VATIC_FIXTURES_DIR) / "configs" / name; }

std::vector<int> sliding_of(const Gemma4TextConfig& c) {
  std::vector<int> r;
  for (const auto& l : c.layers) r.push_back(l.is_sliding ? 1 : 0);
  return r;
}

// Checks every tensor the config implies against the checkpoint: names, shapes, and that no layer tensor is left
// unexplained (apart from the stale k/v tensors that KV-shared layers still carry).
void check_gemma4_tensors(const Gemma4TextConfig& c, const TensorStore& s) {
  const std::string& p = c.tensor_prefix;
  const int64_t H = c.hidden_size;
  s.require(p + "embed_tokens.weight", {c.vocab_size, H});
  s.require(p + "norm.weight", {H});
  if (c.hidden_size_per_layer_input > 0) {
    const int64_t P = c.hidden_size_per_layer_input, L = c.num_layers;
    s.require(p + "embed_tokens_per_layer.weight", {c.vocab_size_per_layer_input, L * P});
    s.require(p + "per_layer_model_projection.weight", {L * P, H});
    s.require(p + "per_layer_projection_norm.weight", {P});
  }
  for (int i = 0; i < c.num_layers; i++) {
    const auto& l = c.layer(i);
    const std::string lp = c.layer_prefix(i);
    const int64_t d = l.head_dim, nh = c.num_attention_heads, nkv = l.num_kv_heads, I = l.intermediate_size;
    s.require(lp + "self_attn.q_proj.weight", {nh * d, H});
    s.require(lp + "self_attn.q_norm.weight", {d});
    s.require(lp + "self_attn.o_proj.weight", {H, nh * d});
    if (!l.kv_shared) {
      s.require(lp + "self_attn.k_proj.weight", {nkv * d, H});
      s.require(lp + "self_attn.k_norm.weight", {d});
      EXPECT_EQ(s.has(lp + "self_attn.v_proj.weight"), !l.k_eq_v) << lp;
      if (!l.k_eq_v) s.require(lp + "self_attn.v_proj.weight", {nkv * d, H});
    }
    s.require(lp + "mlp.gate_proj.weight", {I, H});
    s.require(lp + "mlp.up_proj.weight", {I, H});
    s.require(lp + "mlp.down_proj.weight", {H, I});
    s.require(lp + "layer_scalar", {1});
    if (c.enable_moe_block) {
      s.require(lp + "router.proj.weight", {c.num_experts, H});
      s.require(lp + "experts.gate_up_proj", {c.num_experts, 2 * c.moe_intermediate_size, H});
      s.require(lp + "experts.down_proj", {c.num_experts, H, c.moe_intermediate_size});
    }
  }
}

TEST(Gemma4Config, E2bTinyFixture) {
  auto c = Gemma4TextConfig::load(model_dir("gemma4-e2b-tiny"));
  EXPECT_EQ(c.architecture, "Gemma4ForConditionalGeneration");
  EXPECT_EQ(c.tensor_prefix, "model.language_model.");
  EXPECT_EQ(c.source, model_dir("gemma4-e2b-tiny") / "config.json");
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 10);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.hidden_size_per_layer_input, 16);
  EXPECT_EQ(c.vocab_size_per_layer_input, 512);
  EXPECT_EQ(c.num_kv_shared_layers, 4);
  EXPECT_EQ(c.first_shared, 6);
  EXPECT_TRUE(c.use_double_wide_mlp);
  EXPECT_FALSE(c.attention_k_eq_v);
  EXPECT_FALSE(c.enable_moe_block);
  ASSERT_TRUE(c.final_logit_softcapping.has_value());
  EXPECT_EQ(*c.final_logit_softcapping, 30.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 2);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1}));
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_EQ(c.rope_sliding.type, "default");
  EXPECT_EQ(c.rope_sliding.theta, 10000.0);
  EXPECT_EQ(c.rope_full.type, "proportional");
  EXPECT_EQ(c.rope_full.theta, 1000000.0);
  EXPECT_EQ(c.rope_full.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rope_full.rotated_pairs(32), 4);
  EXPECT_EQ(c.rope_sliding.rotated_pairs(16), 8);
  EXPECT_EQ(sliding_of(c), (std::vector<int>{1, 1, 1, 1, 0, 1, 1, 1, 1, 0}));
  EXPECT_EQ(c.last_owner_sliding, 5);
  EXPECT_EQ(c.last_owner_full, 4);
  for (int i = 0; i < 10; i++) {
    const auto& l = c.layer(i);
    SCOPED_TRACE(i);
    EXPECT_EQ(l.head_dim, l.is_sliding ? 16 : 32);
    EXPECT_EQ(l.num_kv_heads, 1);
    EXPECT_FALSE(l.k_eq_v);
    EXPECT_EQ(l.kv_shared, i >= 6);
    EXPECT_EQ(l.intermediate_size, i >= 6 ? 192 : 96);
    EXPECT_EQ(l.rope.type, l.is_sliding ? "default" : "proportional");
    if (i < 6) {
      EXPECT_EQ(l.kv_donor, i);
    } else {
      EXPECT_EQ(l.kv_donor, l.is_sliding ? 5 : 4);
    }
  }
  EXPECT_EQ(c.embed_scale(), 8.0f);
  check_gemma4_tensors(c, TensorStore(model_dir("gemma4-e2b-tiny")));
}

TEST(Gemma4Config, MoeTinyFixture) {
  auto c = Gemma4TextConfig::load(model_dir("gemma4-moe-tiny"));
  EXPECT_EQ(c.architecture, "Gemma4ForConditionalGeneration");
  EXPECT_TRUE(c.enable_moe_block);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.top_k_experts, 2);
  EXPECT_EQ(c.moe_intermediate_size, 24);
  EXPECT_EQ(c.intermediate_size, 48);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_TRUE(c.attention_k_eq_v);
  EXPECT_EQ(c.num_kv_shared_layers, 0);
  EXPECT_EQ(c.hidden_size_per_layer_input, 0);
  EXPECT_EQ(sliding_of(c), (std::vector<int>{1, 1, 1, 1, 1, 0}));
  for (int i = 0; i < 6; i++) {
    const auto& l = c.layer(i);
    EXPECT_EQ(l.kv_donor, i);
    EXPECT_FALSE(l.kv_shared);
    EXPECT_EQ(l.k_eq_v, i == 5);
    EXPECT_EQ(l.head_dim, i == 5 ? 32 : 16);
    EXPECT_EQ(l.num_kv_heads, i == 5 ? 1 : 2);
    EXPECT_EQ(l.intermediate_size, 48);
  }
  EXPECT_EQ(c.global_head_dim, 32);
  EXPECT_EQ(c.num_global_key_value_heads, 1);
  check_gemma4_tensors(c, TensorStore(model_dir("gemma4-moe-tiny")));
}

TEST(Gemma4Config, DenseTinyCausalLmFixture) {
  auto c = Gemma4TextConfig::load(model_dir("gemma4-dense-tiny"));
  EXPECT_EQ(c.architecture, "Gemma4ForCausalLM");
  EXPECT_EQ(c.tensor_prefix, "model.");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 6);
  EXPECT_TRUE(c.attention_k_eq_v);
  EXPECT_EQ(sliding_of(c), (std::vector<int>{1, 1, 0, 1, 1, 0}));
  for (int i = 0; i < 6; i++) {
    const auto& l = c.layer(i);
    EXPECT_EQ(l.k_eq_v, !l.is_sliding);
    EXPECT_EQ(l.head_dim, l.is_sliding ? 16 : 32);
    EXPECT_EQ(l.num_kv_heads, l.is_sliding ? 2 : 1);
    EXPECT_EQ(l.kv_donor, i);
    EXPECT_EQ(l.intermediate_size, 96);
  }
  check_gemma4_tensors(c, TensorStore(model_dir("gemma4-dense-tiny")));
}

TEST(Gemma4Config, AssistantFixtures) {
  for (const char* name : {"gemma4-e2b-tiny-assistant", "gemma4-dense-tiny-assistant"}) {
    SCOPED_TRACE(name);
    auto a = Gemma4AssistantConfig::load(model_dir(name));
    const bool ordered = std::string(name) == "gemma4-e2b-tiny-assistant";
    EXPECT_EQ(a.text.architecture, "Gemma4AssistantForCausalLM");
    EXPECT_EQ(a.text.tensor_prefix, "model.");
    EXPECT_EQ(a.backbone_hidden_size, 64);
    EXPECT_EQ(a.use_ordered_embeddings, ordered);
    EXPECT_EQ(a.num_centroids, 16);
    EXPECT_EQ(a.centroid_intermediate_top_k, 4);
    EXPECT_TRUE(a.tie_word_embeddings);
    EXPECT_EQ(a.text.hidden_size, 32);
    EXPECT_EQ(a.text.num_layers, 2);
    EXPECT_EQ(a.text.first_shared, 0);
    EXPECT_EQ(a.text.last_owner_sliding, -1);
    EXPECT_EQ(a.text.last_owner_full, -1);
    EXPECT_EQ(sliding_of(a.text), (std::vector<int>{1, 0}));
    for (const auto& l : a.text.layers) {
      EXPECT_TRUE(l.kv_shared);
      EXPECT_EQ(l.kv_donor, -1);
      EXPECT_EQ(l.intermediate_size, 64);
    }
    EXPECT_EQ(a.text.layer(0).head_dim, 16);
    EXPECT_EQ(a.text.layer(1).head_dim, 32);
    // KV heads match the target's.
    EXPECT_EQ(a.text.layer(0).num_kv_heads, ordered ? 1 : 2);
    EXPECT_EQ(a.text.layer(1).num_kv_heads, 1);
    EXPECT_EQ(a.text.layer(1).k_eq_v, !ordered);

    TensorStore s(model_dir(name));
    const int64_t Ha = a.text.hidden_size, BH = a.backbone_hidden_size;
    s.require("pre_projection.weight", {Ha, 2 * BH});
    s.require("post_projection.weight", {BH, Ha});
    check_gemma4_tensors(a.text, s);
    if (a.use_ordered_embeddings) {
      s.require("masked_embedding.centroids.weight", {a.num_centroids, Ha});
      s.require("masked_embedding.token_ordering", {a.text.vocab_size});
    }
    // The generic text parser accepts the assistant too.
    EXPECT_EQ(Gemma4TextConfig::load(model_dir(name)).num_layers, 2);
  }
}

TEST(ModelConfig, DetectArchitecture) {
  // The registry reads the architecture of any config; the family it names must exist.
  auto detect = [](const json& j, const std::string& source = "config.json") {
    family_of(j, source);
    return config_architecture(j, source);
  };
  EXPECT_EQ(detect(load_config_json(model_dir("gemma4-e2b-tiny"))), "Gemma4ForConditionalGeneration");
  EXPECT_EQ(detect(load_config_json(model_dir("gemma4-dense-tiny"))), "Gemma4ForCausalLM");
  EXPECT_EQ(detect(load_config_json(model_dir("gemma4-e2b-tiny-assistant"))), "Gemma4AssistantForCausalLM");
  EXPECT_EQ(detect(load_config_json(model_dir("glm4-moe-lite-tiny"))), "Glm4MoeLiteForCausalLM");
  EXPECT_EQ(detect(json{{"model_type", "gemma4_text"}}), "Gemma4ForCausalLM");
  EXPECT_EQ(gemma4_architecture(json{{"model_type", "gemma4_text"}}, "config.json"), "Gemma4ForCausalLM");
  try {
    detect(json{{"architectures", {"MambaForCausalLM"}}}, "/m/config.json");
    FAIL();
  } catch (const InvalidInput& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("MambaForCausalLM"), std::string::npos) << m;
    EXPECT_NE(m.find("/m/config.json"), std::string::npos) << m;
    for (const char* a : {"Gemma4ForConditionalGeneration", "Gemma4ForCausalLM", "Gemma4AssistantForCausalLM",
                          "Glm4MoeLiteForCausalLM"})
      EXPECT_NE(m.find(a), std::string::npos) << m;
  }
  EXPECT_THROW(detect(json::object()), InvalidInput);
  EXPECT_THROW(detect(json{{"architectures", 5}}), InvalidInput);
  EXPECT_THROW(detect(json::array()), InvalidInput);
  // Parsing a config of another family names both.
  EXPECT_THROW(Glm4MoeLiteConfig::load(model_dir("gemma4-e2b-tiny")), InvalidInput);
  EXPECT_THROW(Gemma4TextConfig::load(model_dir("glm4-moe-lite-tiny")), InvalidInput);
  EXPECT_THROW(Gemma4AssistantConfig::load(model_dir("gemma4-e2b-tiny")), InvalidInput);
  EXPECT_THROW(load_config_json(model_dir("no-such-model")), NotFound);
}

TEST(ModelConfig, UnreadableConfigFilesNameThePath) {
  fs::path dir = fs::temp_directory_path() / ("vatic-cfg-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream(dir / "config.json") << "{\"architectures\": [\"Gemma4ForCausalLM\"], ";
  }
  try {
    Gemma4TextConfig::load(dir);
    FAIL();
  } catch (const InvalidInput& e) {
    std::string m = e.what();
    EXPECT_NE(m.find((dir / "config.json").string()), std::string::npos) << m;
    EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;
  }
  {
    std::ofstream(dir / "config.json") << "[1, 2]";
  }
  EXPECT_THROW(Gemma4TextConfig::load(dir / "config.json"), InvalidInput);
  {
    std::ofstream(dir / "config.json") << R"({"architectures": ["Qwen3ForCausalLM"]})";
  }
  try {
    Glm4MoeLiteConfig::load(dir);
    FAIL();
  } catch (const InvalidInput& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("Qwen3ForCausalLM"), std::string::npos) << m;
    EXPECT_NE(m.find("Glm4MoeLiteForCausalLM"), std::string::npos) << m;
  }
  fs::remove_all(dir);
}

// --- malformed Gemma configs ------------------------------------------------------------------------------------

json e2b_tiny() { return load_config_json(model_dir("gemma4-e2b-tiny")); }

void expect_config_error(const json& j, std::initializer_list<std::string> parts) {
  try {
    Gemma4TextConfig::parse(j, "/x/config.json");
    FAIL() << "no error; expected one mentioning " << *parts.begin();
  } catch (const InvalidInput& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("/x/config.json"), std::string::npos) << m;
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "missing \"" << p << "\" in: " << m;
  }
}

TEST(Gemma4Config, MalformedConfigsNameFileAndField) {
  {
    json j = e2b_tiny();
    j["text_config"].erase("hidden_size");
    expect_config_error(j, {"missing field text_config.hidden_size"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["hidden_size"] = "sixty-four";
    expect_config_error(j, {"text_config.hidden_size", "expected an integer"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["num_hidden_layers"] = -3;
    expect_config_error(j, {"text_config.num_hidden_layers", "out of range"});
  }
  {
    json j = e2b_tiny();
    j.erase("text_config");
    expect_config_error(j, {"missing field text_config"});
  }
  {
    json j = e2b_tiny();
    j["text_config"] = "nope";
    expect_config_error(j, {"text_config", "expected an object"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["layer_types"].erase(0);
    expect_config_error(j, {"text_config.layer_types", "9 entries", "num_hidden_layers is 10"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["layer_types"][1] = "chunked_attention";
    expect_config_error(j, {"text_config.layer_types", "chunked_attention"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["num_kv_shared_layers"] = 11;
    expect_config_error(j, {"text_config.num_kv_shared_layers"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["num_kv_shared_layers"] = 10;  // every layer shared: nothing to read K/V from
    expect_config_error(j, {"text_config.num_kv_shared_layers", "no earlier non-shared"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["use_double_wide_mlp"] = "yes";
    expect_config_error(j, {"text_config.use_double_wide_mlp", "true or false"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["rope_parameters"]["full_attention"]["rope_type"] = "yarn";
    expect_config_error(j, {"text_config.rope_parameters.full_attention.rope_type", "yarn"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["rope_parameters"]["sliding_attention"]["rope_theta"] = "big";
    expect_config_error(j, {"text_config.rope_parameters.sliding_attention.rope_theta", "expected a number"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["per_layer_config"]["4"]["head_dim"] = 0;
    expect_config_error(j, {"text_config.per_layer_config.4.head_dim"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["per_layer_config"]["12"] = {{"head_dim", 32}};
    expect_config_error(j, {"text_config.per_layer_config.12", "not a layer index"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["per_layer_config"]["4"]["intermediate_size"] = 7;
    expect_config_error(j, {"text_config.per_layer_config.4.intermediate_size", "unsupported"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["num_attention_heads"] = 3;
    j["text_config"]["num_key_value_heads"] = 2;  // sliding layers: 2 KV heads cannot serve 3 query heads
    expect_config_error(j, {"do not divide num_attention_heads 3"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["enable_moe_block"] = true;
    expect_config_error(j, {"text_config.num_experts"});
  }
  {
    json j = e2b_tiny();
    j["text_config"]["eos_token_id"] = {1, "two"};
    expect_config_error(j, {"text_config.eos_token_id", "expected an integer"});
  }
  {
    json j = load_config_json(model_dir("gemma4-dense-tiny"));
    j.erase("vocab_size");
    expect_config_error(j, {"missing field vocab_size"});
  }
  {
    json j = load_config_json(model_dir("gemma4-e2b-tiny-assistant"));
    j.erase("backbone_hidden_size");
    try {
      Gemma4AssistantConfig::parse(j, "/x/config.json");
      FAIL();
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find("missing field backbone_hidden_size"), std::string::npos) << e.what();
    }
  }
}

TEST(Gemma4Config, EosAsListAndDefaults) {
  json j = e2b_tiny();
  j["text_config"]["eos_token_id"] = {1, 106};
  j["eos_token_id"] = {1, 106, 50};
  j["text_config"].erase("final_logit_softcapping");
  j["text_config"].erase("layer_types");
  j["text_config"].erase("rope_parameters");
  j["text_config"].erase("per_layer_config");
  j["text_config"]["num_kv_shared_layers"] = 0;
  auto c = Gemma4TextConfig::parse(j);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 106, 50}));
  EXPECT_FALSE(c.final_logit_softcapping.has_value());
  // Default pattern: period 6, last forced full.
  EXPECT_EQ(sliding_of(c), (std::vector<int>{1, 1, 1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(c.rope_full.type, "proportional");
  EXPECT_EQ(c.rope_full.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rope_sliding.theta, 10000.0);
  // Without per_layer_config or global_head_dim, full layers use head_dim.
  EXPECT_EQ(c.layer(5).head_dim, 16);

  // Older rope fields.
  j["text_config"]["rope_theta"] = 500000.0;
  j["text_config"]["rope_local_base_freq"] = 20000.0;
  j["text_config"]["global_head_dim"] = 64;
  auto c2 = Gemma4TextConfig::parse(j);
  EXPECT_EQ(c2.rope_full.theta, 500000.0);
  EXPECT_EQ(c2.rope_sliding.theta, 20000.0);
  EXPECT_EQ(c2.layer(5).head_dim, 64);
  EXPECT_EQ(c2.layer(4).head_dim, 16);
}

// --- released Gemma 4 configs ------------------------------------------------------------------------------------

TEST(Gemma4Config, ReleasedE2B) {
  auto c = Gemma4TextConfig::load(config_file("gemma-4-E2B-it.json"));
  EXPECT_EQ(c.architecture, "Gemma4ForConditionalGeneration");
  EXPECT_EQ(c.tensor_prefix, "model.language_model.");
  EXPECT_EQ(c.num_layers, 35);
  EXPECT_EQ(c.hidden_size, 1536);
  EXPECT_EQ(c.vocab_size, 262144);
  EXPECT_EQ(c.first_shared, 15);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.hidden_size_per_layer_input, 256);
  EXPECT_EQ(c.vocab_size_per_layer_input, 262144);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.embed_scale(), 39.25f);
  EXPECT_EQ(c.last_owner_sliding, 13);
  EXPECT_EQ(c.last_owner_full, 14);
  for (int i = 0; i < 35; i++) {
    const auto& l = c.layer(i);
    SCOPED_TRACE(i);
    EXPECT_EQ(l.is_sliding, i % 5 != 4);
    EXPECT_EQ(l.head_dim, l.is_sliding ? 256 : 512);
    EXPECT_EQ(l.num_kv_heads, 1);
    EXPECT_FALSE(l.k_eq_v);
    EXPECT_EQ(l.kv_shared, i >= 15);
    EXPECT_EQ(l.intermediate_size, i >= 15 ? 12288 : 6144);
    if (i < 15) {
      EXPECT_EQ(l.kv_donor, i);
    }
  }
  for (int i = 15; i < 35; i++)
    if (c.layer(i).is_sliding) {
      EXPECT_EQ(c.layer(i).kv_donor, 13) << i;
    }
  for (int i : {19, 24, 29, 34}) {
    EXPECT_FALSE(c.layer(i).is_sliding);
    EXPECT_EQ(c.layer(i).kv_donor, 14) << i;
  }
  EXPECT_EQ(c.rope_full.rotated_pairs(512), 64);
  EXPECT_EQ(c.rope_sliding.rotated_pairs(256), 128);
}

TEST(Gemma4Config, ReleasedE4B) {
  auto c = Gemma4TextConfig::load(config_file("gemma-4-E4B-it.json"));
  EXPECT_EQ(c.num_layers, 42);
  EXPECT_EQ(c.hidden_size, 2560);
  EXPECT_EQ(c.first_shared, 24);
  EXPECT_EQ(c.embed_scale(), 50.5f);
  EXPECT_EQ(c.last_owner_sliding, 22);
  EXPECT_EQ(c.last_owner_full, 23);
  for (int i = 0; i < 42; i++) {
    const auto& l = c.layer(i);
    EXPECT_EQ(l.is_sliding, i % 6 != 5) << i;
    EXPECT_EQ(l.num_kv_heads, 2);
    EXPECT_EQ(l.intermediate_size, 10240);
    if (l.kv_shared) {
      EXPECT_EQ(l.kv_donor, l.is_sliding ? 22 : 23) << i;
    }
  }
  EXPECT_EQ(c.layer(29).kv_donor, 23);
  EXPECT_EQ(c.layer(41).kv_donor, 23);
}

TEST(Gemma4Config, Released26BA4B) {
  auto c = Gemma4TextConfig::load(config_file("gemma-4-26B-A4B-it.json"));
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 2816);
  EXPECT_TRUE(c.enable_moe_block);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.top_k_experts, 8);
  EXPECT_EQ(c.moe_intermediate_size, 704);
  EXPECT_EQ(c.intermediate_size, 2112);
  EXPECT_EQ(c.sliding_window, 1024);
  EXPECT_EQ(c.num_kv_shared_layers, 0);
  EXPECT_EQ(c.num_global_key_value_heads, 2);
  EXPECT_EQ(c.max_position_embeddings, 262144);
  EXPECT_EQ(c.embed_scale(), 53.0f);
  EXPECT_EQ(c.last_owner_sliding, 28);
  EXPECT_EQ(c.last_owner_full, 29);
  for (int i = 0; i < 30; i++) {
    const auto& l = c.layer(i);
    EXPECT_EQ(l.is_sliding, i % 6 != 5) << i;
    EXPECT_EQ(l.k_eq_v, !l.is_sliding) << i;
    EXPECT_EQ(l.num_kv_heads, l.is_sliding ? 8 : 2) << i;
    EXPECT_EQ(l.head_dim, l.is_sliding ? 256 : 512) << i;
    EXPECT_EQ(l.kv_donor, i);
  }
}

TEST(Gemma4Config, Released31B) {
  auto c = Gemma4TextConfig::load(config_file("gemma-4-31B-it.json"));
  EXPECT_EQ(c.num_layers, 60);
  EXPECT_EQ(c.hidden_size, 5376);
  EXPECT_FALSE(c.enable_moe_block);
  EXPECT_EQ(c.intermediate_size, 21504);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.embed_scale(), 73.5f);
  EXPECT_EQ(c.last_owner_sliding, 58);
  EXPECT_EQ(c.last_owner_full, 59);
  for (int i = 0; i < 60; i++) {
    const auto& l = c.layer(i);
    EXPECT_EQ(l.is_sliding, i % 6 != 5) << i;
    EXPECT_EQ(l.num_kv_heads, l.is_sliding ? 16 : 4) << i;
    EXPECT_EQ(l.k_eq_v, !l.is_sliding) << i;
  }
}

// --- GLM4-MoE-Lite --------------------------------------------------------------------------------------------------

void check_glm_tensors(const Glm4MoeLiteConfig& c, const TensorStore& s) {
  const int64_t H = c.hidden_size, nh = c.num_attention_heads;
  s.require("model.embed_tokens.weight", {c.vocab_size, H});
  s.require("lm_head.weight", {c.vocab_size, H});
  s.require("model.norm.weight", {H});
  for (int i = 0; i < c.num_layers; i++) {
    const std::string lp = c.layer_prefix(i);
    ASSERT_TRUE(c.q_lora_rank.has_value());
    s.require(lp + "self_attn.q_a_proj.weight", {*c.q_lora_rank, H});
    s.require(lp + "self_attn.q_a_layernorm.weight", {*c.q_lora_rank});
    s.require(lp + "self_attn.q_b_proj.weight", {nh * c.qk_head_dim, *c.q_lora_rank});
    s.require(lp + "self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, H});
    s.require(lp + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank});
    s.require(lp + "self_attn.kv_b_proj.weight", {nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank});
    s.require(lp + "self_attn.o_proj.weight", {H, nh * c.v_head_dim});
    if (c.is_moe(i)) {
      s.require(lp + "mlp.gate.weight", {c.n_routed_experts, H});
      s.require(lp + "mlp.shared_experts.gate_proj.weight", {c.moe_intermediate_size * c.n_shared_experts, H});
    } else {
      s.require(lp + "mlp.gate_proj.weight", {c.intermediate_size, H});
      s.require(lp + "mlp.down_proj.weight", {H, c.intermediate_size});
    }
  }
}

TEST(GlmConfig, TinyFixtures) {
  for (const char* name : {"glm4-moe-lite-tiny", "glm4-moe-lite-grouped-tiny"}) {
    SCOPED_TRACE(name);
    auto c = Glm4MoeLiteConfig::load(model_dir(name));
    const bool grouped = std::string(name) == "glm4-moe-lite-grouped-tiny";
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.num_layers, 3);
    EXPECT_EQ(c.num_attention_heads, 4);
    EXPECT_EQ(c.q_lora_rank, 32);
    EXPECT_EQ(c.kv_lora_rank, 16);
    EXPECT_EQ(c.qk_nope_head_dim, 16);
    EXPECT_EQ(c.qk_rope_head_dim, 8);
    EXPECT_EQ(c.qk_head_dim, 24);
    EXPECT_EQ(c.v_head_dim, 16);
    EXPECT_EQ(c.rope_theta, 10000.0);
    EXPECT_TRUE(c.rope_interleave);
    EXPECT_EQ(c.rms_norm_eps, 1e-5);
    EXPECT_EQ(c.n_routed_experts, 8);
    EXPECT_EQ(c.n_shared_experts, 1);
    EXPECT_EQ(c.num_experts_per_tok, 2);
    EXPECT_EQ(c.moe_intermediate_size, 24);
    EXPECT_EQ(c.intermediate_size, 96);
    EXPECT_EQ(c.n_group, grouped ? 4 : 1);
    EXPECT_EQ(c.topk_group, grouped ? 2 : 1);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.8);
    EXPECT_EQ(c.first_k_dense_replace, 1);
    EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{false, true, true}));
    EXPECT_EQ(c.num_nextn_predict_layers, 0);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.bos_token_id, 0);
    EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1}));
    EXPECT_EQ(c.max_position_embeddings, 4096);
    EXPECT_DOUBLE_EQ(c.attention_scale(), 1.0 / std::sqrt(24.0));
    check_glm_tensors(c, TensorStore(model_dir(name)));
  }
}

TEST(GlmConfig, ReleasedGlm47Flash) {
  auto c = Glm4MoeLiteConfig::load(config_file("GLM-4.7-Flash.json"));
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_layers, 47);
  EXPECT_EQ(c.num_attention_heads, 20);
  EXPECT_EQ(c.q_lora_rank, 768);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 192);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 256);
  EXPECT_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.n_routed_experts, 64);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.num_experts_per_tok, 4);
  EXPECT_EQ(c.moe_intermediate_size, 1536);
  EXPECT_EQ(c.intermediate_size, 10240);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_FALSE(c.is_moe(0));
  EXPECT_TRUE(c.is_moe(46));
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.vocab_size, 154880);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position_embeddings, 202752);
  EXPECT_EQ(c.eos_token_ids.size(), 3u);
  EXPECT_DOUBLE_EQ(c.attention_scale(), 1.0 / 16.0);
}

TEST(GlmConfig, MalformedConfigs) {
  auto expect_err = [](const json& j, std::initializer_list<std::string> parts) {
    try {
      Glm4MoeLiteConfig::parse(j, "/g/config.json");
      FAIL() << "no error";
    } catch (const InvalidInput& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("/g/config.json"), std::string::npos) << m;
      for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "missing \"" << p << "\" in: " << m;
    }
  };
  json base = load_config_json(model_dir("glm4-moe-lite-grouped-tiny"));
  {
    json j = base;
    j.erase("kv_lora_rank");
    expect_err(j, {"missing field kv_lora_rank"});
  }
  {
    json j = base;
    j["n_routed_experts"] = 8.5;
    expect_err(j, {"n_routed_experts", "expected an integer"});
  }
  {
    json j = base;
    j["mlp_layer_types"] = {"dense", "sparse"};
    expect_err(j, {"mlp_layer_types", "2 entries"});
  }
  {
    json j = base;
    j["mlp_layer_types"] = {"dense", "moe", "sparse"};
    expect_err(j, {"mlp_layer_types", "moe"});
  }
  {
    json j = base;
    j["first_k_dense_replace"] = 2;
    expect_err(j, {"first_k_dense_replace", "disagrees"});
  }
  {
    json j = base;
    j["n_group"] = 3;
    expect_err(j, {"n_group"});
  }
  {
    json j = base;
    j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}};
    expect_err(j, {"rope_parameters.rope_type", "yarn"});
  }
  {
    json j = base;
    j["norm_topk_prob"] = 1;
    expect_err(j, {"norm_topk_prob", "true or false"});
  }
  {
    // No mlp_layer_types: first_k_dense_replace drives it; rope_theta at top level; q_lora_rank null.
    json j = base;
    j.erase("mlp_layer_types");
    j.erase("rope_parameters");
    j["rope_theta"] = 500000.0;
    j["first_k_dense_replace"] = 2;
    j["q_lora_rank"] = nullptr;
    j["eos_token_id"] = {1, 2};
    auto c = Glm4MoeLiteConfig::parse(j);
    EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{false, false, true}));
    EXPECT_EQ(c.rope_theta, 500000.0);
    EXPECT_FALSE(c.q_lora_rank.has_value());
    EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 2}));
  }
}

}  // namespace
}  // namespace vatic
