#pragma once
// The operations model code is written against. Each allocates its output on the input's device and
// dispatches to that device's backend, so a model written once runs wherever its weights live.
#include <vector>

#include "backend/backend.h"

namespace vatic::ops {

Backend& backend_of(const Tensor& t);

// Every operation checks that its inputs live on one device and refuses a mix with a clear error.
Tensor empty_like(const Tensor& t, const Shape& shape, DType dtype = DType::F32);
Tensor zeros(const Shape& shape, Device device);
// Small host vectors made into device tensors (token ids, positions, frequency tables).
Tensor ids(const std::vector<int32_t>& values, Device device);
Tensor floats(const std::vector<float>& values, Device device);
Tensor to_device(const Tensor& t, Device device);  // the same tensor when already there
Tensor to_host(const Tensor& t);  // contiguous host copy (a device sync on accelerators)
std::vector<float> to_vector(const Tensor& t);
Tensor contiguous(const Tensor& t);
Tensor to_f32(const Tensor& t);
void copy_into(const Tensor& src, const Tensor& dst);

// x [T, K] -> [T, N]
Tensor matmul(const Tensor& x, const Linear& w);
// The same into y [T, N] (F32, contiguous; e.g. a part of a wider buffer's only row).
void matmul_into(const Tensor& x, const Linear& w, const Tensor& y);
void matmul_accumulate(const Tensor& x, const Linear& w, const Tensor& y);
// {matmul(x, *w) for w in ws} in one op (see Backend::matmul_many).
std::vector<Tensor> matmul_many(const Tensor& x, const std::vector<const Linear*>& ws);
Tensor embedding(const Linear& table, const Tensor& ids, float scale = 1.0f);
Tensor embedding(const Tensor& table, const Tensor& ids, float scale = 1.0f);
// The same into out [ids.numel(), K], rows of unit stride at any row stride (columns of a wider tensor).
void embedding_into(const Linear& table, const Tensor& ids, float scale, const Tensor& out);
// Over the last dim; w may be undefined for the weight-less variant.
Tensor rms_norm(const Tensor& x, const Tensor& w, float eps);
// The same into y of x's shape; x and y may be rows of unit stride in wider tensors (read and written in place).
void rms_norm_into(const Tensor& x, const Tensor& w, float eps, const Tensor& y);
// (x + rms_norm(f, w)) · s: a residual add of a normed branch (see Backend::add_rms_norm).
Tensor add_rms_norm(const Tensor& x, const Tensor& f, const Tensor& w, float eps, float s = 1.0f);
// {add_rms_norm(x, f, w, eps, s), rms_norm of that with w_next}: a residual add and the next block's input norm.
struct ResidualAndNorm {
  Tensor residual, normed;
};
ResidualAndNorm add_rms_norm_norm(const Tensor& x, const Tensor& f, const Tensor& w, float eps, float s,
                                  const Tensor& w_next);
// {x + f, rms_norm(x + f, w)}: a pre-norm block's residual add and the next block's input norm (Backend::add_norm).
ResidualAndNorm add_norm(const Tensor& x, const Tensor& f, const Tensor& w, float eps);
// add_rms_norm(x, matmul(a, w_out), w, eps, s) and add_rms_norm_norm(x, matmul(a, w_out), ...): a block's output
// projection with the residual add (and the next block's input norm) after it, in one op (see
// Backend::matmul_add_rms_norm).
Tensor matmul_add_rms_norm(const Tensor& a, const Linear& w_out, const Tensor& x, const Tensor& w, float eps,
                           float s = 1.0f);
ResidualAndNorm matmul_add_rms_norm_norm(const Tensor& a, const Linear& w_out, const Tensor& x, const Tensor& w,
                                         float eps, float s, const Tensor& w_next);
void rope_inplace(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool interleaved);
// rope(rms_norm(x, w)) for x [T, H, D] (neox or interleaved pairs, as rope_inplace).
Tensor rms_norm_rope(const Tensor& x, const Tensor& w, float eps, const Tensor& positions, const Tensor& inv_freq,
                     bool interleaved);
// {rms_norm(x, w_i)·s_i}: several norms of the same rows in one op (Backend::rms_norm_many; w_i may be undefined).
struct NormScale {
  Tensor w;
  float s = 1.0f;
};
std::vector<Tensor> rms_norm_many(const Tensor& x, float eps, const std::vector<NormScale>& norms);
// {add_rms_norm(x, f, w, eps, s), rms_norm_many of it}: a residual add and several norms of its result in one
// op (Backend::add_rms_norm_many).
struct ResidualAndNorms {
  Tensor residual;
  std::vector<Tensor> normed;
};
ResidualAndNorms add_rms_norm_many(const Tensor& x, const Tensor& f, const Tensor& w, float eps, float s,
                                   const std::vector<NormScale>& norms);
// rms_norm_rope (rope false: rms_norm) of several [T, H, D] tensors of one T and D in one op (w may be undefined).
struct NormRopeInput {
  Tensor x, w;
  bool rope;
};
// With `kv`, in[1] and in[2] are a cache append's keys and values, written into its slots (see
// KvCache::append_with); their returned tensors are then unspecified.
std::vector<Tensor> rms_norm_rope_many(const std::vector<NormRopeInput>& in, float eps, const Tensor& positions,
                                       const Tensor& inv_freq, bool interleaved, const KvSlots* kv = nullptr);
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                 const AttentionParams& p);
// Multi-head latent attention's cache entries [rms_norm(c)·w | rope(r)] of kv [T, L + R] into `slots` at
// slot_positions (rotated at `positions`), and q [T, H, R] rotated into q_out, in one op (Backend::latent_entry).
void latent_entry(const Tensor& kv, const Tensor& w, float eps, const Tensor& q, const Tensor& q_out,
                  const Tensor& positions, const Tensor& slot_positions, const Tensor& inv_freq, bool interleaved,
                  const KvSlots& slots);
Tensor add(const Tensor& a, const Tensor& b);
void add_inplace(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& a, float s);
Tensor unary(Unary op, const Tensor& a);
Tensor gated(Unary act, const Tensor& g, const Tensor& u);
// act(x · gateᵀ) ⊙ (x · upᵀ): gated(act, matmul(x, gate), matmul(x, up)) in one op.
Tensor matmul_gated(const Tensor& x, const Linear& gate, const Linear& up, Unary act);
// act(x · wᵀ) ⊙ m: gated(act, matmul(x, w), m) in one op.
Tensor matmul_gated(const Tensor& x, const Linear& w, const Tensor& m, Unary act);
Tensor softcap(const Tensor& a, float cap);
Tensor softmax(const Tensor& a);
void topk(const Tensor& a, int k, Tensor* values, Tensor* indices);
// Each row's argmax (ties to the lower index, as topk), taken where the rows are; only the ids come to the host.
std::vector<int32_t> argmax_rows(const Tensor& a);
// Mixture of experts (see Backend::matmul_experts / combine_rows / route).
// x may be rows of unit stride at any row stride (columns of a wider tensor), read in place.
Tensor matmul_experts(const Tensor& x, const Linear& w, const Tensor& experts);  // [experts.numel(), N]
// The same into y [experts.numel(), N], whose rows may also lie in a wider tensor (rows of unit stride).
void matmul_experts_into(const Tensor& x, const Linear& w, const Tensor& experts, const Tensor& y);
// gated(act, matmul_experts(x, gate, experts), matmul_experts(x, up, experts)) in one op.
Tensor matmul_experts_gated(const Tensor& x, const Linear& gate, const Linear& up, const Tensor& experts, Unary act);
Tensor combine_rows(const Tensor& rows, const Tensor& weights);                 // [T, D]
// {x + (combine_rows(rows, weights) + s), rms_norm of that with w}: a mixture's output (s, its shared experts'
// output, may be undefined) added to the residual, and the next block's input norm (Backend::combine_add_norm).
ResidualAndNorm combine_add_norm(const Tensor& rows, const Tensor& weights, const Tensor& s, const Tensor& x,
                                 const Tensor& w, float eps);
// A mixture layer whose branches are normed before their sum (Gemma 4): f = rms_norm(dense, w_dense) +
// rms_norm(combine_rows(rows, weights), w_routed), then add_rms_norm(x, f, w, eps, s) and, with `next_norm`, the
// next block's input norm of the result with w_next (else `normed` stays undefined). Backend::combine_post_norms.
ResidualAndNorm combine_post_norms(const Tensor& rows, const Tensor& weights, const Tensor& dense,
                                   const Tensor& w_dense, const Tensor& w_routed, const Tensor& x, const Tensor& w,
                                   float eps, float s, bool next_norm, const Tensor& w_next);
void route(const Tensor& router_out, const RouteParams& p, Tensor* weights, Tensor* experts);
Tensor gather_rows(const Tensor& table, const Tensor& ids);  // [ids.numel(), C] of the table's dtype (I32, F32)
void scatter(const Tensor& values, const Tensor& index, const Tensor& out);
// y · table over the tokens of the chosen clusters, -inf elsewhere: F32 [1, V] (see Backend::masked_logits).
Tensor masked_logits(const Tensor& y, const Linear& table, const Tensor& groups, const Tensor& clusters);
// KV cache writes (see Backend::kv_write / forget_positions).
void kv_write(const Tensor& k, const Tensor& v, const Tensor& positions, const Tensor& keys, const Tensor& values,
              const Tensor& slot_pos, bool ring);
void forget_positions(const Tensor& slot_pos, int64_t n);
// Records the work `work` queues on `device` into a graph (see Backend::record); null where there are no graphs.
std::unique_ptr<DeviceGraph> record(Device device, const std::function<void()>& work);
// Columns side by side: [T, A] ++ [T, B] -> [T, A+B]
Tensor concat_cols(const Tensor& a, const Tensor& b);

// Sampling on the device (see Backend::logsumexp / mask_tokens / penalize).
Tensor logsumexp(const Tensor& a, float scale = 1.0f);  // F32 [rows]
// Per row of p, q [R, N]: the residual mass Σ max(0, exp(p_scale·p - p_shift) - exp(q_scale·q - q_shift)), F32 [R].
Tensor residual_mass(const Tensor& p, const Tensor& q, float p_scale, float p_shift, float q_scale, float q_shift);
void mask_tokens(const Tensor& row, const std::vector<uint64_t>& allowed);  // in place; allowed: 64-bit mask words
// In place on one row: the penalties for distinct `ids` seen `counts` times.
void penalize(const Tensor& row, const std::vector<int32_t>& ids, const std::vector<int32_t>& counts, float repeat,
              float presence, float frequency);

// Test-only fault injection: when VATIC_FAIL_DEVICE_AFTER=N is set (read once), every operation dispatched here
// after the first N throws DeviceError, as a failing GPU would; the runner's recovery path is tested with it.
void count_dispatch();

}  // namespace vatic::ops
