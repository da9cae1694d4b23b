// LlamaForCausalLM (Llama 3.x, and the Mistral-style dense checkpoints that use the class): GQA, Llama 3 RoPE
// scaling, tied or untied head, optional attention biases. Chat: the Llama 3.1+ header format with JSON tool
// calls.
#include <cmath>

#include "models/decoder.h"
#include "models/family_util.h"

namespace vatic {
namespace {

class LlamaFamily final : public DecoderFamily {
 public:
  std::string name() const override { return "llama"; }
  std::vector<std::string> architectures() const override { return {"LlamaForCausalLM"}; }
  std::vector<std::string> model_types() const override { return {"llama"}; }

  DecoderSpec spec(const json& config, const std::string& source) const override {
    Fields f(config, source);
    DecoderSpec s = common_decoder_spec(f, "LlamaForCausalLM");
    s.attn.bias = f.boolean("attention_bias", false);
    if (f.boolean("mlp_bias", false)) f.error("mlp_bias", "MLP biases are not supported");
    s.activation = parse_activation(f, "hidden_act", "silu");
    blocks::Rope rope = parse_model_rope(f);
    for (auto& l : s.layers) l.rope = rope;
    return s;
  }

  ChatDefaults chat_defaults(const json&) const override { return {"llama3", "llama3", true, false}; }
  std::vector<std::string> turn_end_tokens() const override {
    return {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"};
  }
};

}  // namespace

const ModelFamily& llama_family() {
  static const LlamaFamily f;
  return f;
}

}  // namespace vatic
