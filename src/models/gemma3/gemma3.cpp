// Gemma3ForCausalLM, and the text part of Gemma3ForConditionalGeneration: sliding and full layers (5:1 in the
// released models) with a RoPE per layer type, q/k norm, query_pre_attn_scalar, sandwich norms with 1 + w
// weights, scaled embeddings, GELU-tanh MLP. Chat: Gemma's <start_of_turn> turns.
#include <cmath>

#include "models/decoder.h"
#include "models/family_util.h"
#include "models/loader.h"
#include "tensor/dtype.h"

namespace vatic {
namespace {

const char* kMultimodal = "Gemma3ForConditionalGeneration";

class Gemma3Family final : public DecoderFamily {
 public:
  std::string name() const override { return "gemma3"; }
  std::vector<std::string> architectures() const override { return {"Gemma3ForCausalLM", kMultimodal}; }
  std::vector<std::string> model_types() const override { return {"gemma3_text", "gemma3"}; }

  DecoderSpec spec(const json& config, const std::string& source) const override {
    const bool multimodal =
        config.is_object() && config.contains("text_config") && config["text_config"].is_object();
    Fields top(config, source);
    // The released multimodal configs give only what differs from transformers' Gemma3TextConfig defaults.
    json text = multimodal ? config["text_config"] : config;
    if (!text.is_object()) throw InvalidInput(fmt::format("invalid config {}: not a JSON object", source));
    static const json defaults = {{"vocab_size", 262208},
                                  {"num_attention_heads", 8},
                                  {"num_key_value_heads", 4},
                                  {"head_dim", 256},
                                  {"max_position_embeddings", 131072},
                                  {"query_pre_attn_scalar", 256},
                                  {"rms_norm_eps", 1e-6},
                                  {"sliding_window", 4096},
                                  {"hidden_activation", "gelu_pytorch_tanh"}};
    for (const auto& [k, v] : defaults.items())
      if (!text.contains(k) || text[k].is_null()) text[k] = v;
    Fields f(text, source, multimodal ? "text_config." : "");
    DecoderSpec s = common_decoder_spec(f, multimodal ? kMultimodal : "Gemma3ForCausalLM");
    if (multimodal) {
      s.prefix = "model.language_model.";
      // Token ids and tying may sit at the top level of the wrapper.
      if (s.eos_ids.empty())
        for (auto e : top.int_list("eos_token_id")) s.eos_ids.push_back(static_cast<int32_t>(e));
      if (s.bos_id < 0)
        if (auto b = top.opt_i64("bos_token_id")) s.bos_id = static_cast<int32_t>(*b);
    }
    s.tie_word_embeddings = f.boolean("tie_word_embeddings", top.boolean("tie_word_embeddings", true));
    s.attn.qk_norm = true;
    s.attn.bias = f.boolean("attention_bias", false);
    s.attn.norm_plus_one = true;
    s.norm_plus_one = true;
    s.sandwich_norms = true;
    s.activation = parse_activation(f, "hidden_activation", "gelu_pytorch_tanh");
    s.attn.scale = static_cast<float>(
        1.0 / std::sqrt(f.positive_num("query_pre_attn_scalar", static_cast<double>(s.attn.head_dim))));
    s.embed_scale = round_bf16(std::sqrt(static_cast<float>(s.hidden_size)));
    if (f.has("attn_logit_softcapping") && f.num("attn_logit_softcapping") != 0)
      f.error("attn_logit_softcapping", "attention logit softcapping is not supported");
    if (f.has("final_logit_softcapping") && f.num("final_logit_softcapping") > 0)
      s.final_logit_softcap = static_cast<float>(f.num("final_logit_softcapping"));
    s.sliding_window = f.positive_int("sliding_window");

    std::vector<bool> sliding(static_cast<size_t>(s.num_layers));
    if (f.has("layer_types")) {
      const json& lt = f.at("layer_types");
      if (!lt.is_array() || static_cast<int>(lt.size()) != s.num_layers)
        f.error("layer_types", fmt::format("expected a list of {} layer types", s.num_layers));
      for (int i = 0; i < s.num_layers; i++) {
        const std::string t = lt[i].is_string() ? lt[i].get<std::string>() : "";
        if (t != "sliding_attention" && t != "full_attention")
          f.error("layer_types", fmt::format("layer {}: expected sliding_attention or full_attention", i));
        sliding[i] = t == "sliding_attention";
      }
    } else {
      const int pattern = f.positive_int(
          f.has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern", 6);
      for (int i = 0; i < s.num_layers; i++) sliding[i] = (i + 1) % pattern != 0;
    }
    // RoPE per layer type: transformers 5 nests them in rope_parameters; older configs give the full layers'
    // rope_theta + rope_scaling and the sliding layers' rope_local_base_freq (no scaling).
    blocks::Rope full, local;
    const json* rp = f.object("rope_parameters");
    if (rp && rp->contains("full_attention")) {
      full = parse_model_rope(f, "full_attention", 1e6);
      local = parse_model_rope(f, "sliding_attention", 1e4);
    } else {
      full = parse_model_rope(f, "", 1e6);
      local.theta = f.positive_num("rope_local_base_freq", 1e4);
    }
    for (int i = 0; i < s.num_layers; i++) {
      s.layers[i].sliding = sliding[i];
      s.layers[i].rope = sliding[i] ? local : full;
    }
    return s;
  }

  // Released multimodal checkpoints name the text tensors language_model.model.*; transformers 5 saves
  // model.language_model.*.
  static void fix_prefix(DecoderSpec& s, const std::function<bool(const std::string&)>& has) {
    if (s.architecture != kMultimodal || has(s.prefix + "embed_tokens.weight")) return;
    if (has("language_model.model.embed_tokens.weight")) s.prefix = "language_model.model.";
  }

  std::vector<ExpectedTensor> expected_tensors(
      const json& config, const std::string& source,
      const std::function<bool(const std::string&)>& has) const override {
    DecoderSpec s = spec(config, source);
    fix_prefix(s, has);
    return s.expected_tensors(has);
  }

  std::unique_ptr<LanguageModel> load(const json& config, const ModelSource& source,
                                      std::shared_ptr<const Weights> weights) const override {
    DecoderSpec s = spec(config, source.config.string());
    fix_prefix(s, [&](const std::string& n) { return weights->has(n); });
    return std::make_unique<DecoderModel>(std::move(s), std::move(weights));
  }

  ChatDefaults chat_defaults(const json&) const override { return {"gemma3", "gemma3", false, false}; }
  std::vector<std::string> turn_end_tokens() const override { return {"<end_of_turn>", "<eos>"}; }
};

}  // namespace

const ModelFamily& gemma3_family() {
  static const Gemma3Family f;
  return f;
}

}  // namespace vatic
