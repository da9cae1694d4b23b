#pragma once
// The weights of a model as model code reads them: the tensors of a TensorStore (mmap'd safetensors: store blobs
// or Hugging Face files) placed on one device. Each tensor is uploaded once, straight from the mapping into device
// memory (the CUDA backend stages through pinned buffers; no host copy of the whole model), and the bytes moved
// so far are reported to an optional progress callback.
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backend/linear.h"
#include "formats/safetensors.h"

namespace vatic {

class Weights {
 public:
  // progress(bytes uploaded so far, bytes of the whole store) after each tensor.
  using Progress = std::function<void(uint64_t done, uint64_t total)>;
  Weights(std::shared_ptr<const TensorStore> store, Device device, Progress progress = {});

  Device device() const { return device_; }
  const TensorStore& store() const { return *store_; }
  const std::shared_ptr<const TensorStore>& store_ptr() const { return store_; }
  bool has(const std::string& name) const { return store_->has(name); }
  std::vector<std::string> names() const { return store_->names(); }
  // On the host (mmap views, or copies of a store held on a device) for what is only read at load time
  // (orderings, scalars).
  Tensor host(const std::string& name) const;
  Tensor host(const std::string& name, const Shape& shape) const;
  // On the device, checked against the shape config.json implies (see TensorStore::require).
  Tensor require(const std::string& name, const Shape& shape) const;
  Tensor optional(const std::string& name, const Shape& shape) const;
  // Like require() without keeping the upload for later readers (for tensors copied elsewhere right away).
  Tensor transient(const std::string& name, const Shape& shape) const;
  uint64_t uploaded_bytes() const { return done_; }

 private:
  std::shared_ptr<const TensorStore> store_;
  Device device_;
  Progress progress_;
  mutable std::mutex mu_;
  Tensor place(const std::string& name, const Shape& shape, bool keep) const;
  mutable std::map<std::string, Tensor> placed_;  // uploads so far, so a tensor read twice is uploaded once
  uint64_t total_ = 0;  // the store's bytes, summed once (progress is reported after every tensor)
  mutable uint64_t done_ = 0;
};

// What the tensors `counts` picks hold (a model's own tensors: not a vision tower, not a drafter's layers):
// their bytes, their parameters (a packed quantized weight counts its logical values; scales and biases are
// none) and whether any of them is quantized. Reads only the stored headers.
struct WeightTotals {
  uint64_t bytes = 0;
  int64_t parameters = 0;
  bool quantized = false;
};
WeightTotals count_weights(const Weights& w, const std::function<bool(const std::string&)>& counts);

// A linear map named BASE (tensor BASE.weight, dense [out, in], or quantized: BASE.weight packed U32 with
// BASE.scales / BASE.biases; see quant/quantize.h for the convention). Checks the logical shape.
Linear load_linear(const Weights& w, const std::string& base, int64_t out, int64_t in);
// Stacked experts: NAME is the full tensor name (no ".weight" suffix in Gemma 4's layout); shape [E, out, in].
Linear load_stacked(const Weights& w, const std::string& name, int64_t experts, int64_t out, int64_t in);
// Experts stored one tensor per expert (BASE0.weight, BASE1.weight, ...: name_of(e) gives BASE for expert e),
// stacked into one [E, out, in] Linear on the device.
Linear load_experts(const Weights& w, const std::function<std::string(int64_t)>& name_of, int64_t experts,
                    int64_t out, int64_t in);
// Small tensors used elementwise (norm weights, scalars) as F32 on the device.
Tensor load_f32(const Weights& w, const std::string& name, const Shape& shape);
float load_scalar(const Weights& w, const std::string& name);

}  // namespace vatic
