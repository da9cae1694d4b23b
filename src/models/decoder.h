#pragma once
// The decoder skeleton the Llama-like families share: token embedding (optionally scaled), a stack of
// attention + feed-forward blocks (pre-norm, or Gemma's sandwich norms), a final norm and the LM head. Each
// family turns its config into a DecoderSpec (models/<family>/) and this class runs it with the shared
// blocks.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/blocks.h"
#include "models/kv_state.h"
#include "models/model.h"
#include "models/registry.h"

namespace vatic {

struct DecoderLayerSpec {
  bool sliding = false;  // sliding-window attention (window = DecoderSpec::sliding_window)
  bool moe = false;      // softmax-routed experts instead of the dense MLP
  blocks::Rope rope;
};

struct DecoderSpec {
  std::string architecture;
  std::string source;             // config file, for messages
  std::string prefix = "model.";  // "model.language_model." for multimodal wrappers
  int64_t vocab_size = 0, hidden_size = 0;
  int num_layers = 0;
  blocks::AttentionShape attn;    // window unused here (per layer from `sliding`)
  int64_t intermediate_size = 0;  // dense MLP
  int num_experts = 0, top_k = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = true;
  Unary activation = Unary::Silu;
  bool sandwich_norms = false;  // Gemma: post-attention and pre/post-feed-forward norms
  bool norm_plus_one = false;   // Gemma: every RMSNorm applies 1 + w
  float embed_scale = 0;        // > 0: embeddings are multiplied by it (Gemma: sqrt(hidden) in bf16)
  int sliding_window = 0;
  std::optional<float> final_logit_softcap;
  bool tie_word_embeddings = true;
  double rms_norm_eps = 1e-6;
  int64_t context_length = 0;
  std::vector<int32_t> eos_ids;
  int32_t bos_id = -1;
  std::vector<DecoderLayerSpec> layers;

  std::string layer_prefix(int i) const { return prefix + "layers." + std::to_string(i) + "."; }
  // K and V (f32) of every full-attention layer; sliding layers stop growing at the window.
  int64_t kv_bytes_per_token() const;
  std::vector<ExpectedTensor> expected_tensors(const std::function<bool(const std::string&)>& has) const;
  ConfigSummary summary() const;
};

class DecoderModel final : public LanguageModel {
 public:
  DecoderModel(DecoderSpec spec, std::shared_ptr<const Weights> weights);
  Device device() const override { return weights_->device(); }

  const ModelTraits& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_state() const override;
  ForwardResult forward(SequenceState& state, const std::vector<int32_t>& tokens, int64_t n_out,
                        bool all_hidden = false) override;
  const DecoderSpec& spec() const { return spec_; }

 private:
  struct Layer {
    Tensor input_ln, post_attn_ln, pre_ff_ln, post_ff_ln;
    blocks::AttentionShape shape;
    blocks::AttentionWeights attn;
    blocks::Mlp mlp;
    blocks::RoutedMoe moe;
  };

  DecoderSpec spec_;
  std::shared_ptr<const Weights> weights_;
  ModelTraits info_;
  Linear embed_tokens_, lm_head_;
  Tensor final_norm_;
  std::vector<Layer> layers_;
};

// A family whose models are DecoderModels: everything the registry asks follows from the spec.
class DecoderFamily : public ModelFamily {
 public:
  virtual DecoderSpec spec(const json& config, const std::string& source) const = 0;

  ConfigSummary summary(const json& config, const std::string& source) const override {
    return spec(config, source).summary();
  }
  std::vector<ExpectedTensor> expected_tensors(
      const json& config, const std::string& source,
      const std::function<bool(const std::string&)>& has) const override {
    return spec(config, source).expected_tensors(has);
  }
  QuantPolicyContext quant_context(const json& config, const std::string& source,
                                   bool is_draft) const override;
  std::unique_ptr<LanguageModel> load(const json& config, const ModelSource& source,
                                      std::shared_ptr<const Weights> weights) const override;
};

}  // namespace vatic
