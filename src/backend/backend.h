#pragma once
// The device interface. Every tensor operation a model needs is a virtual here; a device (CPU now, CUDA next)
// implements all of them over tensors that live in its memory. Model code never calls a backend directly: it
// calls ops/ops.h, which allocates outputs on the input's device and dispatches here.
#include <cstdint>
#include <vector>

#include "backend/linear.h"
#include "tensor/tensor.h"

namespace vatic {

enum class Unary { GeluTanh, Silu, Sigmoid, Tanh, Exp };

struct AttentionParams {
  float scale = 1.0f;
  int window = 0;  // > 0: a query at position p sees keys k with p - window < k <= p
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual const char* name() const = 0;

  // Memory. empty() makes an output buffer: its content is unspecified until an operation writes it.
  virtual Tensor empty(const Shape& shape, DType dtype) = 0;
  virtual Tensor upload(const Tensor& host) = 0;    // copy of a host tensor on this device
  virtual Tensor download(const Tensor& t) = 0;     // contiguous host copy
  // dst = src (same shape; dtype conversion between F32/BF16/F16 allowed; strided src/dst allowed).
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& dst, float value) = 0;

  // y[T, N] = x[T, K] · Wᵀ (+ y if accumulate). x F32 contiguous; y F32.
  virtual void matmul(const Tensor& x, const Linear& w, const Tensor& y, bool accumulate) = 0;
  // out[i, :] = table[ids[i], :] * scale, as F32 (quantized tables are dequantized row by row). ids I32 [n].
  virtual void embedding(const Linear& table, const Tensor& ids, float scale, const Tensor& out) = 0;
  // Over the last dimension: y = x * (mean(x²) + eps)^(-1/2) * (w or 1). x may be [.., D] with any leading dims.
  virtual void rms_norm(const Tensor& x, const Tensor* w, float eps, const Tensor& y) = 0;
  // In place on x [T, H, D]: rotate pairs by angle pos[t] * inv_freq[i], i < inv_freq.numel().
  // neox: pairs (i, i + D/2) over the whole head; interleaved: pairs (2i, 2i+1) over the first 2·n dims.
  virtual void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool interleaved) = 0;
  // out[T, Hq, Dv] = softmax(scale · q kᵀ + mask) v, GQA (head h uses kv head h / (Hq/Hkv)).
  // q [T, Hq, D], k [S, Hkv, D], v [S, Hkv, Dv] (strided rows allowed), q_pos I32 [T], k_pos I32 [S].
  // Key s is visible to query t iff 0 <= k_pos[s] <= q_pos[t] (and within the window); k_pos -1 = empty slot.
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
                         const Tensor& k_pos, const AttentionParams& p, const Tensor& out) = 0;

  // Elementwise (F32, contiguous). b may have fewer rows than a and is then broadcast (b's numel divides a's).
  virtual void add(const Tensor& a, const Tensor& b, const Tensor& y) = 0;
  virtual void mul(const Tensor& a, const Tensor& b, const Tensor& y) = 0;
  virtual void scale(const Tensor& a, float s, const Tensor& y) = 0;
  virtual void unary(Unary op, const Tensor& a, const Tensor& y) = 0;
  // y = act(g) * u
  virtual void gated(Unary act, const Tensor& g, const Tensor& u, const Tensor& y) = 0;
  virtual void softcap(const Tensor& a, float cap, const Tensor& y) = 0;  // cap * tanh(a / cap)
  virtual void softmax(const Tensor& a, const Tensor& y) = 0;            // over the last dim
  // Largest k of each row of a [T, N]: values F32 [T, k], indices I32 [T, k], sorted descending.
  virtual void topk(const Tensor& a, int k, const Tensor& values, const Tensor& indices) = 0;
};

Backend& backend_for(Device device);
Backend& cpu_backend();

}  // namespace vatic
