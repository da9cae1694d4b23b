#pragma once
// Model configurations parsed from Hugging Face config.json files, resolved so model code never re-derives them.
// Every validation error is a vatic::InvalidInput naming the file and the field.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "util/json.h"

namespace vatic {

enum class Architecture {
  Gemma4ForConditionalGeneration,  // text + vision/audio; text fields under text_config, tensors model.language_model.*
  Gemma4ForCausalLM,               // text only; top-level fields, tensors model.*
  Gemma4AssistantForCausalLM,      // MTP drafter (model_type gemma4_assistant)
  Glm4MoeLiteForCausalLM,          // GLM-4.7-Flash
};

const char* architecture_name(Architecture a);
// "Gemma4ForConditionalGeneration, Gemma4ForCausalLM, Gemma4AssistantForCausalLM, Glm4MoeLiteForCausalLM"
std::string supported_architectures();

// Reads `architectures[0]` (falling back to model_type) and maps it to a supported architecture. Throws
// InvalidInput naming `source` and listing the supported ones otherwise.
Architecture detect_architecture(const json& config, const std::string& source = "config.json");

// Reads and parses DIR/config.json (or the file itself when given a file). Throws NotFound / InvalidInput.
json load_config_json(const std::filesystem::path& dir_or_file, std::filesystem::path* resolved = nullptr);

// ---------------------------------------------------------------------------------------------------------------
// Gemma 4

struct RopeConfig {
  std::string type = "default";  // "default" or "proportional"
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;
  // Number of rotated frequency pairs for a head of dimension `head_dim`: int(factor * head_dim / 2). With
  // "proportional", inv_freq[i] = theta^(-2i/head_dim) for i < rotated_pairs and 0 beyond (pairs (i, i + d/2)).
  int rotated_pairs(int head_dim) const;
};

struct Gemma4LayerConfig {
  bool is_sliding = true;
  int head_dim = 0;
  int num_kv_heads = 0;            // KV heads of this layer (of the donor's cache for shared layers)
  int64_t intermediate_size = 0;   // dense MLP width (doubled on KV-shared layers when use_double_wide_mlp)
  bool kv_shared = false;          // computes only Q; reads the donor layer's K/V
  // Layer whose K/V cache this layer reads: itself when it owns KV; for shared layers the last non-shared layer of
  // the same type before first_shared. -1 when no such layer exists in this model (the assistant drafter, whose
  // layers all read the target model's K/V).
  int kv_donor = 0;
  bool k_eq_v = false;             // attention_k_eq_v && full layer: no v_proj, V = raw k_proj output
  RopeConfig rope;                 // rope_sliding or rope_full, by layer type
};

struct Gemma4TextConfig {
  std::filesystem::path source;  // the config.json it came from (or a description)
  Architecture arch = Architecture::Gemma4ForCausalLM;
  std::string tensor_prefix;  // "model.language_model." or "model."

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int num_layers = 0;
  int num_attention_heads = 0;
  int head_dim = 0;                    // sliding layers
  int global_head_dim = 0;             // full layers (== head_dim when the config has no separate value)
  int num_key_value_heads = 0;         // sliding layers
  int num_global_key_value_heads = 0;  // full layers (resolved: k_eq_v / per_layer_config / fallback)
  int64_t intermediate_size = 0;       // the base (non-doubled) width
  bool use_double_wide_mlp = false;
  bool attention_k_eq_v = false;
  int sliding_window = 0;
  RopeConfig rope_sliding;
  RopeConfig rope_full;
  double rms_norm_eps = 1e-6;
  std::optional<double> final_logit_softcapping;  // absent / null / 0 -> none
  std::string hidden_activation = "gelu_pytorch_tanh";
  int hidden_size_per_layer_input = 0;  // PLE width; 0 = no per-layer embeddings
  int64_t vocab_size_per_layer_input = 0;
  bool enable_moe_block = false;
  int num_experts = 0;
  int top_k_experts = 0;
  int64_t moe_intermediate_size = 0;
  int num_kv_shared_layers = 0;
  int first_shared = 0;  // num_layers - num_kv_shared_layers
  bool tie_word_embeddings = true;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
  int64_t max_position_embeddings = 0;

  std::vector<Gemma4LayerConfig> layers;
  // Last KV-owning layer of each type (the layers a drafter attends to); -1 when there is none.
  int last_owner_sliding = -1;
  int last_owner_full = -1;

  const Gemma4LayerConfig& layer(int i) const { return layers.at(static_cast<size_t>(i)); }
  std::string layer_prefix(int i) const { return tensor_prefix + "layers." + std::to_string(i) + "."; }
  // bf16-rounded sqrt(hidden_size), the embedding scale Gemma applies to the bf16 embedding.
  float embed_scale() const;

  // Parses a whole config.json (any of the three Gemma 4 architectures; for the assistant, its text_config).
  static Gemma4TextConfig parse(const json& config, const std::string& source = "config.json");
  static Gemma4TextConfig load(const std::filesystem::path& dir_or_file);
};

// Gemma4AssistantForCausalLM (model_type gemma4_assistant): a small all-KV-shared Gemma 4 stack fed by a target.
struct Gemma4AssistantConfig {
  Gemma4TextConfig text;  // tensor_prefix "model."; every layer kv_shared with kv_donor -1 (reads the target)
  int64_t backbone_hidden_size = 0;     // the target's hidden size; pre_projection is [H, 2 * backbone]
  bool use_ordered_embeddings = false;  // centroid LM head (masked_embedding.*)
  int num_centroids = 0;
  int centroid_intermediate_top_k = 0;
  bool tie_word_embeddings = true;

  static Gemma4AssistantConfig parse(const json& config, const std::string& source = "config.json");
  static Gemma4AssistantConfig load(const std::filesystem::path& dir_or_file);
};

// ---------------------------------------------------------------------------------------------------------------
// GLM4-MoE-Lite (GLM-4.7-Flash)

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

  bool is_moe(int layer) const { return layer_is_moe.at(static_cast<size_t>(layer)); }
  std::string layer_prefix(int i) const { return tensor_prefix + "layers." + std::to_string(i) + "."; }
  // Softmax scale of MLA attention: (qk_nope + qk_rope)^-1/2.
  double attention_scale() const;

  static Glm4MoeLiteConfig parse(const json& config, const std::string& source = "config.json");
  static Glm4MoeLiteConfig load(const std::filesystem::path& dir_or_file);
};

}  // namespace vatic
