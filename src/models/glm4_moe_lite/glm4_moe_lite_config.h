#pragma once
// The GLM4-MoE-Lite (GLM-4.7-Flash) configuration parsed from config.json. Every validation error is a
// vatic::InvalidInput naming the file and the field.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "util/json.h"

namespace vatic {

inline constexpr const char* kGlm4MoeLiteArchitecture = "Glm4MoeLiteForCausalLM";
inline constexpr const char* kGlm4MoeLiteModelType = "glm4_moe_lite";

struct Glm4MoeLiteConfig {
  std::filesystem::path source;
  std::string tensor_prefix = "model.";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int num_layers = 0;  // num_hidden_layers (MTP layers come after these)
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  std::optional<int> q_lora_rank;  // null -> plain q_proj
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int qk_head_dim = 0;  // nope + rope
  int v_head_dim = 0;
  double rope_theta = 10000.0;
  std::string rope_type = "default";
  bool rope_interleave = true;
  double rms_norm_eps = 1e-5;
  std::string hidden_act = "silu";
  int64_t intermediate_size = 0;      // dense layers
  int64_t moe_intermediate_size = 0;  // each routed / shared expert
  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int n_group = 1;
  int topk_group = 1;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  std::string topk_method = "noaux_tc";
  std::string scoring_func = "sigmoid";
  int first_k_dense_replace = 0;
  std::vector<bool> layer_is_moe;  // per layer, from mlp_layer_types or first_k_dense_replace
  int num_nextn_predict_layers = 0;
  bool tie_word_embeddings = false;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
  int64_t max_position_embeddings = 0;

  // The latent c [kv_lora] and the roped shared key [rope] per token and decoder layer, f32 (MLA caches no
  // per-head K/V).
  int64_t kv_bytes_per_token() const { return int64_t{num_layers} * (kv_lora_rank + qk_rope_head_dim) * 4; }
  bool is_moe(int layer) const { return layer_is_moe.at(static_cast<size_t>(layer)); }
  std::string layer_prefix(int i) const { return tensor_prefix + "layers." + std::to_string(i) + "."; }
  // Softmax scale of MLA attention: (qk_nope + qk_rope)^-1/2.
  double attention_scale() const;

  static Glm4MoeLiteConfig parse(const json& config, const std::string& source = "config.json");
  static Glm4MoeLiteConfig load(const std::filesystem::path& dir_or_file);
};

}  // namespace vatic
