#include "quant/policy.h"

#include <cstdlib>

namespace vatic {
namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The last name component of a weight: "a.layers.3.self_attn.k_proj.weight" -> "k_proj".
std::string leaf(const std::string& name) {
  std::string base = quant_base_name(name);
  size_t dot = base.rfind('.');
  return dot == std::string::npos ? base : base.substr(dot + 1);
}

int layer_index(const std::string& name) {
  size_t p = name.find(".layers.");
  if (p == std::string::npos) return -1;
  return std::atoi(name.c_str() + p + 8);
}

}  // namespace

bool use_more_bits(int layer, int n) {
  return layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2;
}

QuantDecision decide_quantization(const std::string& name, const Shape& shape, QuantType requested, int group,
                                  const QuantPolicyContext& ctx) {
  auto none = [&](std::string why) { return QuantDecision{QuantType::None, 0, std::move(why)}; };
  if (requested == QuantType::None) return none("not requested");
  const bool stacked_expert = shape.size() == 3 && contains(name, ".experts.");
  const bool is_weight = name.ends_with(".weight") || stacked_expert;
  if (!is_weight) return none("not a weight");
  if (shape.size() != 2 && !stacked_expert) return none("not a matrix");
  if (contains(name, "vision") || contains(name, "visual") || contains(name, "audio")) return none("vision/audio tower");
  if (contains(name, "norm") || contains(name, "ln_")) return none("norm");
  if (name.ends_with(".mlp.gate.weight") || name.ends_with(".mixer.gate.weight") ||
      contains(name, "shared_expert_gate") || contains(name, ".router."))
    return none("router");
  if (contains(name, "centroids") || contains(name, "token_ordering")) return none("drafter centroid table");

  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const bool aligned = shape.back() % group == 0;
  if (numel < 1024) return none("small tensor");
  if (!aligned) return none("last dimension not divisible by the group size");

  const bool head = name == "lm_head.weight" || name.ends_with(".lm_head.weight") ||
                    ((ctx.gemma4 || ctx.embedding_is_head) && name.ends_with("embed_tokens.weight") && !contains(name, "per_layer"));
  if (contains(name, "embed") && !head) return none("embedding");
  if (head) {
    if (ctx.is_draft) return {requested, group, "drafter output head: requested type"};
    return {QuantType::Int8, group, "output head: 8-bit"};
  }

  if (requested == QuantType::Int4) {
    const std::string l = leaf(name);
    const bool k = l == "k_proj", v = l == "v_proj", down = l == "down_proj";
    if (ctx.gemma4) {
      if ((k || v) && ctx.num_experts > 0) return {QuantType::Int8, group, "int4: k/v promoted (MoE)"};
      int layer = layer_index(name);
      if ((v || down) && layer >= 0 && ctx.num_layers > 0 && use_more_bits(layer, ctx.num_layers))
        return {QuantType::Int8, group, "int4: v/down promoted (more-bits layer)"};
    } else if (k || v || down) {
      return {QuantType::Int8, group, "int4: k/v/down promoted"};
    }
  }
  return {requested, group, "requested type"};
}

}  // namespace vatic
