#include "models/gemma4/gemma4_assistant.h"

#include <cmath>
#include <cstdio>

#include "models/weights.h"
#include "ops/ops.h"

namespace vatic {

Gemma4Assistant::Gemma4Assistant(Gemma4Model& target, Gemma4AssistantConfig config,
                                 std::shared_ptr<const Weights> weights)
    : target_(target), cfg_(std::move(config)), weights_(std::move(weights)) {
  const Weights& ts = *weights_;
  VATIC_CHECK(ts.device() == target.device(), "the drafter's weights are on {}, its target on {}", ts.device().str(),
              target.device().str());
  const auto& tc = cfg_.text;
  const auto& target_cfg = target.config();
  const int64_t Ha = tc.hidden_size, BH = cfg_.backbone_hidden_size, V = tc.vocab_size;
  if (BH != target_cfg.hidden_size)
    throw InvalidInput(fmt::format("drafter backbone_hidden_size {} does not match the target's hidden size {}", BH,
                                   target_cfg.hidden_size));
  if (V != target_cfg.vocab_size)
    throw InvalidInput(fmt::format("drafter vocabulary {} does not match the target's {}", V, target_cfg.vocab_size));
  pre_projection_ = load_linear(ts, "pre_projection", Ha, 2 * BH);
  post_projection_ = load_linear(ts, "post_projection", BH, Ha);
  final_norm_ = load_f32(ts, tc.tensor_prefix + "norm.weight", {Ha});
  embed_ = load_linear(ts, tc.tensor_prefix + "embed_tokens", V, Ha);
  if (cfg_.use_ordered_embeddings) {
    centroids_ = load_linear(ts, "masked_embedding.centroids", cfg_.num_centroids, Ha);
    Tensor ord = ts.host("masked_embedding.token_ordering", {V});
    VATIC_CHECK(V % cfg_.num_centroids == 0, "vocabulary of {} does not split into {} clusters", V, cfg_.num_centroids);
    std::vector<int32_t> order(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; i++) {
      const int64_t id = ord.dtype() == DType::I64 ? ord.data<int64_t>()[i] : ord.data<int32_t>()[i];
      if (id < 0 || id >= V) throw InvalidInput(fmt::format("masked_embedding.token_ordering holds {} (vocabulary {})", id, V));
      order[static_cast<size_t>(i)] = static_cast<int32_t>(id);
    }
    token_groups_ = ops::ids(order, ts.device()).reshape({cfg_.num_centroids, V / cfg_.num_centroids});
  }
  graphs_ = graphs_enabled(ts.device());
  layers_.resize(tc.num_layers);
  for (int i = 0; i < tc.num_layers; i++) {
    const auto& lc = tc.layer(i);
    auto& l = layers_[i];
    const std::string p = tc.layer_prefix(i);
    const int64_t nh = tc.num_attention_heads, d = lc.head_dim;
    const int donor = lc.is_sliding ? target_cfg.last_owner_sliding : target_cfg.last_owner_full;
    if (donor < 0)
      throw InvalidInput(fmt::format("the target has no KV-owning {} layer for the drafter to read",
                                     lc.is_sliding ? "sliding" : "full"));
    if (target_cfg.layer(donor).head_dim != d || target_cfg.layer(donor).num_kv_heads != lc.num_kv_heads)
      throw InvalidInput(fmt::format(
          "drafter layer {} (head dim {}, {} KV heads) does not fit target layer {} (head dim {}, {} KV heads)", i, d,
          lc.num_kv_heads, donor, target_cfg.layer(donor).head_dim, target_cfg.layer(donor).num_kv_heads));
    donors_.push_back(donor);
    l = Gemma4Model::load_layer(ts, p, lc, nh, Ha);
  }
}

Tensor Gemma4Assistant::head(const Tensor& y) {
  if (!cfg_.use_ordered_embeddings) return ops::matmul(y, embed_);
  // Centroid-masked head: score the clusters, keep the top ones, score only their tokens; the rest are -inf.
  Tensor cv, ci;
  ops::topk(ops::matmul(y, centroids_), cfg_.centroid_intermediate_top_k, &cv, &ci);  // [1, k]
  return ops::masked_logits(y, embed_, token_groups_, ci);
}

Tensor Gemma4Assistant::io_hidden(const Tensor& io) const {
  const int64_t BH = cfg_.backbone_hidden_size;
  return io.reshape({2 * BH}).slice(0, BH, 2 * BH).reshape({1, BH});
}

Tensor Gemma4Assistant::step(KvState& st, const Tensor& token, const Tensor& positions, const Tensor& io) {
  const auto& tc = cfg_.text;
  const float eps = static_cast<float>(tc.rms_norm_eps);
  target_.embed_into(token, io.slice(1, 0, cfg_.backbone_hidden_size));
  Tensor x = ops::matmul(io, pre_projection_);
  // Each residual add also applies the norm that follows it (the next block's input norm, finally the output norm).
  Tensor xn = ops::rms_norm(x, layers_[0].input_ln, eps);
  for (int i = 0; i < tc.num_layers; i++) {
    const auto& lc = tc.layer(i);
    const auto& l = layers_[i];
    Tensor q = Gemma4Model::attention_queries(l, xn, tc.num_attention_heads, lc.head_dim, positions, eps);
    KvCache& kv = st.cache(donors_[i]);
    AttentionParams ap;
    // Sliding layers see the W+1 most recent target keys, p-W-1 .. p-1 (the query sits at p, whose key does not
    // exist yet). This is what transformers' assistant forward does and what the reference rounds record; the
    // architecture notes suggest W keys, and the fixtures disagree with that past the window.
    ap.window = lc.is_sliding ? target_.config().sliding_window + 2 : 0;
    Tensor o = ops::attention(q, kv.keys(), kv.values(), positions, kv.positions(), ap);
    auto a = ops::matmul_add_rms_norm_norm(o.reshape({1, -1}), l.o, x, l.post_attn_ln, eps, 1.0f, l.pre_ff_ln);
    const Tensor& next = i + 1 < tc.num_layers ? layers_[i + 1].input_ln : final_norm_;
    auto f = ops::matmul_add_rms_norm_norm(Gemma4Model::mlp_hidden(l, a.normed), l.down, a.residual, l.post_ff_ln, eps,
                                           l.layer_scalar, next);
    x = f.residual;
    xn = f.normed;
  }
  const Tensor& y = xn;
  Tensor logits = head(y);
  ops::matmul_into(y, post_projection_, io_hidden(io));  // the projection above has read io's h
  return logits;
}

bool Gemma4Assistant::ready(StepGraph& g, KvState& st, const std::function<void()>& work) {
  if (g.graph && g.state == &st && g.layout == st.layout()) return true;
  const Device dev = target_.device();
  g.graph.reset();
  g.token = backend_for(dev).empty({1}, DType::I32);
  g.position = backend_for(dev).empty({1}, DType::I32);
  g.io = backend_for(dev).empty({1, 2 * cfg_.backbone_hidden_size}, DType::F32);
  try {
    g.graph = ops::record(dev, work);
  } catch (const DeviceError&) {
    throw;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vatic: device graphs are off for the drafter: %s\n", e.what());
    graphs_ = false;
    graph_ = StepGraph{};
    chains_.clear();
    return false;
  }
  g.state = &st;
  g.layout = st.layout();
  return true;
}

void Gemma4Assistant::feed(StepGraph& g, int32_t position, int32_t token, const Tensor& h) {
  const Device dev = target_.device();
  ops::copy_into(ops::ids({position}, dev), g.position);
  ops::copy_into(h.reshape({1, cfg_.backbone_hidden_size}), io_hidden(g.io));
  ops::copy_into(ops::ids({token}, dev), g.token);
}

std::vector<Tensor> Gemma4Assistant::draft(SequenceState& target_state, int32_t last_token, const Tensor& last_hidden,
                                           int steps, const std::function<int32_t(const Tensor& logits)>& choose) {
  auto& st = static_cast<KvState&>(target_state);
  const int32_t p = static_cast<int32_t>(st.length());  // the position of last_token: every step queries here
  const Device dev = target_.device();
  int32_t t = last_token;
  std::vector<Tensor> out;
  if (graphs_ && steps > 0) {
    // The steps replay one recorded graph: it reads the target's caches in place, so it is recorded again when
    // their buffers move.
    StepGraph& g = graph_;
    if (ready(g, st, [&] { g.logits = step(st, g.token, g.position, g.io); })) {
      feed(g, p, t, last_hidden);
      for (int s = 0; s < steps; s++) {
        if (s > 0) ops::copy_into(ops::ids({t}, dev), g.token);
        g.graph->replay();
        Tensor logits = ops::empty_like(g.logits, g.logits.shape());
        ops::copy_into(g.logits, logits);
        out.push_back(logits);
        t = choose(logits);
      }
      return out;
    }
  }
  Tensor positions = ops::ids({p}, dev);
  Tensor io = ops::empty_like(last_hidden, {1, 2 * cfg_.backbone_hidden_size});
  ops::copy_into(last_hidden.reshape({1, cfg_.backbone_hidden_size}), io_hidden(io));
  for (int s = 0; s < steps; s++) {
    out.push_back(step(st, ops::ids({t}, dev), positions, io));
    t = choose(out.back());
  }
  return out;
}

std::vector<int32_t> Gemma4Assistant::draft_greedy(SequenceState& target_state, int32_t last_token,
                                                   const Tensor& last_hidden, int steps) {
  if (!graphs_ || steps <= 0) return Drafter::draft_greedy(target_state, last_token, last_hidden, steps);
  auto& st = static_cast<KvState&>(target_state);
  ChainGraph& g = chains_[steps];
  if (!g.ids.defined()) g.ids = backend_for(target_.device()).empty({steps}, DType::I32);
  const bool recorded = ready(g, st, [&] {
    Tensor t = g.token, value = ops::empty_like(g.io, {1, 1});
    for (int s = 0; s < steps; s++) {
      Tensor logits = step(st, t, g.position, g.io);
      t = g.ids.slice(0, s, s + 1);  // the step's argmax goes straight into the chain's ids
      ops::backend_of(logits).topk(logits, 1, value, t.reshape({1, 1}));
    }
  });
  if (!recorded) return Drafter::draft_greedy(target_state, last_token, last_hidden, steps);
  feed(g, static_cast<int32_t>(st.length()), last_token, last_hidden);
  g.graph->replay();
  Tensor ids = ops::to_host(g.ids);
  return std::vector<int32_t>(ids.data<int32_t>(), ids.data<int32_t>() + steps);
}

}  // namespace vatic
