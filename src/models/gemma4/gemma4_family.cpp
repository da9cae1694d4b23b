// Gemma 4 in the family registry: the targets (Gemma4ForConditionalGeneration's text part, Gemma4ForCausalLM)
// and the assistant drafter (Gemma4AssistantForCausalLM), attached with DRAFT.
#include "models/gemma4/gemma4_assistant.h"
#include "models/gemma4/gemma4_config.h"
#include "models/gemma4/gemma4_model.h"
#include "models/loader.h"
#include "models/registry.h"

namespace vatic {
namespace {

bool is_assistant(const json& config, const std::string& source) {
  return gemma4_architecture(config, source) == kGemma4Assistant;
}

void expect_layers(const Gemma4TextConfig& c, std::vector<ExpectedTensor>& e, bool assistant) {
  const int64_t H = c.hidden_size;
  for (int i = 0; i < c.num_layers; ++i) {
    const auto& L = c.layer(i);
    const std::string p = c.layer_prefix(i);
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      e.push_back({p + n + ".weight", {H}});
    e.push_back({p + "layer_scalar", {1}, true});
    const int64_t q = int64_t{c.num_attention_heads} * L.head_dim;
    e.push_back({p + "self_attn.q_proj.weight", {q, H}});
    e.push_back({p + "self_attn.q_norm.weight", {L.head_dim}});
    e.push_back({p + "self_attn.o_proj.weight", {H, q}});
    if (!L.kv_shared && !assistant) {
      const int64_t kv = int64_t{L.num_kv_heads} * L.head_dim;
      e.push_back({p + "self_attn.k_proj.weight", {kv, H}});
      e.push_back({p + "self_attn.k_norm.weight", {L.head_dim}});
      if (!L.k_eq_v) e.push_back({p + "self_attn.v_proj.weight", {kv, H}});
    }
    e.push_back({p + "mlp.gate_proj.weight", {L.intermediate_size, H}});
    e.push_back({p + "mlp.up_proj.weight", {L.intermediate_size, H}});
    e.push_back({p + "mlp.down_proj.weight", {H, L.intermediate_size}});
    if (c.hidden_size_per_layer_input > 0 && !assistant) {
      e.push_back({p + "per_layer_input_gate.weight", {c.hidden_size_per_layer_input, H}});
      e.push_back({p + "per_layer_projection.weight", {H, c.hidden_size_per_layer_input}});
      e.push_back({p + "post_per_layer_input_norm.weight", {H}});
    }
    if (c.enable_moe_block) {
      const int64_t E = c.num_experts, I = c.moe_intermediate_size;
      e.push_back({p + "router.proj.weight", {E, H}});
      e.push_back({p + "router.scale", {H}});
      e.push_back({p + "router.per_expert_scale", {E}});
      e.push_back({p + "experts.gate_up_proj", {E, 2 * I, H}});
      e.push_back({p + "experts.down_proj", {E, H, I}});
      for (const char* n :
           {"pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"})
        e.push_back({p + n + ".weight", {H}});
    }
  }
}

class Gemma4Family final : public ModelFamily {
 public:
  std::string name() const override { return "gemma4"; }
  std::vector<std::string> architectures() const override { return gemma4_architectures(); }
  std::vector<std::string> model_types() const override { return gemma4_model_types(); }
  bool drafter_only(const json& config) const override { return is_assistant(config, "config.json"); }

  ConfigSummary summary(const json& config, const std::string& source) const override {
    const bool asst = is_assistant(config, source);
    Gemma4TextConfig c =
        asst ? Gemma4AssistantConfig::parse(config, source).text : Gemma4TextConfig::parse(config, source);
    ConfigSummary s;
    s.context_length = c.max_position_embeddings;
    s.hidden_size = c.hidden_size;
    s.vocab_size = c.vocab_size;
    s.num_layers = c.num_layers;
    s.num_experts = c.enable_moe_block ? c.num_experts : 0;
    s.experts_per_token = c.enable_moe_block ? c.top_k_experts : 0;
    s.kv_bytes_per_token = asst ? 0 : c.kv_bytes_per_token();  // the assistant reads its target's cache
    return s;
  }

  std::vector<ExpectedTensor> expected_tensors(
      const json& config, const std::string& src,
      const std::function<bool(const std::string&)>&) const override {
    std::vector<ExpectedTensor> e;
    if (is_assistant(config, src)) {
      Gemma4AssistantConfig a = Gemma4AssistantConfig::parse(config, src);
      const auto& c = a.text;
      const int64_t H = c.hidden_size;
      e.push_back({"model.embed_tokens.weight", {c.vocab_size, H}});
      e.push_back({"model.norm.weight", {H}});
      e.push_back({"pre_projection.weight", {H, 2 * a.backbone_hidden_size}});
      e.push_back({"post_projection.weight", {a.backbone_hidden_size, H}});
      if (a.use_ordered_embeddings) {
        e.push_back({"masked_embedding.centroids.weight", {a.num_centroids, H}});
        e.push_back({"masked_embedding.token_ordering", {c.vocab_size}});
      }
      expect_layers(c, e, true);
      return e;
    }
    Gemma4TextConfig c = Gemma4TextConfig::parse(config, src);
    const std::string P = c.tensor_prefix;
    e.push_back({P + "embed_tokens.weight", {c.vocab_size, c.hidden_size}});
    e.push_back({P + "norm.weight", {c.hidden_size}});
    if (c.hidden_size_per_layer_input > 0) {
      const int64_t lp = int64_t{c.num_layers} * c.hidden_size_per_layer_input;
      e.push_back({P + "embed_tokens_per_layer.weight", {c.vocab_size_per_layer_input, lp}});
      e.push_back({P + "per_layer_model_projection.weight", {lp, c.hidden_size}});
      e.push_back({P + "per_layer_projection_norm.weight", {c.hidden_size_per_layer_input}});
    }
    if (!c.tie_word_embeddings) e.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
    expect_layers(c, e, false);
    return e;
  }

  QuantPolicyContext quant_context(const json& config, const std::string& src, bool is_draft) const override {
    if (is_assistant(config, src)) {
      Gemma4AssistantConfig a = Gemma4AssistantConfig::parse(config, src);
      return {true, a.text.num_layers, 0, is_draft};
    }
    Gemma4TextConfig c = Gemma4TextConfig::parse(config, src);
    return {true, c.num_layers, c.enable_moe_block ? c.num_experts : 0, is_draft};
  }
  bool stacks_experts_when_quantizing() const override { return false; }  // already stacked
  std::vector<std::string> turn_end_tokens() const override { return {"<turn|>", "<eos>"}; }

  ChatDefaults chat_defaults(const json& config) const override {
    const json& t = config.contains("text_config") ? config["text_config"] : config;
    const bool ple = t.is_object() && t.value("hidden_size_per_layer_input", 0) > 0;
    return {ple ? "gemma4-small" : "gemma4-large", "gemma4", true, true};
  }

  std::unique_ptr<LanguageModel> load(const json& config, const ModelSource& source,
                                      std::shared_ptr<const Weights> weights) const override {
    if (is_assistant(config, source.config.string()))
      throw InvalidInput(fmt::format(
          "{} is a drafter (Gemma4AssistantForCausalLM); use it as DRAFT of its target", source.name));
    return std::make_unique<Gemma4Model>(Gemma4TextConfig::parse(config, source.config.string()),
                                         std::move(weights));
  }

  void check_drafter_fit(const json& target_config, const std::string& target_label, const json& draft_config,
                         const std::string& draft_label) const override {
    if (!is_assistant(draft_config, draft_label)) return;
    if (&family_of(target_config, target_label) != this || is_assistant(target_config, target_label))
      throw InvalidInput(
          fmt::format("{}: a Gemma 4 assistant drafts only for Gemma 4 models, not for {} ({})", draft_label,
                      config_architecture(target_config, target_label), target_label));
    Gemma4TextConfig t = Gemma4TextConfig::parse(target_config, target_label);
    Gemma4AssistantConfig a = Gemma4AssistantConfig::parse(draft_config, draft_label);
    std::vector<std::string> why;
    auto check = [&](const char* what, int64_t d, int64_t tv) {
      if (d != tv) why.push_back(fmt::format("{}: draft {} vs target {}", what, d, tv));
    };
    check("backbone_hidden_size / hidden_size", a.backbone_hidden_size, t.hidden_size);
    check("vocab_size", a.text.vocab_size, t.vocab_size);
    check("head_dim (sliding layers)", a.text.head_dim, t.head_dim);
    check("head_dim (full layers)", a.text.global_head_dim, t.global_head_dim);
    check("key/value heads (sliding layers)", a.text.num_key_value_heads, t.num_key_value_heads);
    check("key/value heads (full layers)", a.text.num_global_key_value_heads, t.num_global_key_value_heads);
    if (!why.empty()) {
      std::string msg = fmt::format("{} does not fit {}:", draft_label, target_label);
      for (const auto& w : why) msg += "\n  " + w;
      throw InvalidInput(msg);
    }
  }

  std::unique_ptr<Drafter> load_drafter_for(LanguageModel& target, const json& draft_config,
                                            const ModelSource& draft,
                                            std::shared_ptr<const Weights> weights) const override {
    if (!is_assistant(draft_config, draft.config.string())) return nullptr;
    auto* gemma = dynamic_cast<Gemma4Model*>(&target);
    if (!gemma)
      throw InvalidInput(fmt::format("{} (Gemma4AssistantForCausalLM) cannot draft for {} ({})", draft.name,
                                     target.info().architecture, target.info().architecture));
    return std::make_unique<Gemma4Assistant>(
        *gemma, Gemma4AssistantConfig::parse(draft_config, draft.config.string()), std::move(weights));
  }
};

}  // namespace

const ModelFamily& gemma4_family() {
  static const Gemma4Family f;
  return f;
}

}  // namespace vatic
