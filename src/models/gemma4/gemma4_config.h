#pragma once
// Gemma 4 configurations parsed from config.json, resolved so model code never re-derives them: the targets
// (Gemma4ForConditionalGeneration's text part, Gemma4ForCausalLM) and the assistant drafter
// (Gemma4AssistantForCausalLM). Every validation error is a vatic::InvalidInput naming the file and the field.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "util/json.h"

namespace vatic {

// The architectures of the family (config.json `architectures[0]`) and the model_type of each.
inline constexpr const char* kGemma4ConditionalGeneration = "Gemma4ForConditionalGeneration";  // text + vision/audio
inline constexpr const char* kGemma4CausalLM = "Gemma4ForCausalLM";                             // text only
inline constexpr const char* kGemma4Assistant = "Gemma4AssistantForCausalLM";                   // MTP drafter
std::vector<std::string> gemma4_architectures();
std::vector<std::string> gemma4_model_types();
// Which Gemma 4 architecture `config` describes; InvalidInput naming `source` for another family's config.
std::string gemma4_architecture(const json& config, const std::string& source);

struct Gemma4RopeConfig {
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
  Gemma4RopeConfig rope;           // rope_sliding or rope_full, by layer type
};

struct Gemma4TextConfig {
  std::filesystem::path source;  // the config.json it came from (or a description)
  // kGemma4ConditionalGeneration (text fields under text_config, tensors model.language_model.*),
  // kGemma4CausalLM (top-level fields, tensors model.*) or kGemma4Assistant.
  std::string architecture = kGemma4CausalLM;
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
  Gemma4RopeConfig rope_sliding;
  Gemma4RopeConfig rope_full;
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
  // K and V (f32) of every KV-owning full-attention layer; sliding layers stop growing at the window.
  int64_t kv_bytes_per_token() const;

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

}  // namespace vatic
