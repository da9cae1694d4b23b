// GLM-4.7-Flash in the family registry: MLA attention with a latent KV cache, sigmoid-routed MoE, and the MTP
// layers of its own checkpoint as the drafter.
#include "models/blocks.h"
#include "models/glm4_moe_lite/glm4_moe_lite_model.h"
#include "models/loader.h"
#include "models/registry.h"

namespace vatic {
namespace {

class Glm4MoeLiteFamily final : public ModelFamily {
 public:
  std::string name() const override { return "glm4_moe_lite"; }
  std::vector<std::string> architectures() const override { return {kGlm4MoeLiteArchitecture}; }
  std::vector<std::string> model_types() const override { return {kGlm4MoeLiteModelType}; }

  ConfigSummary summary(const json& config, const std::string& source) const override {
    Glm4MoeLiteConfig c = Glm4MoeLiteConfig::parse(config, source);
    ConfigSummary s;
    s.context_length = c.max_position_embeddings;
    s.hidden_size = c.hidden_size;
    s.vocab_size = c.vocab_size;
    s.num_layers = c.num_layers;
    s.num_experts = c.n_routed_experts;
    s.experts_per_token = c.num_experts_per_tok;
    s.kv_bytes_per_token = c.kv_bytes_per_token();
    return s;
  }

  std::vector<ExpectedTensor> expected_tensors(
      const json& config, const std::string& src,
      const std::function<bool(const std::string&)>& has) const override {
    Glm4MoeLiteConfig c = Glm4MoeLiteConfig::parse(config, src);
    std::vector<ExpectedTensor> e;
    const int64_t H = c.hidden_size, V = c.vocab_size, nh = c.num_attention_heads;
    e.push_back({"model.embed_tokens.weight", {V, H}});
    e.push_back({"model.norm.weight", {H}});
    if (!c.tie_word_embeddings) e.push_back({"lm_head.weight", {V, H}});
    auto layer = [&](const std::string& p, bool moe) {
      e.push_back({p + "input_layernorm.weight", {H}});
      e.push_back({p + "post_attention_layernorm.weight", {H}});
      if (c.q_lora_rank) {
        e.push_back({p + "self_attn.q_a_proj.weight", {*c.q_lora_rank, H}});
        e.push_back({p + "self_attn.q_a_layernorm.weight", {*c.q_lora_rank}});
        e.push_back({p + "self_attn.q_b_proj.weight", {nh * c.qk_head_dim, *c.q_lora_rank}});
      } else {
        e.push_back({p + "self_attn.q_proj.weight", {nh * c.qk_head_dim, H}});
      }
      e.push_back({p + "self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, H}});
      e.push_back({p + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}});
      e.push_back(
          {p + "self_attn.kv_b_proj.weight", {nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}});
      e.push_back({p + "self_attn.o_proj.weight", {H, nh * c.v_head_dim}});
      if (!moe) {
        blocks::expect_mlp(p + "mlp.", c.intermediate_size, H, e);
        return;
      }
      const int64_t I = c.moe_intermediate_size;
      blocks::expect_routed_moe(p + "mlp.", c.n_routed_experts, I, H, RouteParams::Sigmoid, has, e);
      if (c.n_shared_experts > 0) blocks::expect_mlp(p + "mlp.shared_experts.", I * c.n_shared_experts, H, e);
    };
    for (int i = 0; i < c.num_layers; ++i) layer(c.layer_prefix(i), c.is_moe(i));
    // The MTP layers after them (optional: checkpoints converted without them have no drafter): a decoder layer
    // (MoE unless its tensors say dense) behind the token/hidden norms and their projection, and a head norm; the
    // token embedding and the head are the model's own.
    for (int i = c.num_layers; i < c.num_layers + c.num_nextn_predict_layers; ++i) {
      const std::string p = c.layer_prefix(i);
      const size_t first = e.size();
      e.push_back({p + "enorm.weight", {H}});
      e.push_back({p + "hnorm.weight", {H}});
      e.push_back({p + "eh_proj.weight", {H, 2 * H}});
      e.push_back({p + "shared_head.norm.weight", {H}});
      layer(p, has(p + "mlp.gate.weight") || (!has(p + "mlp.gate_proj.weight") && c.n_routed_experts > 0));
      for (size_t j = first; j < e.size(); j++) e[j].optional = true;
    }
    return e;
  }

  QuantPolicyContext quant_context(const json& config, const std::string& src, bool is_draft) const override {
    Glm4MoeLiteConfig c = Glm4MoeLiteConfig::parse(config, src);
    return {false, c.num_layers, c.n_routed_experts, is_draft};
  }

  ChatDefaults chat_defaults(const json&) const override { return {"glm-4.7", "glm-4.7", true, true}; }
  std::vector<std::string> turn_end_tokens() const override {
    return {"<|user|>", "<|observation|>", "<|endoftext|>"};
  }

  std::unique_ptr<LanguageModel> load(const json& config, const ModelSource& source,
                                      std::shared_ptr<const Weights> weights) const override {
    return load_glm4_moe_lite(config, source, std::move(weights));
  }
  std::unique_ptr<Drafter> builtin_drafter(LanguageModel& target) const override {
    return load_builtin_drafter(target);
  }
};

}  // namespace

const ModelFamily& glm4_moe_lite_family() {
  static const Glm4MoeLiteFamily f;
  return f;
}

}  // namespace vatic
