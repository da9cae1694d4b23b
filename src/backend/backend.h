#pragma once
// The device interface. Every tensor operation a model needs is a virtual here; a device (the CPU, each CUDA GPU)
// implements all of them over tensors that live in its memory. Model code never calls a backend directly: it
// calls ops/ops.h, which checks that the inputs share a device, allocates outputs there and dispatches here.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/linear.h"
#include "tensor/tensor.h"

namespace vatic {

enum class Unary { GeluTanh, Silu, Sigmoid, Tanh, Exp };

// A failure of the device itself (a CUDA error, device memory exhausted). After one, the device's state is not to
// be trusted: the runner reports it and exits so that the server starts a fresh one.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// How router outputs become expert choices. Softmax: weights = softmax(a) (Gemma 4, Qwen3-MoE); Sigmoid: weights =
// sigmoid(a), chosen by sigmoid(a) + bias within the best `groups_kept` of `groups` groups, each group scored by
// the sum of its two best (GLM-4.7-Flash, DeepSeek V3). The k chosen weights are divided by their sum when
// `renormalize`, then multiplied by `scale` and by expert_scale[e] when given.
struct RouteParams {
  enum Kind { Softmax, Sigmoid } kind = Softmax;
  int k = 1;
  bool renormalize = true;
  float scale = 1.0f;
  const Tensor* bias = nullptr;          // [E] F32 (Sigmoid)
  const Tensor* expert_scale = nullptr;  // [E] F32
  int groups = 1, groups_kept = 1;
};

// One input of Backend::rms_norm_rope_many: y = rms_norm(x)·(w or 1), rotated when `rope`.
struct NormRope {
  const Tensor* x;
  const Tensor* w;
  bool rope;
  const Tensor* y;
};

// One output of Backend::rms_norm_many: y = rms_norm(x)·(w or 1)·s (the scale skipped where s is 1).
struct ScaledNorm {
  const Tensor* w;
  float s;
  const Tensor* y;
};

// Where a KV cache append writes (the slot tensors Backend::kv_write takes).
struct KvSlots {
  Tensor keys, values, slot_pos;
  bool ring = false;
};

struct AttentionParams {
  float scale = 1.0f;
  int window = 0;  // > 0: a query at position p sees keys k with p - window < k <= p
};

// Work recorded once and run again later (a CUDA graph): every replay reads and writes the same device addresses as
// the recording did. Memory allocated while recording belongs to the graph and lives as long as it does.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual void replay() = 0;
};

struct DeviceMemory {
  size_t free = 0, total = 0;  // bytes
};

// A device's memory bandwidth as `vatic bench` measures it: decode reads every weight once per token, so the bytes
// it reads over best() is its floor.
struct MemoryBandwidth {
  size_t bytes = 0;        // array size of the test
  double read_gbs = 0;     // bytes read / s by a plain sweep
  double matvec_gbs = 0;   // bytes read / s by the backend's own f32 matvec kernel over the array as rows
  double streams_gbs = 0;  // bytes read / s by four sequential streams per thread, far apart (as decode reads)
  double copy_gbs = 0;     // (bytes read + bytes written) / s, STREAM's convention for copy
  std::string machine;     // what ran it: "AMD EPYC, avx512 kernels, 2 threads", "NVIDIA H200 (cuda:0)"
  double best() const { return std::max({read_gbs, matvec_gbs, streams_gbs}); }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual const char* name() const = 0;
  // What a log line or `vatic ps` shows: "cpu", "NVIDIA H200 (cuda:0)".
  virtual std::string description() const { return name(); }
  virtual DeviceMemory memory() const = 0;
  // Waits until every operation queued so far has finished (a no-op on the CPU).
  virtual void synchronize() {}
  // Binds the calling thread to this device (the compute thread calls it once before any work).
  virtual void bind_thread() {}
  // Per-operation timing for `vatic bench`: while on, each operation's device time is added to a table by name
  // ("name ×count"); take_profile() waits for the device, returns the table and clears it.
  virtual void set_profiling(bool on) {}
  virtual std::vector<std::pair<std::string, double>> take_profile() { return {}; }
  // Work counted while profiling, by name ("distinct experts": the experts each matmul_experts was routed to,
  // each counted once per call); take_counts() waits for the device, returns the counts and clears them.
  virtual std::vector<std::pair<std::string, int64_t>> take_counts() { return {}; }
  // Best of `reps` runs over arrays of `bytes`. By default device-to-device copies, whose rate (read + write) is
  // also taken as the read rate.
  virtual MemoryBandwidth measure_bandwidth(size_t bytes, int reps);

  // Memory. empty() makes an output buffer: its content is unspecified until an operation writes it.
  virtual Tensor empty(const Shape& shape, DType dtype) = 0;
  virtual Tensor upload(const Tensor& host) = 0;    // copy of a host tensor on this device
  // A model weight already on this device, kept as long as the model: where it is by default. The CPU backend
  // copies a tensor of a file mapping into memory of its own (backend/cpu/weight_arena.h).
  virtual Tensor place_weight(const Tensor& t) { return t; }
  virtual Tensor download(const Tensor& t) = 0;     // contiguous host copy
  // dst = src (same shape; dtype conversion between F32/BF16/F16 allowed; strided src/dst allowed).
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& dst, float value) = 0;

  // y[T, N] = x[T, K] · Wᵀ (+ y if accumulate). x F32 contiguous; y F32.
  virtual void matmul(const Tensor& x, const Linear& w, const Tensor& y, bool accumulate) = 0;
  // out[i, :] = table[ids[i], :] * scale, as F32 (quantized tables are dequantized row by row). ids I32 [n].
  virtual void embedding(const Linear& table, const Tensor& ids, float scale, const Tensor& out) = 0;
  // Over the last dimension: y = x * (mean(x²) + eps)^(-1/2) * (w or 1). x may be [.., D] with any leading dims.
  // x and y are contiguous, or 2-D rows of unit stride at any row stride (columns of a wider tensor).
  virtual void rms_norm(const Tensor& x, const Tensor* w, float eps, const Tensor& y) = 0;
  // In place on x [T, H, D]: rotate pairs by angle pos[t] * inv_freq[i], i < inv_freq.numel().
  // neox: pairs (i, i + D/2) over the whole head; interleaved: pairs (2i, 2i+1) over the first 2·n dims.
  virtual void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool interleaved) = 0;
  // out[T, Hq, Dv] = softmax(scale · q kᵀ + mask) v, GQA (head h uses kv head h / (Hq/Hkv)).
  // q [T, Hq, D], k [S, Hkv, D], v [S, Hkv, Dv] (strided rows allowed), q_pos I32 [T], k_pos I32 [S].
  // Key s is visible to query t iff 0 <= k_pos[s] <= q_pos[t] (and within the window); k_pos -1 = empty slot.
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
                         const Tensor& k_pos, const AttentionParams& p, const Tensor& out) = 0;

  // The residual add of a normed branch: y = (x + rms_norm(f)·w) · s, rows of D (x, f, y [.., D] contiguous F32).
  // One op so that an accelerator can do it in one pass; the default composes rms_norm, add and scale.
  virtual void add_rms_norm(const Tensor& x, const Tensor& f, const Tensor* w, float eps, float s, const Tensor& y) {
    Tensor n = empty(f.shape(), DType::F32);
    rms_norm(f, w, eps, n);
    add(x, n, y);
    if (s != 1.0f) scale(y, s, y);
  }

  // ys[i] = x · ws[i]ᵀ for several matrices that read one input (a layer's query, key and value projections): one
  // op so that an accelerator runs them in one pass. The default runs the matmuls.
  virtual void matmul_many(const Tensor& x, const std::vector<const Linear*>& ws, const std::vector<Tensor>& ys) {
    for (size_t i = 0; i < ws.size(); i++) matmul(x, *ws[i], ys[i], false);
  }
  // A pre-norm residual step: y = x + f and n = rms_norm(y)·w (w may be null), one op so that an accelerator reads
  // the row once; the default runs add and rms_norm (n has their bits either way).
  virtual void add_norm(const Tensor& x, const Tensor& f, const Tensor* w, float eps, const Tensor& y,
                        const Tensor& n) {
    add(x, f, y);
    rms_norm(y, w, eps, n);
  }
  // add_rms_norm, then the norm the next block applies to its result: n = rms_norm(y)·w_next (w_next may be null).
  // One op so that the residual row is read once for both; the default runs the two.
  virtual void add_rms_norm_norm(const Tensor& x, const Tensor& f, const Tensor* w, float eps, float s,
                                 const Tensor& y, const Tensor* w_next, const Tensor& n) {
    add_rms_norm(x, f, w, eps, s, y);
    rms_norm(y, w_next, eps, n);
  }
  // add_rms_norm (n null) or add_rms_norm_norm (into n) of the branch f = a · Wᵀ: a block's output projection with
  // the residual add (and the next block's input norm) after it. One op so that an accelerator finishes the rows in
  // the projection's launch; the default runs the matmul, then the norm op.
  virtual void matmul_add_rms_norm(const Tensor& a, const Linear& W, const Tensor& x, const Tensor* w, float eps,
                                   float s, const Tensor& y, const Tensor* w_next, const Tensor* n) {
    Tensor f = empty(y.shape(), DType::F32);
    matmul(a, W, f, false);
    if (n)
      add_rms_norm_norm(x, f, w, eps, s, y, w_next, *n);
    else
      add_rms_norm(x, f, w, eps, s, y);
  }
  // y = rope(rms_norm(x)·w) for x, y [T, H, D] contiguous F32: a query or key head's norm and rotation in one pass
  // (rope as rope() does it, with positions I32 [T]). The default runs the two.
  virtual void rms_norm_rope(const Tensor& x, const Tensor* w, float eps, const Tensor& positions,
                             const Tensor& inv_freq, bool interleaved, const Tensor& y) {
    rms_norm(x, w, eps, y);
    rope(y, positions, inv_freq, interleaved);
  }
  // rms_norm_rope (or, without `rope`, rms_norm) of several [T, H, D] tensors with one T and D (a layer's queries,
  // keys and values): one op so that an accelerator runs them in one launch. With `kv`, parts 1 and 2 are a cache
  // append's keys and values: they go into its slots as kv_write puts them (their y may be left unwritten). The
  // default runs them in turn, then kv_write.
  virtual void rms_norm_rope_many(const std::vector<NormRope>& parts, float eps, const Tensor& positions,
                                  const Tensor& inv_freq, bool interleaved, const KvSlots* kv = nullptr) {
    for (const NormRope& p : parts) {
      if (p.rope)
        rms_norm_rope(*p.x, p.w, eps, positions, inv_freq, interleaved, *p.y);
      else
        rms_norm(*p.x, p.w, eps, *p.y);
    }
    if (kv) kv_write(*parts.at(1).y, *parts.at(2).y, positions, kv->keys, kv->values, kv->slot_pos, kv->ring);
  }
  // Multi-head latent attention's step between its projections. Each token's cache entry [rms_norm(c)·w | rope(r)]
  // from kv [T, L + R] (c its first L columns, r the R after them; rows of unit stride at any row stride), rotated
  // at `positions`, goes into the slot of slot_positions[t] as kv_write puts it (slots.keys [C, 1, L + R], values
  // [C, 1, 0]); the rotary part of each query head, q [T, H, R] (unit last stride, any other strides), goes rotated
  // into q_out (likewise). One op so that an accelerator does it in one launch with the bits of rms_norm, rope and
  // kv_write; the default runs those.
  virtual void latent_entry(const Tensor& kv, const Tensor* w, float eps, const Tensor& q, const Tensor& q_out,
                            const Tensor& positions, const Tensor& slot_positions, const Tensor& inv_freq,
                            bool interleaved, const KvSlots& slots) {
    const int64_t T = kv.dim(0), R = q.dim(2), L = kv.dim(1) - R;
    Tensor e = empty({T, 1, L + R}, DType::F32);
    rms_norm(kv.slice(1, 0, L), w, eps, e.select(1, 0).slice(1, 0, L));
    copy(kv.slice(1, L, L + R), e.select(1, 0).slice(1, L, L + R));
    rope(e.slice(2, L, L + R), positions, inv_freq, interleaved);
    copy(q, q_out);
    rope(q_out, positions, inv_freq, interleaved);
    kv_write(e, empty({T, 1, 0}, DType::F32), slot_positions, slots.keys, slots.values, slots.slot_pos, slots.ring);
  }
  // Several norms of the same rows x [R, D] (a mixture layer's router input and its experts' input): one op so that
  // an accelerator sums each row's squares once for all of them. The default runs rms_norm (and scale) for each.
  virtual void rms_norm_many(const Tensor& x, float eps, const std::vector<ScaledNorm>& outs) {
    for (const ScaledNorm& o : outs) {
      rms_norm(x, o.w, eps, *o.y);
      if (o.s != 1.0f) scale(*o.y, o.s, *o.y);
    }
  }
  // add_rms_norm, then several norms of its result y (a mixture layer's dense input, router input and
  // experts' input): one op so that an accelerator does the residual step and the norms in one pass, with
  // their bits; the default runs add_rms_norm and rms_norm_many.
  virtual void add_rms_norm_many(const Tensor& x, const Tensor& f, const Tensor* w, float eps, float s,
                                 const Tensor& y, const std::vector<ScaledNorm>& outs) {
    add_rms_norm(x, f, w, eps, s, y);
    rms_norm_many(y, eps, outs);
  }
  // The end of a mixture layer with norms after both branches (Gemma 4): f = rms_norm(dense)·w_dense +
  // rms_norm(combine_rows(rows, weights))·w_routed, then add_rms_norm (n null) or add_rms_norm_norm (into n) of x
  // and f. One op so that an accelerator does it in one pass with the bits of those ops; the default runs them.
  virtual void combine_post_norms(const Tensor& rows, const Tensor& weights, const Tensor& dense,
                                  const Tensor* w_dense, const Tensor* w_routed, const Tensor& x, const Tensor* w,
                                  float eps, float s, const Tensor& y, const Tensor* w_next, const Tensor* n) {
    Tensor m = empty(y.shape(), DType::F32), a = empty(y.shape(), DType::F32), b = empty(y.shape(), DType::F32);
    combine_rows(rows, weights, m);
    rms_norm(dense, w_dense, eps, a);
    rms_norm(m, w_routed, eps, b);
    add(a, b, a);
    if (n)
      add_rms_norm_norm(x, a, w, eps, s, y, w_next, *n);
    else
      add_rms_norm(x, a, w, eps, s, y);
  }
  // A mixture's output added to the residual: y = x + (combine_rows(rows, weights) + s), where s (the shared
  // experts' output, [T, D]) may be null, and n = rms_norm(y)·w (w may be null). One op so that an accelerator does
  // it in one pass with the bits of combine_rows, add and add_norm; the default runs those.
  virtual void combine_add_norm(const Tensor& rows, const Tensor& weights, const Tensor* s, const Tensor& x,
                                const Tensor* w, float eps, const Tensor& y, const Tensor& n) {
    Tensor f = empty(y.shape(), DType::F32);
    combine_rows(rows, weights, f);
    if (s) add(f, *s, f);
    add_norm(x, f, w, eps, y, n);
  }
  // y[T, N] = act(x · gateᵀ) ⊙ (x · upᵀ), a gated MLP's first half (gate and up of one shape), or with `up` null
  // y = act(x · gateᵀ) ⊙ m for a given m [T, N] (contiguous F32). One op so that an accelerator reads both weights
  // in one pass and never writes the halves; the default runs the matmuls and `gated`.
  virtual void matmul_gated(const Tensor& x, const Linear& gate, const Linear* up, const Tensor* m, Unary act,
                            const Tensor& y) {
    Tensor g = empty(y.shape(), DType::F32);
    matmul(x, gate, g, false);
    if (up) {
      Tensor u = empty(y.shape(), DType::F32);
      matmul(x, *up, u, false);
      gated(act, g, u, y);
    } else {
      gated(act, g, *m, y);
    }
  }

  // Elementwise (F32, contiguous). b may have fewer rows than a and is then broadcast (b's numel divides a's).
  virtual void add(const Tensor& a, const Tensor& b, const Tensor& y) = 0;
  virtual void mul(const Tensor& a, const Tensor& b, const Tensor& y) = 0;
  virtual void scale(const Tensor& a, float s, const Tensor& y) = 0;
  virtual void unary(Unary op, const Tensor& a, const Tensor& y) = 0;
  // y = act(g) * u, y contiguous. g and u are contiguous or 2-D with rows of unit stride, any row stride (the two
  // halves of a fused gate/up product, read where they are).
  virtual void gated(Unary act, const Tensor& g, const Tensor& u, const Tensor& y) = 0;
  virtual void softcap(const Tensor& a, float cap, const Tensor& y) = 0;  // cap * tanh(a / cap)
  virtual void softmax(const Tensor& a, const Tensor& y) = 0;            // over the last dim
  // Largest k of each row of a [T, N]: values F32 [T, k], indices I32 [T, k], sorted descending; ties go to the
  // lower index. k may be a few hundred over a vocabulary (the sampler's candidates).
  virtual void topk(const Tensor& a, int k, const Tensor& values, const Tensor& indices) = 0;
  // Mixture-of-experts matmul: y[r, :] = x[r / (R / X), :] · W[experts[r]]ᵀ for r < R = experts.numel(), where W is
  // a stacked [E, N, K] Linear and x has X rows (X = R: one input row per output row; X = R / k: each input row
  // feeds k consecutive output rows). The routing stays on the device; the CPU backend groups the rows going to the
  // same expert so that they share its weight read.
  virtual void matmul_experts(const Tensor& x, const Linear& w, const Tensor& experts, const Tensor& y) = 0;
  // matmul_experts through a gated MLP's first half: y[r, :] = act(x_r · G[experts[r]]ᵀ) ⊙ (x_r · U[experts[r]]ᵀ)
  // for gate and up stacked [E, N, K] of one shape (y contiguous). One op so that an accelerator reads both in one
  // launch and never writes the halves; the default runs matmul_experts twice and `gated`.
  virtual void matmul_experts_gated(const Tensor& x, const Linear& gate, const Linear& up, const Tensor& experts,
                                    Unary act, const Tensor& y) {
    Tensor g = empty(y.shape(), DType::F32), u = empty(y.shape(), DType::F32);
    matmul_experts(x, gate, experts, g);
    matmul_experts(x, up, experts, u);
    gated(act, g, u, y);
  }
  // out[t, :] = Σ_j weights[t, j] · rows[t·k + j, :] for rows [T·k, D], weights F32 [T, k].
  virtual void combine_rows(const Tensor& rows, const Tensor& weights, const Tensor& out) = 0;
  // out[i, :] = table[ids[i], :] for an I32 table [R, C] (rows of token ids, e.g. the clusters of the Gemma 4
  // assistant's centroid head); out I32 [n, C]. An id outside [0, R) is an error. An F32 table gives an F32 out
  // (a [V, 1] view of a logits row fetches single logits).
  virtual void gather_rows(const Tensor& table, const Tensor& ids, const Tensor& out) = 0;
  // out[index[i]] = values[i] for F32 values [n], I32 index [n] and a contiguous F32 out (indices distinct).
  virtual void scatter(const Tensor& values, const Tensor& index, const Tensor& out) = 0;
  // A head over chosen clusters of the vocabulary (the Gemma 4 assistant's centroid head): logits[v] = y · table[v]
  // for every token v of the clusters named in `clusters` (rows of groups, I32 [C, per], a partition of the
  // vocabulary), -inf for every other token. y F32 [1, K]; table [V, K] (any encoding `embedding` takes); clusters
  // I32 [k], distinct; logits F32 [1, V], contiguous. An id outside its table is an error. The default gathers the
  // clusters' tokens and rows, multiplies and scatters into a row of -inf; an accelerator does it in one pass.
  virtual void masked_logits(const Tensor& y, const Linear& table, const Tensor& groups, const Tensor& clusters,
                             const Tensor& logits);
  // Mixture-of-experts routing of router outputs a [T, E] into k experts per row: see RouteParams.
  virtual void route(const Tensor& a, const RouteParams& p, const Tensor& weights, const Tensor& experts) = 0;

  // KV cache writes. Row t of k [T, H, D] and v [T, H, Dv] goes to slot positions[t] (modulo the capacity C of
  // keys [C, H, D] / values [C, H, Dv] when `ring`), and slot_pos[slot] = positions[t] (I32 [C]). The positions
  // are read on the device, so a recorded graph writes wherever each replay's positions say.
  virtual void kv_write(const Tensor& k, const Tensor& v, const Tensor& positions, const Tensor& keys,
                        const Tensor& values, const Tensor& slot_pos, bool ring) = 0;
  // slot_pos[s] = -1 wherever slot_pos[s] >= n (a cache rewound to n tokens).
  virtual void forget_positions(const Tensor& slot_pos, int64_t n) = 0;

  // Records the work `work` queues on this device into a graph instead of running it, or returns null when this
  // device has no graphs. While recording, nothing may wait for the device or copy host memory to it (both throw).
  virtual std::unique_ptr<DeviceGraph> record(const std::function<void()>& work) { return nullptr; }

  // Sampling on the device: what the sampler needs from a logits row without bringing the row to the host.
  // Per row of a [R, N] (F32, contiguous): out[r] = log Σ_i exp(scale · a[r, i]) (scale > 0; -inf for a row that
  // is all -inf), i.e. the softmax normaliser at temperature 1 / scale. out F32 [R].
  virtual void logsumexp(const Tensor& a, float scale, const Tensor& out) = 0;
  // The mass a rejected draft's residual max(0, p - q) leaves in each row: for rows of p, q [R, N] (F32,
  // contiguous: a vocabulary's logits cut into blocks), out[r] = Σ_i max(0, exp(p_scale·p[r, i] - p_shift) -
  // exp(q_scale·q[r, i] - q_shift)), a -inf logit giving 0. out F32 [R].
  virtual void residual_mass(const Tensor& p, const Tensor& q, float p_scale, float p_shift, float q_scale,
                             float q_shift, const Tensor& out) = 0;
  // In place on a row x [N] (F32, contiguous): x[i] = -inf where bit i of `bits` is clear. bits I32
  // [ceil(N / 32)] (bit i is bit i % 32 of word i / 32: a grammar's 64-bit mask words read as 32-bit halves).
  virtual void mask_tokens(const Tensor& x, const Tensor& bits) = 0;
  // In place on a row x [N] (F32, contiguous), for each distinct id of ids I32 [n] with count counts I32 [n]
  // (ids outside [0, N) are skipped), exactly as the host sampler: l = l < 0 ? l · repeat : l / repeat (when
  // repeat != 1), then l -= presence, then l -= frequency · count (each step rounded to F32).
  virtual void penalize(const Tensor& x, const Tensor& ids, const Tensor& counts, float repeat, float presence,
                        float frequency) = 0;
};

// take_profile's table from an op's (name, seconds) samples: a row per name, "name ×count" with the summed seconds,
// in name order (what every backend's take_profile returns).
std::vector<std::pair<std::string, double>> profile_table(const std::vector<std::pair<std::string, double>>& samples);

// The backend registry: which devices this build and this machine have.
// backend_for throws a clear error for a device that is absent ("no cuda:1 on this machine: it has cpu, cuda:0").
Backend& backend_for(Device device);
Backend& cpu_backend();
std::vector<Device> available_devices();  // the CPU first, then each CUDA device
bool device_available(Device device);
// The device a model runs on when nobody says: VATIC_DEVICE (cpu, cuda, cuda:N) when set, else the first CUDA
// device when there is one, else the CPU. Throws when VATIC_DEVICE names a device that is absent.
Device default_device();
// Parses a user's --device / VATIC_DEVICE value ("auto" = default_device()) and checks it is available.
Device resolve_device(const std::string& text);

}  // namespace vatic
