// Qwen3MoeForCausalLM: Qwen3 attention with softmax top-k routed experts (renormalised when norm_topk_prob),
// dense layers where mlp_only_layers or decoder_sparse_step say so. Chat as Qwen3.
#include <algorithm>

#include "models/decoder.h"
#include "models/family_util.h"
#include "models/qwen3/qwen3.h"

namespace vatic {
namespace {

class Qwen3MoeFamily final : public DecoderFamily {
 public:
  std::string name() const override { return "qwen3_moe"; }
  std::vector<std::string> architectures() const override { return {"Qwen3MoeForCausalLM"}; }
  std::vector<std::string> model_types() const override { return {"qwen3_moe"}; }

  DecoderSpec spec(const json& config, const std::string& source) const override {
    Fields f(config, source);
    DecoderSpec s = qwen3_spec(f, "Qwen3MoeForCausalLM");
    s.num_experts = f.positive_int(f.has("num_experts") ? "num_experts" : "num_local_experts");
    s.top_k = f.positive_int("num_experts_per_tok");
    if (s.top_k > s.num_experts)
      f.error("num_experts_per_tok", fmt::format("{} is more than the {} experts", s.top_k, s.num_experts));
    s.moe_intermediate_size = f.positive_i64("moe_intermediate_size");
    s.norm_topk_prob = f.boolean("norm_topk_prob", true);
    const int step = f.positive_int("decoder_sparse_step", 1);
    std::vector<int64_t> dense;
    if (f.has("mlp_only_layers")) {
      const json& v = f.at("mlp_only_layers");
      if (!v.is_array()) f.error("mlp_only_layers", "expected a list of layer indices");
      for (const auto& e : v) {
        int64_t i = f.to_int("mlp_only_layers", e);
        if (i < 0 || i >= s.num_layers) f.error("mlp_only_layers", fmt::format("layer {} does not exist", i));
        dense.push_back(i);
      }
    }
    for (int i = 0; i < s.num_layers; i++)
      s.layers[i].moe = std::find(dense.begin(), dense.end(), i) == dense.end() && (i + 1) % step == 0;
    return s;
  }
  ChatDefaults chat_defaults(const json&) const override { return {"qwen3", "qwen3", true, true}; }
  std::vector<std::string> turn_end_tokens() const override { return {"<|im_end|>", "<|endoftext|>"}; }
};

}  // namespace

const ModelFamily& qwen3_moe_family() {
  static const Qwen3MoeFamily f;
  return f;
}

}  // namespace vatic
