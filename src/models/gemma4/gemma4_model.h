#pragma once
// Gemma 4 text decoder (E2B/E4B with per-layer embeddings and KV sharing, 26B-A4B with MoE, 31B dense).
// See docs/model-architectures.md §1 for the equations.
#include <memory>
#include <vector>

#include "backend/linear.h"
#include "models/blocks.h"
#include "models/forward_graphs.h"
#include "models/gemma4/gemma4_config.h"
#include "models/kv_state.h"
#include "models/model.h"
#include "models/weights.h"
#include "ops/ops.h"

namespace vatic {

struct Gemma4Layer {
  Tensor input_ln, post_attn_ln, pre_ff_ln, post_ff_ln;  // F32 [H]
  Linear q, k, v, o;                                     // k/v undefined on KV-shared layers; v on K=V layers
  Tensor q_norm, k_norm;                                 // F32 [d]
  Linear gate, up, down;                                 // dense MLP
  // MoE (26B-A4B): routed experts beside the dense MLP.
  Tensor pre_ff_ln2, post_ff_ln1, post_ff_ln2, router_scale;
  Linear router, experts_gate_up, experts_down;
  blocks::MoeRouting routing;  // softmax top-k, renormalised, times router.per_expert_scale
  // Per-layer embeddings.
  Linear ple_gate, ple_proj;
  Tensor post_ple_norm;
  float layer_scalar = 1.0f;
  Tensor inv_freq;  // F32 [d/2]
};

class Gemma4Model final : public LanguageModel {
 public:
  Gemma4Model(Gemma4TextConfig config, std::shared_ptr<const Weights> weights);

  const ModelTraits& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_state() const override;
  ForwardResult forward(SequenceState& state, const std::vector<int32_t>& tokens, int64_t n_out,
                        bool all_hidden = false) override;

  const Gemma4TextConfig& config() const { return cfg_; }
  // The target's scaled token embedding (the assistant drafter is fed with it).
  Tensor embed(const Tensor& ids) const;
  // The same into out [n, H] (rows of unit stride, e.g. the first columns of a wider row).
  void embed_into(const Tensor& ids, const Tensor& out) const;
  Device device() const override { return weights_->device(); }
  const Gemma4Layer& layer(int i) const { return layers_.at(static_cast<size_t>(i)); }
  size_t recorded_graphs() const override { return graphs_->graphs(); }

  // Shared by the assistant drafter: one Gemma 4 attention + MLP layer over caches it does not own.
  static Tensor attention_queries(const Gemma4Layer& l, const Tensor& a, int64_t heads, int64_t head_dim,
                                  const Tensor& positions, float eps);
  static Tensor mlp(const Gemma4Layer& l, const Tensor& y);
  // The MLP before its down projection, act(y · gateᵀ) ⊙ (y · upᵀ): the down projection goes with the residual add
  // that follows it (ops::matmul_add_rms_norm).
  static Tensor mlp_hidden(const Gemma4Layer& l, const Tensor& y);
  static Tensor rope_frequencies(const Gemma4RopeConfig& rope, int head_dim, Device device);
  // What every Gemma 4 layer has: norms, Q/O projections and Q norm, the dense MLP, layer_scalar, RoPE table.
  static Gemma4Layer load_layer(const Weights& ts, const std::string& prefix, const Gemma4LayerConfig& lc,
                                int64_t heads, int64_t hidden);

 private:
  ForwardResult forward_eager(KvState& st, const std::vector<int32_t>& tokens, int64_t n_out, bool all_hidden);
  // The attention heads' output [T, heads · head_dim], before the output projection (which goes with the residual
  // add that follows it).
  Tensor attention_block(int i, const Tensor& a, const Tensor& positions, KvState& st);
  // A mixture layer's residual after its attention (x plus the normed attention output) and the three norms
  // of it that the branches take: the dense MLP's input, the router's input and the experts' input.
  ops::ResidualAndNorms moe_inputs(const Gemma4Layer& l, const Tensor& x, const Tensor& attn_out);
  // The mixture layer's two branches before their norms, from moe_inputs' norms: the dense MLP's output and
  // each token's routed rows with their weights (ops::combine_post_norms ends the layer).
  struct MoeBranches {
    Tensor dense;
    blocks::RoutedRows routed;
  };
  MoeBranches moe_branches(const Gemma4Layer& l, const std::vector<Tensor>& in);
  Tensor per_layer_inputs(const Tensor& ids, const Tensor& x0);  // [T, L, P]

  Gemma4TextConfig cfg_;
  std::shared_ptr<const Weights> weights_;
  ModelTraits info_;
  Linear embed_tokens_;  // [V, H], also the tied LM head
  Linear lm_head_;
  Tensor final_norm_;
  Linear embed_per_layer_;
  Tensor ple_norm_;
  Linear ple_model_proj_;
  std::vector<Gemma4Layer> layers_;
  std::unique_ptr<ForwardGraphs> graphs_;
};

}  // namespace vatic
