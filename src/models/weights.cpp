#include "models/weights.h"

#include "ops/ops.h"
#include "quant/format.h"

namespace vatic {

static Linear load_any(const TensorStore& ts, const std::string& wname, const std::string& base, Shape logical) {
  Linear l;
  if (ts.has(base + ".scales")) {
    QuantSpec q = quant_spec_of(ts, wname);
    Shape packed = logical;
    packed.back() = logical.back() * q.bits / 32;
    Shape groups = logical;
    groups.back() = logical.back() / q.group_size;
    l.weight = ts.require(wname, packed);
    l.scales = ts.require(base + ".scales", groups);
    l.biases = ts.require(base + ".biases", groups);
    l.bits = q.bits;
    l.group = q.group_size;
  } else {
    l.weight = ts.require(wname, logical);
  }
  return l;
}

Linear load_linear(const TensorStore& ts, const std::string& base, int64_t out, int64_t in) {
  return load_any(ts, base + ".weight", base, {out, in});
}

Linear load_stacked(const TensorStore& ts, const std::string& name, int64_t experts, int64_t out, int64_t in) {
  // Gemma 4 names stacked experts without ".weight" (experts.gate_up_proj); stores that stack per-expert
  // tensors keep it (mlp.experts.gate_proj.weight). Scales and biases sit beside the base name either way.
  const std::string suffix = ".weight";
  const bool has_suffix = name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  return load_any(ts, name, has_suffix ? name.substr(0, name.size() - suffix.size()) : name, {experts, out, in});
}

Tensor load_f32(const TensorStore& ts, const std::string& name, const Shape& shape) {
  return ops::to_f32(ts.require(name, shape));
}

float load_scalar(const TensorStore& ts, const std::string& name) {
  return ops::to_vector(ts.require(name, {1}))[0];
}

}  // namespace vatic
