#pragma once
// GLM4-MoE-Lite (GLM-4.7-Flash): DeepSeek-style MLA attention over a compressed latent cache, sigmoid-routed MoE
// with a shared expert, untied head. See docs/model-architectures.md §3 for the equations.
//
// The cache keeps, per token and layer, only the normed latent c [kv_lora] and the roped shared key k_rot [rope]
// (one FullKvCache of 1 head × (kv_lora + rope) and no value part). Attention runs in the absorbed form:
// q̃_h = W_UK[h]ᵀ q_nope_h, scores over [q̃_h | q_rot_h] · [c | k_rot] with every head sharing the single KV head, and
// W_UV[h] applied to the weighted sum of latents.
#include <memory>
#include <string>
#include <vector>

#include "backend/linear.h"
#include "models/blocks.h"
#include "models/forward_graphs.h"
#include "models/glm4_moe_lite/glm4_moe_lite_config.h"
#include "models/kv_state.h"
#include "models/weights.h"
#include "models/model.h"
#include "ops/ops.h"

namespace vatic {

struct Glm4MlaWeights {
  Linear q_a, q_b;   // q LoRA (q_lora_rank set)
  Tensor q_a_norm;   // F32 [q_lora]
  Linear q;          // plain q_proj (q_lora_rank null)
  Linear kv_a;       // [kv_lora + rope, H]
  Tensor kv_a_norm;  // F32 [kv_lora]
  Linear kv_b;       // [nh * (nope + v), kv_lora]: per head W_UK [nope rows] then W_UV [v rows]
  Linear uk_t;       // [nh, kv_lora, nope]: W_UK[h]ᵀ per head (dense), for the absorbed queries
  Linear uv;         // [nh, v, kv_lora]: W_UV[h] per head (a strided view of kv_b)
  Linear o;          // [H, nh * v]
};

struct Glm4FfnWeights {
  bool moe = false;
  blocks::Mlp mlp;           // dense MLP, or the shared expert(s) of a MoE layer (undefined when none)
  blocks::RoutedMoe routed;  // sigmoid-routed experts of a MoE layer
};

struct Glm4LayerWeights {
  Tensor input_ln, post_attn_ln;  // F32 [H]
  Glm4MlaWeights attn;
  Glm4FfnWeights ffn;
};

class Glm4MoeLiteModel final : public LanguageModel {
 public:
  Glm4MoeLiteModel(Glm4MoeLiteConfig config, std::shared_ptr<const Weights> weights);

  const ModelTraits& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_state() const override;
  ForwardResult forward(SequenceState& state, const std::vector<int32_t>& tokens, int64_t n_out,
                        bool all_hidden = false) override;

  size_t recorded_graphs() const override { return graphs_->graphs(); }

  const Glm4MoeLiteConfig& config() const { return cfg_; }
  const std::shared_ptr<const Weights>& weights() const { return weights_; }
  Device device() const override { return weights_->device(); }
  const Tensor& embed_tokens() const { return embed_tokens_; }
  const Linear& lm_head() const { return lm_head_; }

  // Loads one decoder block under prefix P ("model.layers.N."); MoE when P + "mlp.gate.weight" exists.
  Glm4LayerWeights load_layer(const std::string& prefix) const;
  // One decoder block over x [T, H]: appends T entries to `cache`; `rope_pos` are the RoPE positions of the rows,
  // `slot_pos` their positions for causal masking in the cache (equal for the target). Returns the new residual.
  Tensor layer_forward(const Glm4LayerWeights& l, const Tensor& x, const Tensor& rope_pos, const Tensor& slot_pos,
                       KvCache& cache) const;
  // layer_forward with the input norm `xn` already made (undefined: made here), and with the residual's norm by
  // `next_norm` (the next block's input norm) made in the same op as the last residual add when it is defined.
  ops::ResidualAndNorm layer_step(const Glm4LayerWeights& l, const Tensor& x, const Tensor& xn, const Tensor& rope_pos,
                                  const Tensor& slot_pos, KvCache& cache, const Tensor& next_norm) const;
  Tensor rms(const Tensor& x, const Tensor& w) const;  // RMSNorm with rms_norm_eps

 private:
  Tensor attention(const Glm4MlaWeights& a, const Tensor& x, const Tensor& rope_pos, const Tensor& slot_pos,
                   KvCache& cache) const;
  // The feed-forward block over hn (the normed residual h) added to h, with next_norm's norm of the sum as
  // layer_step makes it.
  ops::ResidualAndNorm ffn_step(const Glm4FfnWeights& f, const Tensor& h, const Tensor& hn,
                                const Tensor& next_norm) const;
  blocks::MoeRouting routing() const;  // the config's sigmoid routing (without the per-layer score bias)
  // I32 [T·nh]: the head of each row when T tokens' heads are laid out as rows (per-head matmuls in one call).
  Tensor head_ids(int64_t T) const;
  // One forward op by op; forward() replays it from a device graph where it can (decode and verification widths).
  ForwardResult forward_eager(KvState& st, const std::vector<int32_t>& tokens, int64_t n_out, bool all_hidden);

  Glm4MoeLiteConfig cfg_;
  std::shared_ptr<const Weights> weights_;
  ModelTraits info_;
  Tensor embed_tokens_;  // [V, H] as stored
  Linear lm_head_;
  Tensor final_norm_;
  Tensor inv_freq_;      // F32 [rope / 2]
  std::vector<Glm4LayerWeights> layers_;
  mutable Tensor head_ids_;  // 0..nh-1 repeated, for 64 tokens from the start (no upload inside a recorded graph)
  std::unique_ptr<ForwardGraphs> graphs_;
};

}  // namespace vatic
