#include "models/glm4_moe_lite/glm4_moe_lite_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "models/step_inputs.h"
#include "models/weights.h"
#include "ops/ops.h"

namespace vatic {

namespace {

// q_a_layernorm / kv_a_layernorm are built without an eps in transformers: its default 1e-6 applies.
constexpr float kLoraNormEps = 1e-6f;

// Dense transposes of W_UK[h] (rows h·(nope+v) .. h·(nope+v)+nope of kv_b) for every head: [nh, kv_lora, nope].
// Computed as I · W_UK[h]ᵀ through the device's matmul, so quantized kv_b works the same as dense.
Linear absorbed_uk(const Linear& kv_b, int64_t nh, int64_t nope, int64_t v, int64_t kv_lora) {
  std::vector<float> eye(static_cast<size_t>(kv_lora * kv_lora), 0.0f);
  for (int64_t i = 0; i < kv_lora; i++) eye[static_cast<size_t>(i * kv_lora + i)] = 1.0f;
  Tensor I = ops::floats(eye, kv_b.weight.device()).reshape({kv_lora, kv_lora});
  // Dense bf16/f16 weights transpose exactly in their own dtype; dequantized ones are kept in f32.
  const DType dt = kv_b.quantized() ? DType::F32 : kv_b.weight.dtype();
  Linear out;
  out.weight = ops::empty_like(I, {nh, kv_lora, nope}, dt);
  for (int64_t h = 0; h < nh; h++) {
    Tensor t = ops::matmul(I, kv_b.rows(h * (nope + v), h * (nope + v) + nope));  // [kv_lora, nope]
    ops::copy_into(t, out.weight.select(0, h));
  }
  return out;
}

}  // namespace

Glm4MoeLiteModel::Glm4MoeLiteModel(Glm4MoeLiteConfig config, std::shared_ptr<const Weights> weights)
    : cfg_(std::move(config)), weights_(std::move(weights)) {
  const Weights& ts = *weights_;
  const std::string& P = cfg_.tensor_prefix;
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  embed_tokens_ = ts.require(P + "embed_tokens.weight", {V, H});
  if (cfg_.tie_word_embeddings && !ts.has("lm_head.weight"))
    lm_head_.weight = embed_tokens_;
  else
    lm_head_ = load_linear(ts, "lm_head", V, H);
  final_norm_ = load_f32(ts, P + "norm.weight", {H});

  const int rope = cfg_.qk_rope_head_dim;
  std::vector<float> f(static_cast<size_t>(rope / 2));
  for (int i = 0; i < rope / 2; i++)
    f[static_cast<size_t>(i)] =
        1.0f / std::pow(static_cast<float>(cfg_.rope_theta), static_cast<float>(2 * i) / static_cast<float>(rope));
  inv_freq_ = ops::floats(f, device());

  layers_.reserve(static_cast<size_t>(cfg_.num_layers));
  for (int i = 0; i < cfg_.num_layers; i++) {
    layers_.push_back(load_layer(cfg_.layer_prefix(i)));
    VATIC_CHECK(layers_.back().ffn.moe == cfg_.is_moe(i), "{}: layer {} is {} in config.json but its tensors are {}",
                cfg_.source.string(), i, cfg_.is_moe(i) ? "sparse" : "dense", layers_.back().ffn.moe ? "MoE" : "dense");
  }

  info_.architecture = kGlm4MoeLiteArchitecture;
  info_.vocab_size = V;
  info_.hidden_size = H;
  info_.context_length = cfg_.max_position_embeddings;
  for (auto e : cfg_.eos_token_ids) info_.eos_ids.push_back(static_cast<int32_t>(e));
  info_.bos_id = cfg_.bos_token_id ? static_cast<int32_t>(*cfg_.bos_token_id) : -1;
  // The main model only: the MTP layers (model.layers.L.. for L >= num_hidden_layers) belong to the drafter.
  const WeightTotals totals = count_weights(ts, [this, lp = P + "layers."](const std::string& name) {
    return !(name.starts_with(lp) && std::atoi(name.c_str() + lp.size()) >= cfg_.num_layers);
  });
  info_.weight_bytes = totals.bytes;
  info_.parameter_count = totals.parameters;
  info_.kv_bytes_per_token = static_cast<size_t>(cfg_.kv_bytes_per_token());
  info_.quantization = totals.quantized ? "quantized" : dtype_name(embed_tokens_.dtype());
  std::transform(info_.quantization.begin(), info_.quantization.end(), info_.quantization.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  head_ids(64);  // made now: a graph being recorded may not upload it
  graphs_ = std::make_unique<ForwardGraphs>(device());
}

Glm4LayerWeights Glm4MoeLiteModel::load_layer(const std::string& p) const {
  const Weights& ts = *weights_;
  const int64_t H = cfg_.hidden_size, nh = cfg_.num_attention_heads, nope = cfg_.qk_nope_head_dim,
                rope = cfg_.qk_rope_head_dim, v = cfg_.v_head_dim, kvl = cfg_.kv_lora_rank, dqk = nope + rope;
  Glm4LayerWeights l;
  l.input_ln = load_f32(ts, p + "input_layernorm.weight", {H});
  l.post_attn_ln = load_f32(ts, p + "post_attention_layernorm.weight", {H});
  auto& a = l.attn;
  const std::string s = p + "self_attn.";
  if (cfg_.q_lora_rank) {
    const int64_t ql = *cfg_.q_lora_rank;
    a.q_a = load_linear(ts, s + "q_a_proj", ql, H);
    a.q_a_norm = load_f32(ts, s + "q_a_layernorm.weight", {ql});
    a.q_b = load_linear(ts, s + "q_b_proj", nh * dqk, ql);
  } else {
    a.q = load_linear(ts, s + "q_proj", nh * dqk, H);
  }
  a.kv_a = load_linear(ts, s + "kv_a_proj_with_mqa", kvl + rope, H);
  a.kv_a_norm = load_f32(ts, s + "kv_a_layernorm.weight", {kvl});
  a.kv_b = load_linear(ts, s + "kv_b_proj", nh * (nope + v), kvl);
  a.uk_t = absorbed_uk(a.kv_b, nh, nope, v, kvl);
  // W_UV[h] = rows h·(nope+v)+nope .. (h+1)·(nope+v) of kv_b: a per-head stacked view, no copy.
  a.uv = a.kv_b;
  a.uv.weight = a.kv_b.weight.reshape({nh, nope + v, a.kv_b.weight.dim(-1)});
  if (a.kv_b.quantized()) {
    a.uv.scales = a.kv_b.scales.reshape({nh, nope + v, a.kv_b.scales.dim(-1)});
    a.uv.biases = a.kv_b.biases.reshape({nh, nope + v, a.kv_b.biases.dim(-1)});
  }
  a.uv = a.uv.rows(nope, nope + v);
  a.o = load_linear(ts, s + "o_proj", H, nh * v);

  auto& f = l.ffn;
  const std::string m = p + "mlp.";
  f.moe = ts.has(m + "gate.weight");
  if (!f.moe) {
    f.mlp = blocks::load_mlp(ts, m, cfg_.intermediate_size, H);
    return l;
  }
  const int64_t E = cfg_.n_routed_experts, I = cfg_.moe_intermediate_size;
  f.routed = blocks::load_routed_moe(ts, m, E, I, H, routing());
  if (cfg_.n_shared_experts > 0)
    f.mlp = blocks::load_mlp(ts, m + "shared_experts.", I * cfg_.n_shared_experts, H);
  return l;
}

std::unique_ptr<SequenceState> Glm4MoeLiteModel::new_state() const {
  auto st = std::make_unique<KvState>();
  for (int i = 0; i < cfg_.num_layers; i++)
    st->caches.emplace_back(
        std::make_unique<FullKvCache>(1, cfg_.kv_lora_rank + cfg_.qk_rope_head_dim, 0, device()));
  return st;
}

Tensor Glm4MoeLiteModel::rms(const Tensor& x, const Tensor& w) const {
  return ops::rms_norm(x, w, static_cast<float>(cfg_.rms_norm_eps));
}

Tensor Glm4MoeLiteModel::attention(const Glm4MlaWeights& a, const Tensor& x, const Tensor& rope_pos,
                                   const Tensor& slot_pos, KvCache& cache) const {
  const int64_t T = x.dim(0), nh = cfg_.num_attention_heads, nope = cfg_.qk_nope_head_dim,
                rope = cfg_.qk_rope_head_dim, v = cfg_.v_head_dim, kvl = cfg_.kv_lora_rank, dqk = nope + rope;
  const bool il = cfg_.rope_interleave;
  // Queries [T, nh, nope + rope] and the latent [T, kvl + rope] from projections of x in one op.
  Tensor q, ckv;
  if (a.q_a.defined()) {
    std::vector<Tensor> y = ops::matmul_many(x, {&a.q_a, &a.kv_a});
    q = ops::matmul(ops::rms_norm(y[0], a.q_a_norm, kLoraNormEps), a.q_b);
    ckv = y[1];
  } else {
    std::vector<Tensor> y = ops::matmul_many(x, {&a.q, &a.kv_a});
    q = y[0];
    ckv = y[1];
  }
  q = q.reshape({T, nh, dqk});

  // Absorbed queries [T, nh, kvl + rope]: W_UK[h]ᵀ q_nope_h beside the rotated q_rot_h. One op puts each token's
  // cache entry [normed latent c | roped shared key] into its slot and the rotated q_rot into the absorbed query;
  // the per-head product reads q_nope from q and writes into qa where it belongs (rows of a wider tensor).
  Tensor qa = ops::empty_like(q, {T, nh, kvl + rope});
  cache.append_with(T, [&](const KvSlots& s) {
    ops::latent_entry(ckv, a.kv_a_norm, kLoraNormEps, q.slice(2, nope, dqk), qa.slice(2, kvl, kvl + rope), rope_pos,
                      slot_pos, inv_freq_, il, s);
  });
  ops::matmul_experts_into(q.reshape({T * nh, dqk}).slice(1, 0, nope), a.uk_t, head_ids(T),
                           qa.reshape({T * nh, kvl + rope}).slice(1, 0, kvl));
  Tensor keys = cache.keys();  // [S, 1, kvl + rope]
  AttentionParams ap;
  ap.scale = static_cast<float>(cfg_.attention_scale());
  Tensor lat = ops::attention(qa, keys, keys.slice(2, 0, kvl), slot_pos, cache.positions(), ap);  // [T, nh, kvl]

  // W_UV[h] · latent for every head in one call, then o_proj.
  Tensor heads = ops::matmul_experts(lat.reshape({T * nh, kvl}), a.uv, head_ids(T)).reshape({T, nh * v});
  return ops::matmul(heads, a.o);
}

blocks::MoeRouting Glm4MoeLiteModel::routing() const {
  // Sigmoid scores, chosen by score + correction bias within the best groups, weighted by the unbiased scores
  // (renormalised when norm_topk_prob) times routed_scaling_factor.
  blocks::MoeRouting r;
  r.gating = RouteParams::Sigmoid;
  r.top_k = cfg_.num_experts_per_tok;
  r.renormalize = cfg_.norm_topk_prob;
  r.scale = static_cast<float>(cfg_.routed_scaling_factor);
  r.groups = cfg_.n_group;
  r.groups_kept = cfg_.topk_group;
  return r;
}

ops::ResidualAndNorm Glm4MoeLiteModel::ffn_step(const Glm4FfnWeights& f, const Tensor& h, const Tensor& hn,
                                                const Tensor& next_norm) const {
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  if (!f.moe) {
    Tensor out = blocks::gated_mlp(f.mlp, Unary::Silu, hn);
    if (!next_norm.defined()) return {ops::add(h, out), Tensor()};
    return ops::add_norm(h, out, next_norm, eps);
  }
  // The routed experts' rows are summed, the shared experts' output added and the residual with it in one op.
  blocks::RoutedRows r = blocks::routed_moe_rows(f.routed, Unary::Silu, hn);
  const Tensor shared = f.mlp.gate.defined() ? blocks::gated_mlp(f.mlp, Unary::Silu, hn) : Tensor();
  ops::ResidualAndNorm out = ops::combine_add_norm(r.rows, r.weights, shared, h, next_norm, eps);
  if (!next_norm.defined()) out.normed = Tensor();
  return out;
}

Tensor Glm4MoeLiteModel::head_ids(int64_t T) const {
  const int64_t nh = cfg_.num_attention_heads;
  if (!head_ids_.defined() || head_ids_.numel() < T * nh) {
    int64_t cap = 64;
    while (cap < T) cap *= 2;
    std::vector<int32_t> ids(static_cast<size_t>(cap * nh));
    for (size_t i = 0; i < ids.size(); i++) ids[i] = static_cast<int32_t>(static_cast<int64_t>(i) % nh);
    head_ids_ = ops::ids(ids, device());
  }
  return head_ids_.slice(0, 0, T * nh);
}

Tensor Glm4MoeLiteModel::layer_forward(const Glm4LayerWeights& l, const Tensor& x, const Tensor& rope_pos,
                                       const Tensor& slot_pos, KvCache& cache) const {
  return layer_step(l, x, Tensor(), rope_pos, slot_pos, cache, Tensor()).residual;
}

ops::ResidualAndNorm Glm4MoeLiteModel::layer_step(const Glm4LayerWeights& l, const Tensor& x, const Tensor& xn,
                                                  const Tensor& rope_pos, const Tensor& slot_pos, KvCache& cache,
                                                  const Tensor& next_norm) const {
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  auto [h, hn] = ops::add_norm(x, attention(l.attn, xn.defined() ? xn : rms(x, l.input_ln), rope_pos, slot_pos, cache),
                               l.post_attn_ln, eps);
  return ffn_step(l.ffn, h, hn, next_norm);
}

ForwardResult Glm4MoeLiteModel::forward(SequenceState& state, const std::vector<int32_t>& tokens, int64_t n_out,
                                        bool all_hidden) {
  return graphs_->run(static_cast<KvState&>(state), tokens, n_out, all_hidden,
                      [this](KvState& st, const std::vector<int32_t>& t, int64_t n, bool all) {
                        return forward_eager(st, t, n, all);
                      });
}

ForwardResult Glm4MoeLiteModel::forward_eager(KvState& st, const std::vector<int32_t>& tokens, int64_t n_out,
                                              bool all_hidden) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const StepInputs in = step_inputs(tokens, st.length(), device());
  const Tensor& positions = in.positions;
  Tensor x = ops::embedding(embed_tokens_, in.ids);
  Tensor xn;  // the next layer's normed input, made with the residual add before it
  for (int i = 0; i < cfg_.num_layers; i++) {
    const Tensor next_norm = i + 1 < cfg_.num_layers ? layers_[i + 1].input_ln : Tensor();
    ops::ResidualAndNorm r = layer_step(layers_[i], x, xn, positions, positions, st.cache(i), next_norm);
    x = r.residual;
    xn = r.normed;
  }

  ForwardResult r;
  if (all_hidden) r.hidden = rms(x, final_norm_);
  if (n_out == 0) return r;
  Tensor h = all_hidden ? r.hidden.slice(0, T - n_out, T) : rms(x.slice(0, T - n_out, T), final_norm_);
  if (!all_hidden) r.hidden = h;
  r.logits = ops::matmul(h, lm_head_);
  return r;
}

}  // namespace vatic
