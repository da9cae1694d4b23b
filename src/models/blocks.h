#pragma once
// Blocks shared by the model families: RoPE frequency tables (default, linear, Llama 3), grouped-query
// attention with optional biases, q/k norms and a sliding window, the gated MLP, and the softmax-routed MoE.
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

// Softmax top-k routing (Qwen3-MoE, Mixtral): p = softmax(router(x)), the k largest, renormalised to sum 1
// when `renormalize` (norm_topk_prob), each expert a gated MLP.
struct SoftmaxMoe {
  Linear router;        // [E, H]
  Linear gate, up, down;  // the experts stacked [E, out, in] (views of a fused layout)
  int top_k = 0;
  bool renormalize = true;
};
// Experts under P + "experts.": per expert (E.gate_proj.weight ...), stacked per projection
// (gate_proj.weight [E, I, H] ..., the store's layout for quantized experts) or fused (gate_up_proj [E, 2I,
// H]).
void expect_softmax_moe(const std::string& prefix, int64_t experts, int64_t intermediate, int64_t hidden,
                        const std::function<bool(const std::string&)>& has, std::vector<ExpectedTensor>& e);
SoftmaxMoe load_softmax_moe(const Weights& ts, const std::string& prefix, int64_t experts,
                            int64_t intermediate, int64_t hidden, int top_k, bool renormalize);
Tensor softmax_moe(const SoftmaxMoe& m, Unary act, const Tensor& x);

// Norm weights (F32 [n]); with plus_one the stored value is w - 1 and 1 + w is returned (Gemma's RMSNorm).
Tensor load_norm(const Weights& ts, const std::string& name, int64_t n, bool plus_one);

}  // namespace vatic::blocks
