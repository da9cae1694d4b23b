// Qwen3ForCausalLM: per-head q/k RMSNorm, head_dim independent of hidden / heads, tied or untied head.
// Chat: ChatML with <think> and <tool_call>.
#include "models/qwen3/qwen3.h"
#include "models/decoder.h"
#include "models/family_util.h"

namespace vatic {

DecoderSpec qwen3_spec(const Fields& f, const std::string& architecture) {
  DecoderSpec s = common_decoder_spec(f, architecture);
  s.attn.qk_norm = true;
  s.attn.bias = f.boolean("attention_bias", false);
  s.activation = parse_activation(f, "hidden_act", "silu");
  if (f.boolean("use_sliding_window", false))
    f.error("use_sliding_window", "sliding-window Qwen3 layers are not supported");
  blocks::Rope rope = parse_model_rope(f);
  for (auto& l : s.layers) l.rope = rope;
  return s;
}

namespace {

class Qwen3Family final : public DecoderFamily {
 public:
  std::string name() const override { return "qwen3"; }
  std::vector<std::string> architectures() const override { return {"Qwen3ForCausalLM"}; }
  std::vector<std::string> model_types() const override { return {"qwen3"}; }
  DecoderSpec spec(const json& config, const std::string& source) const override {
    return qwen3_spec(Fields(config, source), "Qwen3ForCausalLM");
  }
  ChatDefaults chat_defaults(const json&) const override { return {"qwen3", "qwen3", true, true}; }
  std::vector<std::string> turn_end_tokens() const override { return {"<|im_end|>", "<|endoftext|>"}; }
};

}  // namespace

const ModelFamily& qwen3_family() {
  static const Qwen3Family f;
  return f;
}

}  // namespace vatic
