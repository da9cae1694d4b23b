#include "models/decoder.h"

#include <cmath>
#include <numeric>

#include "models/loader.h"
#include "models/weights.h"
#include "ops/ops.h"

namespace vatic {

int64_t DecoderSpec::kv_bytes_per_token() const {
  int64_t full = 0;
  for (const auto& l : layers)
    if (!l.sliding) full++;
  return full * 2 * attn.kv_heads * attn.head_dim * 4;
}

ConfigSummary DecoderSpec::summary() const {
  ConfigSummary s;
  s.context_length = context_length;
  s.hidden_size = hidden_size;
  s.vocab_size = vocab_size;
  s.num_layers = num_layers;
  s.num_experts = num_experts;
  s.experts_per_token = top_k;
  s.kv_bytes_per_token = kv_bytes_per_token();
  return s;
}

std::vector<ExpectedTensor> DecoderSpec::expected_tensors(
    const std::function<bool(const std::string&)>& has) const {
  std::vector<ExpectedTensor> e;
  const int64_t H = hidden_size;
  e.push_back({prefix + "embed_tokens.weight", {vocab_size, H}});
  e.push_back({prefix + "norm.weight", {H}});
  // Tied checkpoints sometimes ship a copy of the head anyway; it is used when present.
  e.push_back({"lm_head.weight", {vocab_size, H}, tie_word_embeddings});
  for (int i = 0; i < num_layers; i++) {
    const std::string p = layer_prefix(i);
    e.push_back({p + "input_layernorm.weight", {H}});
    e.push_back({p + "post_attention_layernorm.weight", {H}});
    if (sandwich_norms) {
      e.push_back({p + "pre_feedforward_layernorm.weight", {H}});
      e.push_back({p + "post_feedforward_layernorm.weight", {H}});
    }
    blocks::expect_attention(p + "self_attn.", attn, e);
    if (layers[i].moe)
      blocks::expect_routed_moe(p + "mlp.", num_experts, moe_intermediate_size, H, RouteParams::Softmax, has,
                                e);
    else
      blocks::expect_mlp(p + "mlp.", intermediate_size, H, e);
  }
  return e;
}

DecoderModel::DecoderModel(DecoderSpec spec, std::shared_ptr<const Weights> weights)
    : spec_(std::move(spec)), weights_(std::move(weights)) {
  const Weights& ts = *weights_;
  const std::string& P = spec_.prefix;
  const int64_t H = spec_.hidden_size, V = spec_.vocab_size;
  const bool p1 = spec_.norm_plus_one;
  embed_tokens_ = load_linear(ts, P + "embed_tokens", V, H);
  // As transformers ties them: a tied model's head is its embedding even when a copy of lm_head is stored.
  lm_head_ = spec_.tie_word_embeddings ? embed_tokens_ : load_linear(ts, "lm_head", V, H);
  final_norm_ = blocks::load_norm(ts, P + "norm.weight", H, p1);
  const Device dev = embed_tokens_.weight.device();

  layers_.resize(static_cast<size_t>(spec_.num_layers));
  for (int i = 0; i < spec_.num_layers; i++) {
    const auto& ls = spec_.layers[i];
    auto& l = layers_[i];
    const std::string p = spec_.layer_prefix(i);
    l.input_ln = blocks::load_norm(ts, p + "input_layernorm.weight", H, p1);
    l.post_attn_ln = blocks::load_norm(ts, p + "post_attention_layernorm.weight", H, p1);
    if (spec_.sandwich_norms) {
      l.pre_ff_ln = blocks::load_norm(ts, p + "pre_feedforward_layernorm.weight", H, p1);
      l.post_ff_ln = blocks::load_norm(ts, p + "post_feedforward_layernorm.weight", H, p1);
    }
    l.shape = spec_.attn;
    l.shape.window = ls.sliding ? spec_.sliding_window : 0;
    l.attn =
        blocks::load_attention(ts, p + "self_attn.", l.shape,
                               blocks::rope_inv_freq(ls.rope, static_cast<int>(spec_.attn.head_dim), dev));
    if (ls.moe) {
      blocks::MoeRouting routing;
      routing.gating = RouteParams::Softmax;
      routing.top_k = spec_.top_k;
      routing.renormalize = spec_.norm_topk_prob;
      l.moe = blocks::load_routed_moe(ts, p + "mlp.", spec_.num_experts, spec_.moe_intermediate_size, H,
                                      std::move(routing));
    } else {
      l.mlp = blocks::load_mlp(ts, p + "mlp.", spec_.intermediate_size, H);
    }
  }

  info_.architecture = spec_.architecture;
  info_.vocab_size = V;
  info_.hidden_size = H;
  info_.context_length = spec_.context_length;
  info_.eos_ids = spec_.eos_ids;
  info_.bos_id = spec_.bos_id;
  // The decoder and its head (a multimodal wrapper's other towers are not counted).
  const WeightTotals totals = count_weights(ts, [&P](const std::string& name) {
    return name.starts_with(P) || name.starts_with("lm_head.");
  });
  info_.weight_bytes = totals.bytes;
  info_.parameter_count = totals.parameters;
  info_.kv_bytes_per_token = static_cast<size_t>(spec_.kv_bytes_per_token());
  info_.quantization = totals.quantized ? "quantized" : "bf16";
}

std::unique_ptr<SequenceState> DecoderModel::new_state() const {
  const Device dev = embed_tokens_.weight.device();
  const int64_t nkv = spec_.attn.kv_heads, d = spec_.attn.head_dim;
  auto st = std::make_unique<KvState>();
  for (const auto& l : spec_.layers) {
    if (l.sliding)
      st->caches.emplace_back(std::make_unique<SlidingKvCache>(nkv, d, d, spec_.sliding_window, dev));
    else
      st->caches.emplace_back(std::make_unique<FullKvCache>(nkv, d, d, dev));
  }
  return st;
}

ForwardResult DecoderModel::forward(SequenceState& state, const std::vector<int32_t>& tokens, int64_t n_out,
                                    bool all_hidden) {
  auto& st = static_cast<KvState&>(state);
  const int64_t T = static_cast<int64_t>(tokens.size());
  VATIC_CHECK(T > 0, "forward over no tokens");
  VATIC_CHECK(n_out >= 0 && n_out <= T, "forward: {} outputs requested from {} tokens", n_out, T);
  const Device dev = embed_tokens_.weight.device();
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), static_cast<int32_t>(st.length()));
  Tensor positions = ops::ids(pos, dev);

  Tensor x =
      ops::embedding(embed_tokens_, ops::ids(tokens, dev), spec_.embed_scale > 0 ? spec_.embed_scale : 1.0f);
  for (int i = 0; i < spec_.num_layers; i++) {
    const auto& l = layers_[i];
    Tensor a = blocks::attention(l.attn, l.shape, ops::rms_norm(x, l.input_ln, eps), positions, st.cache(i));
    if (spec_.sandwich_norms) {
      x = ops::add(x, ops::rms_norm(a, l.post_attn_ln, eps));
      Tensor y = ops::rms_norm(x, l.pre_ff_ln, eps);
      Tensor f = spec_.layers[i].moe ? blocks::routed_moe(l.moe, spec_.activation, y)
                                     : blocks::gated_mlp(l.mlp, spec_.activation, y);
      x = ops::add(x, ops::rms_norm(f, l.post_ff_ln, eps));
    } else {
      x = ops::add(x, a);
      Tensor y = ops::rms_norm(x, l.post_attn_ln, eps);
      Tensor f = spec_.layers[i].moe ? blocks::routed_moe(l.moe, spec_.activation, y)
                                     : blocks::gated_mlp(l.mlp, spec_.activation, y);
      x = ops::add(x, f);
    }
  }
  ForwardResult r;
  if (all_hidden) r.hidden = ops::rms_norm(x, final_norm_, eps);
  if (n_out == 0) return r;
  Tensor h = all_hidden ? r.hidden.slice(0, T - n_out, T)
                        : ops::rms_norm(x.slice(0, T - n_out, T), final_norm_, eps);
  if (!all_hidden) r.hidden = h;
  r.logits = ops::matmul(h, lm_head_);
  if (spec_.final_logit_softcap && *spec_.final_logit_softcap > 0)
    r.logits = ops::softcap(r.logits, *spec_.final_logit_softcap);
  return r;
}

QuantPolicyContext DecoderFamily::quant_context(const json& config, const std::string& source,
                                                bool is_draft) const {
  DecoderSpec s = spec(config, source);
  QuantPolicyContext c;
  c.num_layers = s.num_layers;
  c.num_experts = s.num_experts;
  c.is_draft = is_draft;
  c.embedding_is_head = s.tie_word_embeddings;
  return c;
}

std::unique_ptr<LanguageModel> DecoderFamily::load(const json& config, const ModelSource& source,
                                                   std::shared_ptr<const Weights> weights) const {
  return std::make_unique<DecoderModel>(spec(config, source.config.string()), std::move(weights));
}

}  // namespace vatic
