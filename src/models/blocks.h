#pragma once
// Blocks shared by the model families: RoPE frequency tables (default, linear, Llama 3), grouped-query
// attention with optional biases, q/k norms and a sliding window, the gated MLP, and the routed MoE (softmax or
// sigmoid gating).
// Everything runs through ops/ops.h on the device the weights live on.
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/linear.h"
#include "cache/kv_cache.h"
#include "formats/config_fields.h"
#include "formats/safetensors.h"
#include "models/registry.h"

namespace vatic::blocks {

// ---------------------------------------------------------------------------------------------------------------
// RoPE

struct Rope {
  std::string type = "default";  // "default", "linear", "llama3"
  double theta = 10000.0;
  double factor = 1.0;                  // linear and llama3
  double low_freq_factor = 1.0;         // llama3
  double high_freq_factor = 4.0;        // llama3
  double original_max_position = 8192;  // llama3
};

// Reads a rope description: `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling` (older
// configs). `theta_key` names the theta field of the older layout (Gemma 3's sliding layers use
// rope_local_base_freq).
Rope parse_rope(const Fields& f, const json* params, const std::string& where, double default_theta);
// Inverse frequencies [head_dim / 2] as transformers computes them in float32, on `device`.
Tensor rope_inv_freq(const Rope& rope, int head_dim, Device device);

// ---------------------------------------------------------------------------------------------------------------
// Attention

struct AttentionShape {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool bias = false;           // q/k/v/o biases (Llama with attention_bias)
  bool qk_norm = false;        // per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3)
  bool norm_plus_one = false;  // norm weights are stored as w - 1 (Gemma): the layer applies 1 + w
  float scale = 1.0f;          // softmax scale
  int window = 0;              // sliding window (0 = full attention)
  float eps = 1e-6f;
};

struct AttentionWeights {
  Linear q, k, v, o;
  Tensor q_bias, k_bias, v_bias, o_bias;  // F32, when shape.bias
  Tensor q_norm, k_norm;                  // F32 [head_dim], when shape.qk_norm
  Tensor inv_freq;                        // F32 [head_dim / 2]
};

void expect_attention(const std::string& prefix, const AttentionShape& s, std::vector<ExpectedTensor>& e);
AttentionWeights load_attention(const Weights& ts, const std::string& prefix, const AttentionShape& s,
                                Tensor inv_freq);
// x [T, hidden] -> [T, hidden]; appends T entries to `cache`.
Tensor attention(const AttentionWeights& w, const AttentionShape& s, const Tensor& x, const Tensor& positions,
                 KvCache& cache);

// ---------------------------------------------------------------------------------------------------------------
// Feed-forward

struct Mlp {
  Linear gate, up, down;
};
void expect_mlp(const std::string& prefix, int64_t intermediate, int64_t hidden,
                std::vector<ExpectedTensor>& e);
Mlp load_mlp(const Weights& ts, const std::string& prefix, int64_t intermediate, int64_t hidden);
Tensor gated_mlp(const Mlp& m, Unary act, const Tensor& x);

// ---------------------------------------------------------------------------------------------------------------
// Mixture of experts

// How a row picks its k experts from the router's logits [T, E], by gating kind (as in llama.cpp's
// build_moe_ffn):
//  * Softmax (Qwen3-MoE, Mixtral, Gemma 4): p = softmax(logits), the k largest, renormalised to sum 1 when
//    `renormalize` (norm_topk_prob), times `expert_scale` when given (Gemma 4's per_expert_scale).
//  * Sigmoid (GLM-4.7, DeepSeek V3): s = sigmoid(logits); the experts are chosen by s + `score_bias`
//    (e_score_correction_bias) among the `groups_kept` best of `groups` expert groups (n_group / topk_group,
//    a group scored by the sum of its two best), and weighted by the unbiased s, renormalised when
//    `renormalize`.
// Either way the weights are then multiplied by `scale` (routed_scaling_factor).
struct MoeRouting {
  RouteParams::Kind gating = RouteParams::Softmax;
  int top_k = 0;
  bool renormalize = true;
  float scale = 1.0f;
  Tensor score_bias;    // F32 [E], Sigmoid only; undefined = none
  Tensor expert_scale;  // F32 [E]; undefined = none
  int groups = 1, groups_kept = 1;
};
// Routing on the device: weights [T, k] (F32) and expert ids [T, k] (I32) for router logits [T, E].
void route_experts(const Tensor& logits, const MoeRouting& r, Tensor* weights, Tensor* experts);

// A routed MoE: the router (P + "gate.weight" [E, H]) and experts that are each a gated MLP.
struct RoutedMoe {
  Linear router;          // [E, H]
  MoeRouting routing;     // score_bias from P + "gate.e_score_correction_bias" for sigmoid gating
  Linear gate, up, down;  // the experts stacked [E, out, in] (views of a fused layout)
};
// Experts under P + "experts.": per expert (E.gate_proj.weight ...), stacked per projection
// (gate_proj.weight [E, I, H] ..., the store's layout for quantized experts) or fused (gate_up_proj [E, 2I,
// H]). Sigmoid gating also expects P + "gate.e_score_correction_bias" [E].
void expect_routed_moe(const std::string& prefix, int64_t experts, int64_t intermediate, int64_t hidden,
                       RouteParams::Kind gating, const std::function<bool(const std::string&)>& has,
                       std::vector<ExpectedTensor>& e);
// `routing` without its tensors: the score bias is loaded here for sigmoid gating.
RoutedMoe load_routed_moe(const Weights& ts, const std::string& prefix, int64_t experts, int64_t intermediate,
                          int64_t hidden, MoeRouting routing);
// x [T, H] -> [T, H]: each row through its k experts, summed with the routing weights.
Tensor routed_moe(const RoutedMoe& m, Unary act, const Tensor& x);
// routed_moe before its sum: each row's k expert outputs [T·k, H] and their routing weights [T, k], for an op that
// sums them with what comes after (ops::combine_add_norm).
struct RoutedRows {
  Tensor rows, weights;
};
RoutedRows routed_moe_rows(const RoutedMoe& m, Unary act, const Tensor& x);

// Norm weights (F32 [n]); with plus_one the stored value is w - 1 and 1 + w is returned (Gemma's RMSNorm).
Tensor load_norm(const Weights& ts, const std::string& name, int64_t n, bool plus_one);

}  // namespace vatic::blocks
