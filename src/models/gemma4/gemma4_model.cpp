#include "models/gemma4/gemma4_model.h"

#include <cmath>
#include <numeric>

#include "models/weights.h"
#include "ops/ops.h"

namespace vatic {

Tensor Gemma4Model::rope_frequencies(const Gemma4RopeConfig& rope, int head_dim, Device device) {
  // As transformers computes them in float32: theta^(-2i/d) for the rotated pairs, 0 (identity) for the rest.
  const int pairs = head_dim / 2;
  const int rotated = rope.type == "proportional" ? rope.rotated_pairs(head_dim) : pairs;
  std::vector<float> f(pairs, 0.0f);
  const float theta = static_cast<float>(rope.theta);
  for (int i = 0; i < rotated; i++)
    f[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  return ops::floats(f, device);
}

Gemma4Layer Gemma4Model::load_layer(const Weights& ts, const std::string& p, const Gemma4LayerConfig& lc,
                                    int64_t heads, int64_t hidden) {
  Gemma4Layer l;
  const int64_t H = hidden, d = lc.head_dim, I = lc.intermediate_size;
  l.input_ln = load_f32(ts, p + "input_layernorm.weight", {H});
  l.post_attn_ln = load_f32(ts, p + "post_attention_layernorm.weight", {H});
  l.pre_ff_ln = load_f32(ts, p + "pre_feedforward_layernorm.weight", {H});
  l.post_ff_ln = load_f32(ts, p + "post_feedforward_layernorm.weight", {H});
  l.q = load_linear(ts, p + "self_attn.q_proj", heads * d, H);
  l.o = load_linear(ts, p + "self_attn.o_proj", H, heads * d);
  l.q_norm = load_f32(ts, p + "self_attn.q_norm.weight", {d});
  l.gate = load_linear(ts, p + "mlp.gate_proj", I, H);
  l.up = load_linear(ts, p + "mlp.up_proj", I, H);
  l.down = load_linear(ts, p + "mlp.down_proj", H, I);
  l.layer_scalar = ts.has(p + "layer_scalar") ? load_scalar(ts, p + "layer_scalar") : 1.0f;
  l.inv_freq = rope_frequencies(lc.rope, lc.head_dim, ts.device());
  return l;
}

Gemma4Model::Gemma4Model(Gemma4TextConfig config, std::shared_ptr<const Weights> weights)
    : cfg_(std::move(config)), weights_(std::move(weights)) {
  const Weights& ts = *weights_;
  const std::string& P = cfg_.tensor_prefix;
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  embed_tokens_ = load_linear(ts, P + "embed_tokens", V, H);
  lm_head_ = embed_tokens_;
  if (!cfg_.tie_word_embeddings && ts.has("lm_head.weight")) lm_head_ = load_linear(ts, "lm_head", V, H);
  final_norm_ = load_f32(ts, P + "norm.weight", {H});
  const int L = cfg_.num_layers, PL = cfg_.hidden_size_per_layer_input;
  if (PL > 0) {
    embed_per_layer_ = load_linear(ts, P + "embed_tokens_per_layer", cfg_.vocab_size_per_layer_input, L * PL);
    ple_model_proj_ = load_linear(ts, P + "per_layer_model_projection", L * PL, H);
    ple_norm_ = load_f32(ts, P + "per_layer_projection_norm.weight", {PL});
  }
  layers_.resize(L);
  for (int i = 0; i < L; i++) {
    const auto& lc = cfg_.layer(i);
    auto& l = layers_[i];
    const std::string p = cfg_.layer_prefix(i);
    const int64_t d = lc.head_dim, nkv = lc.num_kv_heads;
    l = load_layer(ts, p, lc, cfg_.num_attention_heads, H);
    if (!lc.kv_shared) {
      l.k = load_linear(ts, p + "self_attn.k_proj", nkv * d, H);
      if (!lc.k_eq_v) l.v = load_linear(ts, p + "self_attn.v_proj", nkv * d, H);
      l.k_norm = load_f32(ts, p + "self_attn.k_norm.weight", {d});
    }
    if (cfg_.enable_moe_block) {
      const int64_t E = cfg_.num_experts, MI = cfg_.moe_intermediate_size;
      l.pre_ff_ln2 = load_f32(ts, p + "pre_feedforward_layernorm_2.weight", {H});
      l.post_ff_ln1 = load_f32(ts, p + "post_feedforward_layernorm_1.weight", {H});
      l.post_ff_ln2 = load_f32(ts, p + "post_feedforward_layernorm_2.weight", {H});
      l.router = load_linear(ts, p + "router.proj", E, H);
      l.router_scale = load_f32(ts, p + "router.scale", {H});
      l.routing.gating = RouteParams::Softmax;
      l.routing.top_k = cfg_.top_k_experts;
      l.routing.renormalize = true;
      l.routing.expert_scale = load_f32(ts, p + "router.per_expert_scale", {E});
      l.experts_gate_up = load_stacked(ts, p + "experts.gate_up_proj", E, 2 * MI, H);
      l.experts_down = load_stacked(ts, p + "experts.down_proj", E, H, MI);
    }
    if (PL > 0) {
      l.ple_gate = load_linear(ts, p + "per_layer_input_gate", PL, H);
      l.ple_proj = load_linear(ts, p + "per_layer_projection", H, PL);
      l.post_ple_norm = load_f32(ts, p + "post_per_layer_input_norm.weight", {H});
    }
  }

  info_.architecture = cfg_.architecture;
  info_.vocab_size = V;
  info_.hidden_size = H;
  info_.context_length = cfg_.max_position_embeddings;
  for (auto e : cfg_.eos_token_ids) info_.eos_ids.push_back(static_cast<int32_t>(e));
  info_.bos_id = cfg_.bos_token_id ? static_cast<int32_t>(*cfg_.bos_token_id) : -1;
  // The text model (not the vision / audio towers).
  const WeightTotals totals =
      count_weights(ts, [&P](const std::string& name) { return name.starts_with(P); });
  info_.weight_bytes = totals.bytes;
  info_.parameter_count = totals.parameters;
  info_.kv_bytes_per_token = static_cast<size_t>(cfg_.kv_bytes_per_token());
  info_.quantization = totals.quantized ? "quantized" : "bf16";
  graphs_ = std::make_unique<ForwardGraphs>(device());
}

std::unique_ptr<SequenceState> Gemma4Model::new_state() const {
  auto st = std::make_unique<KvState>();
  for (int i = 0; i < cfg_.num_layers; i++) {
    const auto& lc = cfg_.layer(i);
    if (lc.kv_shared) {
      st->caches.emplace_back(nullptr);
    } else if (lc.is_sliding) {
      st->caches.emplace_back(std::make_unique<SlidingKvCache>(lc.num_kv_heads, lc.head_dim, lc.head_dim,
                                                               cfg_.sliding_window, device()));
    } else {
      st->caches.emplace_back(std::make_unique<FullKvCache>(lc.num_kv_heads, lc.head_dim, lc.head_dim, device()));
    }
  }
  return st;
}

Tensor Gemma4Model::embed(const Tensor& ids) const { return ops::embedding(embed_tokens_, ids, cfg_.embed_scale()); }
void Gemma4Model::embed_into(const Tensor& ids, const Tensor& out) const {
  ops::embedding_into(embed_tokens_, ids, cfg_.embed_scale(), out);
}

Tensor Gemma4Model::attention_queries(const Gemma4Layer& l, const Tensor& a, int64_t heads, int64_t head_dim,
                                      const Tensor& positions, float eps) {
  Tensor q = ops::matmul(a, l.q);
  return ops::rms_norm_rope(q.reshape({q.dim(0), heads, head_dim}), l.q_norm, eps, positions, l.inv_freq, false);
}

Tensor Gemma4Model::mlp_hidden(const Gemma4Layer& l, const Tensor& y) {
  return ops::matmul_gated(y, l.gate, l.up, Unary::GeluTanh);
}

Tensor Gemma4Model::mlp(const Gemma4Layer& l, const Tensor& y) { return ops::matmul(mlp_hidden(l, y), l.down); }

Tensor Gemma4Model::attention_block(int i, const Tensor& a, const Tensor& positions, KvState& st) {
  const auto& lc = cfg_.layer(i);
  const auto& l = layers_[i];
  const int64_t T = a.dim(0), nh = cfg_.num_attention_heads, d = lc.head_dim, nkv = lc.num_kv_heads;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  Tensor q;
  if (lc.kv_shared) {
    q = attention_queries(l, a, nh, d, positions, eps);
  } else {
    // The query, key and value projections in one op.
    std::vector<const Linear*> ws = {&l.q, &l.k};
    if (!lc.k_eq_v) ws.push_back(&l.v);
    std::vector<Tensor> p = ops::matmul_many(a, ws);
    Tensor kraw = p[1].reshape({T, nkv, d});
    Tensor vraw = lc.k_eq_v ? kraw : p[2].reshape({T, nkv, d});
    // The queries' and keys' norms and rotations and the values' weight-less norm, in one op that writes the keys
    // and values into the cache.
    st.cache(i).append_with(T, [&](const KvSlots& slots) {
      q = ops::rms_norm_rope_many(
          {{p[0].reshape({T, nh, d}), l.q_norm, true}, {kraw, l.k_norm, true}, {vraw, Tensor(), false}}, eps,
          positions, l.inv_freq, false, &slots)[0];
    });
  }
  KvCache& kv = st.cache(lc.kv_donor);
  AttentionParams ap;
  ap.scale = 1.0f;
  ap.window = lc.is_sliding ? cfg_.sliding_window : 0;
  return ops::attention(q, kv.keys(), kv.values(), positions, kv.positions(), ap).reshape({T, nh * d});
}

ops::ResidualAndNorms Gemma4Model::moe_inputs(const Gemma4Layer& l, const Tensor& x, const Tensor& attn_out) {
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const float router_scale = 1.0f / std::sqrt(static_cast<float>(cfg_.hidden_size));
  // The router's norm is weight-less, times its learned scale, times H^-1/2: the scale taken as the norm's
  // weight gives the same products.
  return ops::add_rms_norm_many(x, attn_out, l.post_attn_ln, eps, 1.0f,
                                {{l.pre_ff_ln, 1.0f}, {l.router_scale, router_scale}, {l.pre_ff_ln2, 1.0f}});
}

Gemma4Model::MoeBranches Gemma4Model::moe_branches(const Gemma4Layer& l, const std::vector<Tensor>& in) {
  const int64_t MI = cfg_.moe_intermediate_size;
  Tensor dense = mlp(l, in[0]);
  Tensor weights, experts;
  blocks::route_experts(ops::matmul(in[1], l.router), l.routing, &weights, &experts);
  // The gate and up halves of each routed row in one op, [T·K, MI].
  Tensor act = ops::matmul_experts_gated(in[2], l.experts_gate_up.rows(0, MI),
                                         l.experts_gate_up.rows(MI, 2 * MI), experts, Unary::GeluTanh);
  return {dense, {ops::matmul_experts(act, l.experts_down, experts), weights}};
}

Tensor Gemma4Model::per_layer_inputs(const Tensor& ids, const Tensor& x0) {
  const int64_t T = x0.dim(0), L = cfg_.num_layers, PL = cfg_.hidden_size_per_layer_input;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  Tensor tok = ops::embedding(embed_per_layer_, ids, std::sqrt(static_cast<float>(PL)));
  Tensor ctx = ops::scale(ops::matmul(x0, ple_model_proj_), 1.0f / std::sqrt(static_cast<float>(cfg_.hidden_size)));
  ctx = ops::rms_norm(ctx.reshape({T, L, PL}), ple_norm_, eps);
  return ops::scale(ops::add(ctx, tok.reshape({T, L, PL})), 1.0f / std::sqrt(2.0f));
}

ForwardResult Gemma4Model::forward(SequenceState& state, const std::vector<int32_t>& tokens, int64_t n_out,
                                   bool all_hidden) {
  return graphs_->run(static_cast<KvState&>(state), tokens, n_out, all_hidden,
                      [this](KvState& st, const std::vector<int32_t>& t, int64_t n, bool all) {
                        return forward_eager(st, t, n, all);
                      });
}

ForwardResult Gemma4Model::forward_eager(KvState& st, const std::vector<int32_t>& tokens, int64_t n_out,
                                         bool all_hidden) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const StepInputs in = step_inputs(tokens, st.length(), device());
  const Tensor& ids = in.ids;
  const Tensor& positions = in.positions;

  Tensor x = embed(ids);
  Tensor ple;
  // Per-layer inputs laid out [L, T, P] (one copy), so that each layer's rows are contiguous.
  if (cfg_.hidden_size_per_layer_input > 0) ple = ops::contiguous(per_layer_inputs(ids, x).transpose(0, 1));
  // Each residual add also applies the norm that follows it: the feed-forward's input norm, the next layer's input
  // norm, after the last layer the output norm (row by row, so the rows a caller keeps are unchanged by it).
  Tensor xn = ops::rms_norm(x, layers_[0].input_ln, eps);
  // Each output projection (attention's, the MLP's down projection, the per-layer input's) is one op with the
  // residual add after it.
  for (int i = 0; i < cfg_.num_layers; i++) {
    const auto& l = layers_[i];
    const Tensor attn = attention_block(i, xn, positions, st);
    const Tensor& next = i + 1 < cfg_.num_layers ? layers_[i + 1].input_ln : final_norm_;
    // The layer's last residual add (the feed-forward's, or the per-layer input's after it) also applies its scalar.
    ops::ResidualAndNorm o;
    if (cfg_.enable_moe_block) {
      // The attention's residual add with the three norms of its result that the branches take, in one op; at
      // the end both branches normed, summed, normed again and added to the residual (with the next norm) in
      // one op.
      const ops::ResidualAndNorms a = moe_inputs(l, x, ops::matmul(attn, l.o));
      x = a.residual;
      const MoeBranches m = moe_branches(l, a.normed);
      o = ops::combine_post_norms(m.routed.rows, m.routed.weights, m.dense, l.post_ff_ln1, l.post_ff_ln2, x,
                                  l.post_ff_ln, eps, ple.defined() ? 1.0f : l.layer_scalar, !ple.defined(), next);
      if (ple.defined()) x = o.residual;
    } else {
      auto a = ops::matmul_add_rms_norm_norm(attn, l.o, x, l.post_attn_ln, eps, 1.0f, l.pre_ff_ln);
      x = a.residual;
      if (ple.defined())
        x = ops::matmul_add_rms_norm(mlp_hidden(l, a.normed), l.down, x, l.post_ff_ln, eps);
      else
        o = ops::matmul_add_rms_norm_norm(mlp_hidden(l, a.normed), l.down, x, l.post_ff_ln, eps,
                                          l.layer_scalar, next);
    }
    if (ple.defined())
      o = ops::matmul_add_rms_norm_norm(ops::matmul_gated(x, l.ple_gate, ple.select(0, i), Unary::GeluTanh),
                                        l.ple_proj, x, l.post_ple_norm, eps, l.layer_scalar, next);
    x = o.residual;
    xn = o.normed;
  }
  ForwardResult r;
  if (all_hidden) r.hidden = xn;
  if (n_out == 0) return r;
  Tensor h = xn.slice(0, T - n_out, T);
  if (!all_hidden) r.hidden = h;
  r.logits = ops::matmul(h, lm_head_);
  if (cfg_.final_logit_softcapping && *cfg_.final_logit_softcapping > 0)
    r.logits = ops::softcap(r.logits, static_cast<float>(*cfg_.final_logit_softcapping));
  return r;
}

}  // namespace vatic
