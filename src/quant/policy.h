#pragma once
// Which tensors get quantized, and to what: the policy ollama's MLX engine applies (quantpolicy.go).
//
//  * Only weights are quantized: "*.weight" matrices, and stacked expert weights ([E, N, K], e.g. Gemma 4's
//    "experts.gate_up_proj" or GLM's stacked "mlp.experts.gate_proj.weight") — with at least 1024 elements and a
//    last dimension divisible by the group size.
//  * Never: norms ("norm", "ln_", "layernorm"), embeddings other than the Gemma 4 tied head, vision / audio
//    towers, biases, routers and gates (".mlp.gate.weight", ".router.", ".shared_expert_gate"), scalars, the
//    drafter's centroid tables.
//  * Output heads of a target: "lm_head.weight" and a tied "embed_tokens.weight" (Gemma 4, or embedding_is_head) take the 8-bit type
//    (int8) whatever the requested type. A drafter's head takes the requested type (its quality only moves the
//    acceptance rate).
//  * int4: k_proj / v_proj / down_proj are promoted to int8. Gemma 4: MoE models promote k and v everywhere;
//    v and down are promoted on "more bits" layers (the first and last eighth of the stack and every third layer
//    in between); k otherwise stays int4. Other architectures promote k, v and down everywhere.
#include <string>

#include "quant/quantize.h"

namespace vatic {

struct QuantPolicyContext {
  bool gemma4 = false;   // a Gemma 4 target or assistant (the Gemma rules above)
  int num_layers = 0;    // decoder layers of the model the tensor belongs to
  int num_experts = 0;   // routed experts (0 = dense)
  bool is_draft = false;
  bool embedding_is_head = false;  // tied embeddings: embed_tokens.weight is also the output head
};

struct QuantDecision {
  QuantType type = QuantType::None;
  int group_size = 0;
  std::string reason;  // why, for logs and tests: "norm", "output head: 8-bit", "int4: v_proj promoted", ...
};

QuantDecision decide_quantization(const std::string& name, const Shape& shape, QuantType requested,
                                  int group_size, const QuantPolicyContext& ctx);

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third layer in between.
bool use_more_bits(int layer, int num_layers);

}  // namespace vatic
