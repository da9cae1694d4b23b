#pragma once
#include "tensor/tensor.h"

namespace vatic {

// The weight of a linear map y = x · Wᵀ, dense (F32/BF16/F16, shape [N, K] or [E, N, K] for stacked experts)
// or group-wise affine quantized (w ≈ scale·q + bias per group of `group` inputs; `weight` holds q packed
// little-endian into U32 words, shape [N, K·bits/32]; scales and biases [N, K/group]).
struct Linear {
  Tensor weight;
  Tensor scales, biases;
  int bits = 0;   // 0 = dense
  int group = 0;
  // Set when `weight` was computed by the ops just before (not loaded with the model): a device that starts an op
  // before the one before it has finished (CUDA programmatic launch) must not read a computed weight early.
  bool computed = false;

  bool defined() const { return weight.defined(); }
  bool quantized() const { return bits != 0; }
  int64_t out_features() const { return weight.dim(-2); }
  int64_t in_features() const { return quantized() ? weight.dim(-1) * 32 / bits : weight.dim(-1); }
  // One expert of a stacked [E, N, K] weight.
  Linear select(int64_t e) const {
    Linear l = *this;
    l.weight = weight.select(0, e);
    if (quantized()) {
      l.scales = scales.select(0, e);
      l.biases = biases.select(0, e);
    }
    return l;
  }
  // Rows [start, end) of the output dimension (e.g. the gate half of a fused gate_up projection).
  Linear rows(int64_t start, int64_t end) const {
    Linear l = *this;
    l.weight = weight.slice(-2, start, end);
    if (quantized()) {
      l.scales = scales.slice(-2, start, end);
      l.biases = biases.slice(-2, start, end);
    }
    return l;
  }
  size_t nbytes() const {
    return weight.nbytes() + (quantized() ? scales.nbytes() + biases.nbytes() : 0);
  }
};

}  // namespace vatic
