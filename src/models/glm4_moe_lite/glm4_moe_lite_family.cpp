// GLM-4.7-Flash in the family registry: MLA attention with a latent KV cache, sigmoid-routed MoE, and the MTP
// layers of its own checkpoint as the drafter.
#include "formats/model_config.h"
#include "models/glm4_moe_lite/glm4_moe_lite_model.h"
#include "models/loader.h"
#include "models/registry.h"

namespace vatic {
namespace {

class Glm4MoeLiteFamily final : public ModelFamily {
 public:
  std::string name() const override { return "glm4_moe_lite"; }
  std::vector<std::string> architectures() const override { return {"Glm4MoeLiteForCausalLM"}; }
  std::vector<std::string> model_types() const override { return {"glm4_moe_lite"}; }

  ConfigSummary summary(const json& config, const std::string& source) const override {
    Glm4MoeLiteConfig c = Glm4MoeLiteConfig::parse(config, source);
    ConfigSummary s;
    s.context_length = c.max_position_embeddings;
    s.hidden_size = c.hidden_size;
    s.vocab_size = c.vocab_size;
    s.num_layers = c.num_layers;
    s.num_experts = c.n_routed_experts;
    // MLA caches only the latent and the shared rotary key (f32).
    s.kv_bytes_per_token = int64_t{c.num_layers} * (c.kv_lora_rank + c.qk_rope_head_dim) * 4;
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
    for (int i = 0; i < c.num_layers; ++i) {
      const std::string p = c.layer_prefix(i);
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
      if (!c.is_moe(i)) {
        e.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, H}});
        e.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, H}});
        e.push_back({p + "mlp.down_proj.weight", {H, c.intermediate_size}});
        continue;
      }
      const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size, S = I * c.n_shared_experts;
      e.push_back({p + "mlp.gate.weight", {E, H}});
      e.push_back({p + "mlp.gate.e_score_correction_bias", {E}});
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        Shape one = std::string(proj) == "down_proj" ? Shape{H, I} : Shape{I, H};
        std::string stacked = p + "mlp.experts." + proj + ".weight";
        if (has(stacked)) {
          Shape s = one;
          s.insert(s.begin(), E);
          e.push_back({stacked, s});
        } else {
          for (int x = 0; x < E; ++x)
            e.push_back({p + "mlp.experts." + std::to_string(x) + "." + proj + ".weight", one});
        }
      }
      if (c.n_shared_experts > 0) {
        e.push_back({p + "mlp.shared_experts.gate_proj.weight", {S, H}});
        e.push_back({p + "mlp.shared_experts.up_proj.weight", {S, H}});
        e.push_back({p + "mlp.shared_experts.down_proj.weight", {H, S}});
      }
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
