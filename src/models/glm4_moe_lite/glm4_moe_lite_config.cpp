#include "models/glm4_moe_lite/glm4_moe_lite_config.h"

#include <cmath>
#include <limits>

#include "formats/config_fields.h"
#include "formats/config_json.h"
#include "util/error.h"

namespace vatic {

namespace fs = std::filesystem;

double Glm4MoeLiteConfig::attention_scale() const { return 1.0 / std::sqrt(static_cast<double>(qk_head_dim)); }

Glm4MoeLiteConfig Glm4MoeLiteConfig::parse(const json& config, const std::string& source) {
  family_architecture(config, source, {kGlm4MoeLiteArchitecture}, {kGlm4MoeLiteModelType}, "GLM4-MoE-Lite");
  Fields f(config, source);
  Glm4MoeLiteConfig c;
  c.source = source;
  c.vocab_size = f.positive_i64("vocab_size");
  c.hidden_size = f.positive_i64("hidden_size");
  c.num_layers = f.positive_int("num_hidden_layers");
  c.num_attention_heads = f.positive_int("num_attention_heads");
  c.num_key_value_heads = f.positive_int("num_key_value_heads", c.num_attention_heads);
  if (f.has("q_lora_rank")) c.q_lora_rank = f.positive_int("q_lora_rank");
  c.kv_lora_rank = f.positive_int("kv_lora_rank");
  c.qk_nope_head_dim = f.positive_int("qk_nope_head_dim");
  c.qk_rope_head_dim = f.positive_int("qk_rope_head_dim");
  if (c.qk_rope_head_dim % 2 != 0) f.error("qk_rope_head_dim", "must be even");
  c.qk_head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  if (f.has("qk_head_dim") && f.i64("qk_head_dim") != c.qk_head_dim)
    f.error("qk_head_dim", fmt::format("{} differs from qk_nope_head_dim + qk_rope_head_dim = {}", f.i64("qk_head_dim"),
                                       c.qk_head_dim));
  c.v_head_dim = f.positive_int("v_head_dim");

  if (const json* rp = f.object("rope_parameters")) {
    Fields r(*rp, source, "rope_parameters.");
    c.rope_type = r.str("rope_type", r.str("type", "default"));
    c.rope_theta = r.has("rope_theta") ? r.positive_num("rope_theta", 10000.0) : f.positive_num("rope_theta", 10000.0);
    if (c.rope_type != "default")
      r.error("rope_type", fmt::format("unsupported RoPE type \"{}\" (supported: default)", c.rope_type));
  } else {
    c.rope_theta = f.positive_num("rope_theta", 10000.0);
  }
  if (const json* rs = f.object("rope_scaling")) {
    Fields r(*rs, source, "rope_scaling.");
    std::string t = r.str("rope_type", r.str("type", "default"));
    if (t != "default") r.error("rope_type", fmt::format("unsupported RoPE scaling \"{}\"", t));
  }
  c.rope_interleave = f.boolean("rope_interleave", true);
  c.rms_norm_eps = f.positive_num("rms_norm_eps", 1e-5);
  c.hidden_act = f.str("hidden_act", "silu");
  if (c.hidden_act != "silu") f.error("hidden_act", fmt::format("unsupported activation \"{}\"", c.hidden_act));

  c.intermediate_size = f.positive_i64("intermediate_size");
  c.moe_intermediate_size = f.positive_i64("moe_intermediate_size");
  c.n_routed_experts = f.positive_int("n_routed_experts");
  c.n_shared_experts = f.nonneg_int("n_shared_experts", 0);
  c.num_experts_per_tok = f.positive_int("num_experts_per_tok");
  if (c.num_experts_per_tok > c.n_routed_experts)
    f.error("num_experts_per_tok", fmt::format("{} exceeds n_routed_experts {}", c.num_experts_per_tok,
                                               c.n_routed_experts));
  c.n_group = f.positive_int("n_group", 1);
  c.topk_group = f.positive_int("topk_group", 1);
  if (c.n_routed_experts % c.n_group != 0)
    f.error("n_group", fmt::format("{} does not divide n_routed_experts {}", c.n_group, c.n_routed_experts));
  if (c.topk_group > c.n_group) f.error("topk_group", fmt::format("{} exceeds n_group {}", c.topk_group, c.n_group));
  c.norm_topk_prob = f.boolean("norm_topk_prob", true);
  c.routed_scaling_factor = f.num("routed_scaling_factor", 1.0);
  c.topk_method = f.str("topk_method", "noaux_tc");
  c.scoring_func = f.str("scoring_func", "sigmoid");
  if (c.scoring_func != "sigmoid")
    f.error("scoring_func", fmt::format("unsupported scoring function \"{}\"", c.scoring_func));

  c.layer_is_moe.assign(static_cast<size_t>(c.num_layers), true);
  if (f.has("mlp_layer_types")) {
    const json& mt = f.at("mlp_layer_types");
    if (!mt.is_array()) f.error("mlp_layer_types", fmt::format("expected a list, got {}", type_name(mt)));
    if (static_cast<int64_t>(mt.size()) != c.num_layers)
      f.error("mlp_layer_types", fmt::format("has {} entries but num_hidden_layers is {}", mt.size(), c.num_layers));
    for (size_t i = 0; i < mt.size(); i++) {
      std::string t = mt[i].is_string() ? mt[i].get<std::string>() : std::string(type_name(mt[i]));
      if (t == "dense") {
        c.layer_is_moe[i] = false;
      } else if (t != "sparse") {
        f.error("mlp_layer_types", fmt::format("entry {} is \"{}\" (expected dense or sparse)", i, t));
      }
    }
    c.first_k_dense_replace = 0;
    while (c.first_k_dense_replace < c.num_layers && !c.layer_is_moe[static_cast<size_t>(c.first_k_dense_replace)])
      c.first_k_dense_replace++;
    if (f.has("first_k_dense_replace") && f.i64("first_k_dense_replace") != c.first_k_dense_replace)
      f.error("first_k_dense_replace", fmt::format("{} disagrees with mlp_layer_types (first sparse layer {})",
                                                   f.i64("first_k_dense_replace"), c.first_k_dense_replace));
  } else {
    c.first_k_dense_replace = static_cast<int>(f.ranged("first_k_dense_replace", 0, c.num_layers, 1));
    for (int i = 0; i < c.first_k_dense_replace; i++) c.layer_is_moe[static_cast<size_t>(i)] = false;
  }
  c.num_nextn_predict_layers = f.nonneg_int("num_nextn_predict_layers", 0);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.bos_token_id = f.opt_i64("bos_token_id");
  c.pad_token_id = f.opt_i64("pad_token_id");
  c.eos_token_ids = f.int_list("eos_token_id");
  c.max_position_embeddings = f.ranged("max_position_embeddings", 1, std::numeric_limits<int64_t>::max(), 202752);
  return c;
}

Glm4MoeLiteConfig Glm4MoeLiteConfig::load(const fs::path& p) {
  fs::path file;
  json j = load_config_json(p, &file);
  return parse(j, file.string());
}

}  // namespace vatic
