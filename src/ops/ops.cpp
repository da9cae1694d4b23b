#include "ops/ops.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace vatic::ops {

void count_dispatch() {
  static const int64_t limit = [] {
    const char* e = std::getenv("VATIC_FAIL_DEVICE_AFTER");
    return e && *e ? std::strtoll(e, nullptr, 10) : int64_t(-1);
  }();
  if (limit < 0) return;
  static std::atomic<int64_t> count{0};
  if (count.fetch_add(1) >= limit)
    throw DeviceError(fmt::format("injected device failure after {} operations (VATIC_FAIL_DEVICE_AFTER)", limit));
}

Backend& backend_of(const Tensor& t) {
  count_dispatch();
  return backend_for(t.device());
}

namespace {
// The backend of the first input, after checking that every other (defined) input lives on the same device.
template <typename... Ts>
Backend& backend_of_all(const char* op, const Tensor& first, const Ts&... rest) {
  const Device d = first.device();
  auto check = [&](const Tensor& t) {
    if (t.defined() && t.device() != d)
      throw Error(fmt::format("{}: inputs on different devices ({} on {}, {} on {})", op, first.describe(), d.str(),
                              t.describe(), t.device().str()));
  };
  (check(rest), ...);
  count_dispatch();
  return backend_for(d);
}
Backend& backend_of_linear(const char* op, const Tensor& x, const Linear& w) {
  return backend_of_all(op, x, w.weight, w.scales, w.biases);
}
}  // namespace

Tensor empty_like(const Tensor& t, const Shape& shape, DType dtype) { return backend_of(t).empty(shape, dtype); }
Tensor zeros(const Shape& shape, Device device) {
  Backend& be = backend_for(device);
  Tensor t = be.empty(shape, DType::F32);
  be.fill(t, 0.0f);
  return t;
}

Tensor ids(const std::vector<int32_t>& values, Device device) {
  return backend_for(device).upload(Tensor::from_ints(values, {static_cast<int64_t>(values.size())}));
}
Tensor floats(const std::vector<float>& values, Device device) {
  return backend_for(device).upload(Tensor::from_floats(values, {static_cast<int64_t>(values.size())}));
}
Tensor to_host(const Tensor& t) { return backend_of(t).download(t); }
Tensor to_device(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  Tensor host = t.device().is_cpu() ? t : to_host(t);
  return backend_for(device).upload(host);
}
std::vector<float> to_vector(const Tensor& t) {
  Tensor h = to_host(to_f32(t));
  std::vector<float> v(h.numel());
  std::memcpy(v.data(), h.raw(), v.size() * 4);
  return v;
}
Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = empty_like(t, t.shape(), t.dtype());
  backend_of(t).copy(t, out);
  return out;
}
Tensor to_f32(const Tensor& t) {
  if (t.dtype() == DType::F32) return contiguous(t);
  Tensor out = empty_like(t, t.shape(), DType::F32);
  backend_of(t).copy(t, out);
  return out;
}
void copy_into(const Tensor& src, const Tensor& dst) { backend_of_all("copy", dst, src).copy(src, dst); }

Tensor matmul(const Tensor& x, const Linear& w) {
  Tensor y = empty_like(x, {x.dim(0), w.out_features()});
  backend_of_linear("matmul", x, w).matmul(x, w, y, false);
  return y;
}
void matmul_into(const Tensor& x, const Linear& w, const Tensor& y) {
  VATIC_CHECK(y.dtype() == DType::F32 && y.is_contiguous() && y.ndim() == 2 && y.dim(0) == x.dim(0) &&
                  y.dim(1) == w.out_features(),
              "matmul_into: {} for {} rows of {} outputs", y.describe(), x.dim(0), w.out_features());
  backend_of_all("matmul", y, x, w.weight, w.scales, w.biases).matmul(x, w, y, false);
}
void matmul_accumulate(const Tensor& x, const Linear& w, const Tensor& y) {
  backend_of_all("matmul", y, x, w.weight, w.scales, w.biases).matmul(x, w, y, true);
}

std::vector<Tensor> matmul_many(const Tensor& x, const std::vector<const Linear*>& ws) {
  std::vector<Tensor> ys;
  for (const Linear* w : ws) {
    backend_of_linear("matmul", x, *w);
    ys.push_back(empty_like(x, {x.dim(0), w->out_features()}));
  }
  if (!ws.empty()) backend_of(x).matmul_many(x, ws, ys);
  return ys;
}

void embedding_into(const Linear& table, const Tensor& ids_, float scale, const Tensor& out) {
  VATIC_CHECK(out.ndim() == 2 && out.dim(0) == ids_.numel() && out.dim(1) == table.in_features() &&
                  out.dtype() == DType::F32 && out.stride(1) == 1,
              "embedding_into: {} for {} ids of width {}", out.describe(), ids_.numel(), table.in_features());
  backend_of_all("embedding", out, ids_, table.weight, table.scales, table.biases).embedding(table, ids_, scale, out);
}
Tensor embedding(const Linear& table, const Tensor& ids_, float scale) {
  Tensor out = empty_like(table.weight, {ids_.numel(), table.in_features()});
  embedding_into(table, ids_, scale, out);
  return out;
}
Tensor embedding(const Tensor& table, const Tensor& ids_, float scale) {
  Linear l;
  l.weight = table;
  return embedding(l, ids_, scale);
}
Tensor rms_norm(const Tensor& x, const Tensor& w, float eps) {
  Tensor y = empty_like(x, x.shape());
  rms_norm_into(x, w, eps, y);
  return y;
}
void rms_norm_into(const Tensor& x, const Tensor& w, float eps, const Tensor& y) {
  VATIC_CHECK(x.shape() == y.shape() && (y.is_contiguous() || (y.ndim() == 2 && y.stride(1) == 1)),
              "rms_norm: {} into {}", x.describe(), y.describe());
  const Tensor xr = x.is_contiguous() || (x.ndim() == 2 && x.stride(1) == 1) ? x : contiguous(x);
  backend_of_all("rms_norm", x, w, y).rms_norm(xr, w.defined() ? &w : nullptr, eps, y);
}
namespace {
// One output like x per scaling, and the backend's list of them; each scaling's weight must be on x's device.
std::vector<ScaledNorm> norm_outputs(const char* op, const Tensor& x, const std::vector<NormScale>& norms,
                                     std::vector<Tensor>& ys) {
  ys.clear();
  ys.reserve(norms.size());  // the list points at its elements
  std::vector<ScaledNorm> outs;
  outs.reserve(norms.size());
  for (const NormScale& n : norms) {
    if (n.w.defined()) backend_of_all(op, x, n.w);
    ys.push_back(empty_like(x, x.shape()));
    outs.push_back(ScaledNorm{n.w.defined() ? &n.w : nullptr, n.s, &ys.back()});
  }
  return outs;
}
}  // namespace

std::vector<Tensor> rms_norm_many(const Tensor& x, float eps, const std::vector<NormScale>& norms) {
  const Tensor xr = x.is_contiguous() || (x.ndim() == 2 && x.stride(1) == 1) ? x : contiguous(x);
  std::vector<Tensor> ys;
  const std::vector<ScaledNorm> outs = norm_outputs("rms_norm_many", x, norms, ys);
  backend_of(x).rms_norm_many(xr, eps, outs);
  return ys;
}
ResidualAndNorms add_rms_norm_many(const Tensor& x, const Tensor& f, const Tensor& w, float eps, float s,
                                   const std::vector<NormScale>& norms) {
  VATIC_CHECK(x.shape() == f.shape(), "add_rms_norm_many: {} and {}", x.describe(), f.describe());
  ResidualAndNorms r{empty_like(x, x.shape()), {}};
  Backend& be = backend_of_all("add_rms_norm_many", x, f, w);
  const std::vector<ScaledNorm> outs = norm_outputs("add_rms_norm_many", x, norms, r.normed);
  be.add_rms_norm_many(contiguous(x), contiguous(f), w.defined() ? &w : nullptr, eps, s, r.residual, outs);
  return r;
}
Tensor add_rms_norm(const Tensor& x, const Tensor& f, const Tensor& w, float eps, float s) {
  VATIC_CHECK(x.shape() == f.shape(), "add_rms_norm: {} and {}", x.describe(), f.describe());
  Tensor y = empty_like(x, x.shape());
  backend_of_all("add_rms_norm", x, f, w).add_rms_norm(contiguous(x), contiguous(f), w.defined() ? &w : nullptr, eps, s, y);
  return y;
}
ResidualAndNorm add_rms_norm_norm(const Tensor& x, const Tensor& f, const Tensor& w, float eps, float s,
                                  const Tensor& w_next) {
  VATIC_CHECK(x.shape() == f.shape(), "add_rms_norm: {} and {}", x.describe(), f.describe());
  ResidualAndNorm r{empty_like(x, x.shape()), empty_like(x, x.shape())};
  backend_of_all("add_rms_norm", x, f, w, w_next)
      .add_rms_norm_norm(contiguous(x), contiguous(f), w.defined() ? &w : nullptr, eps, s, r.residual,
                         w_next.defined() ? &w_next : nullptr, r.normed);
  return r;
}
ResidualAndNorm add_norm(const Tensor& x, const Tensor& f, const Tensor& w, float eps) {
  VATIC_CHECK(x.shape() == f.shape(), "add_norm: {} and {}", x.describe(), f.describe());
  ResidualAndNorm r{empty_like(x, x.shape()), empty_like(x, x.shape())};
  backend_of_all("add_norm", x, f, w)
      .add_norm(contiguous(x), contiguous(f), w.defined() ? &w : nullptr, eps, r.residual, r.normed);
  return r;
}
namespace {
void check_projection(const char* op, const Tensor& a, const Linear& w_out, const Tensor& x) {
  VATIC_CHECK(a.ndim() == 2 && x.ndim() == 2 && a.dim(0) == x.dim(0) && w_out.in_features() == a.dim(1) &&
                  w_out.out_features() == x.dim(1),
              "{}: {} · W{} onto {}", op, a.describe(), w_out.weight.describe(), x.describe());
}
}  // namespace
Tensor matmul_add_rms_norm(const Tensor& a, const Linear& w_out, const Tensor& x, const Tensor& w, float eps, float s) {
  check_projection("matmul_add_rms_norm", a, w_out, x);
  Tensor y = empty_like(x, x.shape());
  backend_of_all("matmul_add_rms_norm", a, w_out.weight, w_out.scales, w_out.biases, x, w)
      .matmul_add_rms_norm(a, w_out, contiguous(x), w.defined() ? &w : nullptr, eps, s, y, nullptr, nullptr);
  return y;
}
ResidualAndNorm matmul_add_rms_norm_norm(const Tensor& a, const Linear& w_out, const Tensor& x, const Tensor& w,
                                         float eps, float s, const Tensor& w_next) {
  check_projection("matmul_add_rms_norm", a, w_out, x);
  ResidualAndNorm r{empty_like(x, x.shape()), empty_like(x, x.shape())};
  backend_of_all("matmul_add_rms_norm", a, w_out.weight, w_out.scales, w_out.biases, x, w, w_next)
      .matmul_add_rms_norm(a, w_out, contiguous(x), w.defined() ? &w : nullptr, eps, s, r.residual,
                           w_next.defined() ? &w_next : nullptr, &r.normed);
  return r;
}
void rope_inplace(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool interleaved) {
  backend_of_all("rope", x, positions, inv_freq).rope(x, positions, inv_freq, interleaved);
}
Tensor rms_norm_rope(const Tensor& x, const Tensor& w, float eps, const Tensor& positions, const Tensor& inv_freq,
                     bool interleaved) {
  VATIC_CHECK(x.ndim() == 3, "rms_norm_rope expects [T, H, D], got {}", x.describe());
  Tensor y = empty_like(x, x.shape());
  backend_of_all("rms_norm_rope", x, w, positions, inv_freq)
      .rms_norm_rope(contiguous(x), w.defined() ? &w : nullptr, eps, positions, inv_freq, interleaved, y);
  return y;
}
std::vector<Tensor> rms_norm_rope_many(const std::vector<NormRopeInput>& in, float eps, const Tensor& positions,
                                       const Tensor& inv_freq, bool interleaved, const KvSlots* kv) {
  VATIC_CHECK(!in.empty(), "rms_norm_rope_many of nothing");
  VATIC_CHECK(!kv || in.size() == 3, "rms_norm_rope_many into a cache takes queries, keys and values");
  std::vector<Tensor> xs, ys;
  std::vector<NormRope> parts;
  for (const NormRopeInput& i : in) {
    VATIC_CHECK(i.x.ndim() == 3 && i.x.dim(0) == in[0].x.dim(0) && i.x.dim(2) == in[0].x.dim(2),
                "rms_norm_rope_many expects [T, H, D] of one T and D, got {} and {}", in[0].x.describe(),
                i.x.describe());
    VATIC_CHECK(i.x.device() == in[0].x.device() && (!i.w.defined() || i.w.device() == in[0].x.device()),
                "rms_norm_rope_many: inputs on different devices ({} and {})", in[0].x.describe(), i.x.describe());
    xs.push_back(contiguous(i.x));
    ys.push_back(empty_like(i.x, i.x.shape()));
  }
  for (size_t j = 0; j < in.size(); j++)
    parts.push_back(NormRope{&xs[j], in[j].w.defined() ? &in[j].w : nullptr, in[j].rope, &ys[j]});
  Backend& be = backend_of_all("rms_norm_rope_many", in[0].x, positions, inv_freq);
  if (kv) backend_of_all("rms_norm_rope_many", in[0].x, kv->keys, kv->values, kv->slot_pos);
  be.rms_norm_rope_many(parts, eps, positions, inv_freq, interleaved, kv);
  return ys;
}
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                 const AttentionParams& p) {
  Tensor out = empty_like(q, {q.dim(0), q.dim(1), v.dim(2)});
  backend_of_all("attention", q, k, v, q_pos, k_pos).attention(q, k, v, q_pos, k_pos, p, out);
  return out;
}
void latent_entry(const Tensor& kv, const Tensor& w, float eps, const Tensor& q, const Tensor& q_out,
                  const Tensor& positions, const Tensor& slot_positions, const Tensor& inv_freq, bool interleaved,
                  const KvSlots& slots) {
  const int64_t T = kv.ndim() == 2 ? kv.dim(0) : -1, R = q.ndim() == 3 ? q.dim(2) : -1;
  VATIC_CHECK(kv.ndim() == 2 && kv.stride(1) == 1 && q.ndim() == 3 && q.dim(0) == T && q.stride(2) == 1 &&
                  q_out.shape() == q.shape() && q_out.stride(2) == 1 && R > 0 && kv.dim(1) > R &&
                  positions.numel() == T && slot_positions.numel() == T && slots.keys.ndim() == 3 &&
                  slots.keys.dim(1) == 1 && slots.keys.dim(2) == kv.dim(1) && slots.values.ndim() == 3 &&
                  slots.values.dim(2) == 0 && (!w.defined() || w.numel() == kv.dim(1) - R),
              "latent_entry: kv {} norm {} q {} into {} and keys {} values {} at {} positions", kv.describe(),
              w.describe(), q.describe(), q_out.describe(), slots.keys.describe(), slots.values.describe(),
              positions.numel());
  backend_of_all("latent_entry", kv, w, q, q_out, positions, slot_positions, inv_freq, slots.keys, slots.values,
                 slots.slot_pos)
      .latent_entry(kv, w.defined() ? &w : nullptr, eps, q, q_out, contiguous(positions), contiguous(slot_positions),
                    inv_freq, interleaved, slots);
}
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = empty_like(a, a.shape());
  backend_of_all("add", a, b).add(contiguous(a), contiguous(b), y);
  return y;
}
void add_inplace(const Tensor& a, const Tensor& b) { backend_of_all("add", a, b).add(a, contiguous(b), a); }
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = empty_like(a, a.shape());
  backend_of_all("mul", a, b).mul(contiguous(a), contiguous(b), y);
  return y;
}
Tensor scale(const Tensor& a, float s) {
  Tensor y = empty_like(a, a.shape());
  backend_of(a).scale(contiguous(a), s, y);
  return y;
}
Tensor unary(Unary op, const Tensor& a) {
  Tensor y = empty_like(a, a.shape());
  backend_of(a).unary(op, contiguous(a), y);
  return y;
}
Tensor gated(Unary act, const Tensor& g, const Tensor& u) {
  Tensor y = empty_like(g, g.shape());
  // Rows of a wider tensor (a fused gate/up product's halves) are read in place.
  auto rows = [](const Tensor& t) { return t.ndim() == 2 && t.stride(1) == 1 ? t : contiguous(t); };
  backend_of_all("gated", g, u).gated(act, rows(g), rows(u), y);
  return y;
}
Tensor matmul_gated(const Tensor& x, const Linear& gate, const Linear& up, Unary act) {
  VATIC_CHECK(gate.out_features() == up.out_features() && gate.in_features() == up.in_features(),
              "matmul_gated: gate {} and up {} differ in shape", gate.weight.describe(), up.weight.describe());
  Tensor y = empty_like(x, {x.dim(0), gate.out_features()});
  backend_of_all("matmul", x, gate.weight, gate.scales, gate.biases, up.weight, up.scales, up.biases)
      .matmul_gated(x, gate, &up, nullptr, act, y);
  return y;
}
Tensor matmul_gated(const Tensor& x, const Linear& w, const Tensor& m, Unary act) {
  VATIC_CHECK(m.ndim() == 2 && m.dim(0) == x.dim(0) && m.dim(1) == w.out_features(),
              "matmul_gated: multiplier {} for {} rows of {}", m.describe(), x.dim(0), w.out_features());
  Tensor y = empty_like(x, {x.dim(0), w.out_features()});
  const Tensor mc = contiguous(m);
  backend_of_all("matmul", x, w.weight, w.scales, w.biases, m).matmul_gated(x, w, nullptr, &mc, act, y);
  return y;
}
Tensor softcap(const Tensor& a, float cap) {
  Tensor y = empty_like(a, a.shape());
  backend_of(a).softcap(contiguous(a), cap, y);
  return y;
}
Tensor softmax(const Tensor& a) {
  Tensor y = empty_like(a, a.shape());
  backend_of(a).softmax(contiguous(a), y);
  return y;
}
void topk(const Tensor& a, int k, Tensor* values, Tensor* indices) {
  Shape s = a.shape();
  s.back() = k;
  *values = empty_like(a, s, DType::F32);
  *indices = empty_like(a, s, DType::I32);
  backend_of(a).topk(contiguous(a), k, *values, *indices);
}
std::vector<int32_t> argmax_rows(const Tensor& a) {
  Tensor values, ids;
  topk(a, 1, &values, &ids);
  Tensor h = to_host(ids);
  return std::vector<int32_t>(h.data<int32_t>(), h.data<int32_t>() + h.numel());
}
Tensor concat_cols(const Tensor& a, const Tensor& b) {
  const int64_t T = a.dim(0), A = a.dim(1), B = b.dim(1);
  Tensor y = empty_like(a, {T, A + B});
  Backend& be = backend_of_all("concat_cols", a, b);
  be.copy(a, y.slice(1, 0, A));
  be.copy(b, y.slice(1, A, A + B));
  return y;
}

Tensor gather_rows(const Tensor& table, const Tensor& ids_) {
  Tensor out = empty_like(table, {ids_.numel(), table.dim(1)}, table.dtype());
  backend_of_all("gather_rows", table, ids_).gather_rows(contiguous(table), contiguous(ids_), out);
  return out;
}
void scatter(const Tensor& values, const Tensor& index, const Tensor& out) {
  backend_of_all("scatter", out, values, index).scatter(contiguous(values), contiguous(index), out);
}

Tensor masked_logits(const Tensor& y, const Linear& table, const Tensor& groups, const Tensor& clusters) {
  Tensor logits = empty_like(y, {1, table.out_features()});
  backend_of_all("masked_logits", y, groups, clusters, table.weight, table.scales, table.biases)
      .masked_logits(contiguous(y), table, contiguous(groups), contiguous(clusters), logits);
  return logits;
}

void kv_write(const Tensor& k, const Tensor& v, const Tensor& positions, const Tensor& keys, const Tensor& values,
              const Tensor& slot_pos, bool ring) {
  backend_of_all("kv_write", keys, values, slot_pos, k, v, positions)
      .kv_write(k, v, contiguous(positions), keys, values, slot_pos, ring);
}

std::unique_ptr<DeviceGraph> record(Device device, const std::function<void()>& work) {
  return backend_for(device).record(work);
}

void forget_positions(const Tensor& slot_pos, int64_t n) {
  backend_for(slot_pos.device()).forget_positions(slot_pos, n);
}

Tensor matmul_experts(const Tensor& x, const Linear& w, const Tensor& experts) {
  Tensor y = empty_like(x, {experts.numel(), w.out_features()});
  matmul_experts_into(x, w, experts, y);
  return y;
}
void matmul_experts_into(const Tensor& x, const Linear& w, const Tensor& experts, const Tensor& y) {
  VATIC_CHECK(y.ndim() == 2 && y.stride(1) == 1, "matmul_experts: output {} is not rows of unit stride",
              y.describe());
  const Tensor xr = x.ndim() == 2 && x.stride(1) == 1 ? x : contiguous(x);
  backend_of_all("matmul_experts", x, w.weight, w.scales, w.biases, experts, y)
      .matmul_experts(xr, w, contiguous(experts), y);
}
Tensor matmul_experts_gated(const Tensor& x, const Linear& gate, const Linear& up, const Tensor& experts, Unary act) {
  VATIC_CHECK(gate.out_features() == up.out_features() && gate.in_features() == up.in_features() &&
                  gate.weight.ndim() == 3 && up.weight.ndim() == 3 && gate.weight.dim(0) == up.weight.dim(0),
              "matmul_experts_gated: gate {} and up {} differ in shape", gate.weight.describe(), up.weight.describe());
  Tensor y = empty_like(x, {experts.numel(), gate.out_features()});
  const Tensor xr = x.ndim() == 2 && x.stride(1) == 1 ? x : contiguous(x);
  backend_of_all("matmul_experts", x, gate.weight, gate.scales, gate.biases, up.weight, up.scales, up.biases, experts)
      .matmul_experts_gated(xr, gate, up, contiguous(experts), act, y);
  return y;
}
Tensor combine_rows(const Tensor& rows, const Tensor& weights) {
  Tensor out = empty_like(rows, {weights.dim(0), rows.dim(1)});
  backend_of_all("combine_rows", rows, weights).combine_rows(contiguous(rows), contiguous(weights), out);
  return out;
}
ResidualAndNorm combine_add_norm(const Tensor& rows, const Tensor& weights, const Tensor& s, const Tensor& x,
                                 const Tensor& w, float eps) {
  VATIC_CHECK(rows.ndim() == 2 && weights.ndim() == 2 && x.ndim() == 2 && x.dim(0) == weights.dim(0) &&
                  rows.dim(0) == weights.numel() && rows.dim(1) == x.dim(1) && (!s.defined() || s.shape() == x.shape()),
              "combine_add_norm: rows {} weights {} shared {} onto {}", rows.describe(), weights.describe(),
              s.describe(), x.describe());
  ResidualAndNorm r{empty_like(x, x.shape()), empty_like(x, x.shape())};
  const Tensor sc = s.defined() ? contiguous(s) : Tensor();
  backend_of_all("combine_add_norm", rows, weights, s, x, w)
      .combine_add_norm(contiguous(rows), contiguous(weights), s.defined() ? &sc : nullptr, contiguous(x),
                        w.defined() ? &w : nullptr, eps, r.residual, r.normed);
  return r;
}
ResidualAndNorm combine_post_norms(const Tensor& rows, const Tensor& weights, const Tensor& dense,
                                   const Tensor& w_dense, const Tensor& w_routed, const Tensor& x, const Tensor& w,
                                   float eps, float s, bool next_norm, const Tensor& w_next) {
  VATIC_CHECK(rows.ndim() == 2 && weights.ndim() == 2 && x.ndim() == 2 && x.dim(0) == weights.dim(0) &&
                  rows.dim(0) == weights.numel() && rows.dim(1) == x.dim(1) && dense.shape() == x.shape(),
              "combine_post_norms: rows {} weights {} dense {} onto {}", rows.describe(), weights.describe(),
              dense.describe(), x.describe());
  ResidualAndNorm r{empty_like(x, x.shape()), next_norm ? empty_like(x, x.shape()) : Tensor()};
  auto opt = [](const Tensor& t) { return t.defined() ? &t : nullptr; };
  backend_of_all("combine_post_norms", rows, weights, dense, w_dense, w_routed, x, w, w_next)
      .combine_post_norms(contiguous(rows), contiguous(weights), contiguous(dense), opt(w_dense), opt(w_routed),
                          contiguous(x), opt(w), eps, s, r.residual, opt(w_next), next_norm ? &r.normed : nullptr);
  return r;
}
void route(const Tensor& router_out, const RouteParams& p, Tensor* weights, Tensor* experts) {
  const int64_t T = router_out.numel() / router_out.dim(-1);
  *weights = empty_like(router_out, {T, p.k}, DType::F32);
  *experts = empty_like(router_out, {T, p.k}, DType::I32);
  backend_of_all("route", router_out, p.bias ? *p.bias : Tensor(), p.expert_scale ? *p.expert_scale : Tensor())
      .route(contiguous(router_out), p, *weights, *experts);
}

Tensor logsumexp(const Tensor& a, float scale) {
  const int64_t N = a.dim(-1);
  Tensor out = empty_like(a, {N ? a.numel() / N : 0}, DType::F32);
  backend_of(a).logsumexp(contiguous(a), scale, out);
  return out;
}
Tensor residual_mass(const Tensor& p, const Tensor& q, float p_scale, float p_shift, float q_scale, float q_shift) {
  VATIC_CHECK(p.shape() == q.shape(), "residual_mass: p {} and q {}", p.describe(), q.describe());
  const int64_t N = p.dim(-1);
  Tensor out = empty_like(p, {N ? p.numel() / N : 0}, DType::F32);
  backend_of_all("residual_mass", p, q).residual_mass(contiguous(p), contiguous(q), p_scale, p_shift, q_scale, q_shift,
                                                      out);
  return out;
}
void mask_tokens(const Tensor& row, const std::vector<uint64_t>& allowed) {
  Backend& be = backend_of(row);
  std::vector<int32_t> halves(allowed.size() * 2);
  for (size_t w = 0; w < allowed.size(); w++) {
    halves[2 * w] = static_cast<int32_t>(static_cast<uint32_t>(allowed[w]));
    halves[2 * w + 1] = static_cast<int32_t>(static_cast<uint32_t>(allowed[w] >> 32));
  }
  be.mask_tokens(row, be.upload(Tensor::from_ints(halves, {static_cast<int64_t>(halves.size())})));
}
void penalize(const Tensor& row, const std::vector<int32_t>& ids_, const std::vector<int32_t>& counts, float repeat,
              float presence, float frequency) {
  if (ids_.empty()) return;
  Backend& be = backend_of(row);
  const int64_t n = static_cast<int64_t>(ids_.size());
  be.penalize(row, be.upload(Tensor::from_ints(ids_, {n})), be.upload(Tensor::from_ints(counts, {n})), repeat,
              presence, frequency);
}

}  // namespace vatic::ops
