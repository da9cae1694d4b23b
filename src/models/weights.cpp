#include "models/weights.h"

#include "ops/ops.h"
#include "quant/format.h"
#include "quant/quantize.h"

namespace vatic {

Weights::Weights(std::shared_ptr<const TensorStore> store, Device device, Progress progress)
    : store_(std::move(store)), device_(device), progress_(std::move(progress)), total_(store_->total_bytes()) {
  backend_for(device_);  // a clear error now rather than at the first tensor
}

Tensor Weights::require(const std::string& name, const Shape& shape) const { return place(name, shape, true); }
Tensor Weights::transient(const std::string& name, const Shape& shape) const { return place(name, shape, false); }

Tensor Weights::place(const std::string& name, const Shape& shape, bool keep) const {
  Tensor h = store_->require(name, shape);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = placed_.find(name);
  if (it != placed_.end()) return it->second;
  Tensor t = ops::to_device(h, device_);
  // A kept weight may move out of the store's file mapping (the CPU backend's copy in memory of its own).
  if (keep) t = backend_for(device_).place_weight(t);
  done_ += h.nbytes();
  if (keep) placed_.emplace(name, t);
  if (progress_) progress_(done_, total_);
  return t;
}

Tensor Weights::host(const std::string& name) const { return ops::to_host(store_->get(name)); }
Tensor Weights::host(const std::string& name, const Shape& shape) const {
  return ops::to_host(store_->require(name, shape));
}

Tensor Weights::optional(const std::string& name, const Shape& shape) const {
  return has(name) ? require(name, shape) : Tensor();
}

WeightTotals count_weights(const Weights& w, const std::function<bool(const std::string&)>& counts) {
  WeightTotals r;
  for (const auto& name : w.names()) {
    if (!counts(name)) continue;
    const Tensor t = w.store().get(name);  // sizes only: where it lies does not matter
    r.bytes += t.nbytes();
    if (name.ends_with(".scales") || name.ends_with(".biases")) {
      r.quantized = true;
      continue;
    }
    // Packed U32 weights hold 32 / bits values per word (bits from the quantization metadata).
    if (t.dtype() == DType::U32 && w.has(quant_base_name(name) + ".scales"))
      r.parameters += t.numel() * 32 / quant_spec_of(w.store(), name).bits;
    else
      r.parameters += t.numel();
  }
  return r;
}

static Linear load_any(const Weights& w, const std::string& wname, const std::string& base, Shape logical,
                       bool keep = true) {
  auto get = [&](const std::string& n, const Shape& s) { return keep ? w.require(n, s) : w.transient(n, s); };
  Linear l;
  if (w.has(base + ".scales")) {
    QuantSpec q = quant_spec_of(w.store(), wname);
    Shape packed = logical;
    packed.back() = logical.back() * q.bits / 32;
    Shape groups = logical;
    groups.back() = logical.back() / q.group_size;
    l.weight = get(wname, packed);
    l.scales = get(base + ".scales", groups);
    l.biases = get(base + ".biases", groups);
    l.bits = q.bits;
    l.group = q.group_size;
  } else {
    l.weight = get(wname, logical);
  }
  return l;
}

Linear load_linear(const Weights& w, const std::string& base, int64_t out, int64_t in) {
  return load_any(w, base + ".weight", base, {out, in});
}

Linear load_stacked(const Weights& w, const std::string& name, int64_t experts, int64_t out, int64_t in) {
  // Gemma 4 names stacked experts without ".weight" (experts.gate_up_proj); stores that stack per-expert
  // tensors keep it (mlp.experts.gate_proj.weight). Scales and biases sit beside the base name either way.
  const std::string suffix = ".weight";
  const bool has_suffix = name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  return load_any(w, name, has_suffix ? name.substr(0, name.size() - suffix.size()) : name, {experts, out, in});
}

Linear load_experts(const Weights& w, const std::function<std::string(int64_t)>& name_of, int64_t experts,
                    int64_t out, int64_t in) {
  auto one_expert = [&](int64_t e) { return load_any(w, name_of(e) + ".weight", name_of(e), {out, in}, false); };
  Linear first = one_expert(0);
  auto stack = [&](const Tensor& t0) {
    Shape s = t0.shape();
    s.insert(s.begin(), experts);
    return ops::empty_like(t0, s, t0.dtype());
  };
  Linear l = first;
  l.weight = stack(first.weight);
  if (first.quantized()) {
    l.scales = stack(first.scales);
    l.biases = stack(first.biases);
  }
  for (int64_t e = 0; e < experts; e++) {
    Linear one = e == 0 ? first : one_expert(e);
    VATIC_CHECK(one.bits == first.bits && one.group == first.group && one.weight.dtype() == first.weight.dtype(),
                "expert {} ({}) is stored differently from expert 0", e, name_of(e));
    ops::copy_into(one.weight, l.weight.select(0, e));
    if (one.quantized()) {
      ops::copy_into(one.scales, l.scales.select(0, e));
      ops::copy_into(one.biases, l.biases.select(0, e));
    }
  }
  return l;
}

Tensor load_f32(const Weights& w, const std::string& name, const Shape& shape) {
  return ops::to_f32(w.require(name, shape));
}

float load_scalar(const Weights& w, const std::string& name) {
  return ops::to_vector(w.host(name, {1}))[0];
}

}  // namespace vatic
