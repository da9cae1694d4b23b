#include "models/family_util.h"

#include <cmath>
#include <limits>

namespace vatic {

DecoderSpec common_decoder_spec(const Fields& f, const std::string& architecture) {
  DecoderSpec s;
  s.architecture = architecture;
  s.source = f.source();
  s.vocab_size = f.positive_i64("vocab_size");
  s.hidden_size = f.positive_i64("hidden_size");
  s.num_layers = f.positive_int("num_hidden_layers");
  s.attn.hidden = s.hidden_size;
  s.attn.heads = f.positive_int("num_attention_heads");
  s.attn.kv_heads = f.positive_int("num_key_value_heads", static_cast<int>(s.attn.heads));
  if (s.attn.heads % s.attn.kv_heads != 0)
    f.error("num_key_value_heads",
            fmt::format("{} does not divide num_attention_heads {}", s.attn.kv_heads, s.attn.heads));
  if (!f.has("head_dim") && s.hidden_size % s.attn.heads != 0)
    f.error("num_attention_heads", "does not divide hidden_size (and there is no head_dim)");
  s.attn.head_dim = f.positive_int("head_dim", static_cast<int>(s.hidden_size / s.attn.heads));
  if (s.attn.head_dim % 2 != 0) f.error("head_dim", "must be even (RoPE rotates pairs)");
  s.attn.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.attn.head_dim)));
  s.rms_norm_eps = f.positive_num("rms_norm_eps", 1e-6);
  s.attn.eps = static_cast<float>(s.rms_norm_eps);
  s.intermediate_size = f.positive_i64("intermediate_size");
  s.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  s.context_length = f.positive_i64("max_position_embeddings");
  for (auto e : f.int_list("eos_token_id")) s.eos_ids.push_back(static_cast<int32_t>(e));
  if (auto b = f.opt_i64("bos_token_id")) s.bos_id = static_cast<int32_t>(*b);
  for (int32_t e : s.eos_ids)
    if (e >= s.vocab_size)
      f.error("eos_token_id", fmt::format("{} is outside the vocabulary of {}", e, s.vocab_size));
  s.layers.resize(static_cast<size_t>(s.num_layers));
  return s;
}

Unary parse_activation(const Fields& f, const std::string& key, const std::string& def) {
  const std::string a = f.str(key, def);
  if (a == "silu" || a == "swish") return Unary::Silu;
  if (a == "gelu_pytorch_tanh" || a == "gelu_tanh") return Unary::GeluTanh;
  f.error(key, fmt::format("unsupported activation \"{}\" (supported: silu, gelu_pytorch_tanh)", a));
}

blocks::Rope parse_model_rope(const Fields& f, const std::string& layer_type, double default_theta) {
  const double theta = f.positive_num("rope_theta", default_theta);
  if (const json* rp = f.object("rope_parameters")) {
    if (!layer_type.empty() && rp->contains(layer_type)) {
      Fields inner(*rp, f.source(), f.field("rope_parameters") + ".");
      return blocks::parse_rope(inner, &(*rp)[layer_type], layer_type, theta);
    }
    return blocks::parse_rope(f, rp, "rope_parameters", theta);
  }
  return blocks::parse_rope(f, f.object("rope_scaling"), "rope_scaling", theta);
}

}  // namespace vatic
