#include "models/blocks.h"

#include <cmath>

#include "models/weights.h"
#include "ops/ops.h"

namespace vatic::blocks {

Rope parse_rope(const Fields& f, const json* params, const std::string& where, double default_theta) {
  Rope r;
  r.theta = default_theta;
  if (!params) return r;
  if (!params->is_object()) f.error(where, "expected an object");
  Fields p(*params, f.source(), f.field(where) + ".");
  r.type = p.str("rope_type", p.str("type", "default"));
  r.theta = p.positive_num("rope_theta", default_theta);
  if (r.type == "default") return r;
  if (r.type == "linear") {
    r.factor = p.positive_num("factor", 1.0);
    return r;
  }
  if (r.type == "llama3") {
    r.factor = p.positive_num("factor", 8.0);
    r.low_freq_factor = p.positive_num("low_freq_factor", 1.0);
    r.high_freq_factor = p.positive_num("high_freq_factor", 4.0);
    r.original_max_position = p.positive_num("original_max_position_embeddings", 8192);
    if (!(r.high_freq_factor > r.low_freq_factor))
      p.error("high_freq_factor", "must be larger than low_freq_factor");
    return r;
  }
  p.error("rope_type",
          fmt::format("unsupported RoPE type \"{}\" (supported: default, linear, llama3)", r.type));
}

Tensor rope_inv_freq(const Rope& rope, int head_dim, Device device) {
  // Load-time table (float32, as transformers computes it): theta^(-2i/d), then the scaling rule.
  const int pairs = head_dim / 2;
  std::vector<float> f(static_cast<size_t>(pairs));
  const float theta = static_cast<float>(rope.theta);
  for (int i = 0; i < pairs; i++)
    f[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  if (rope.type == "linear") {
    for (float& x : f) x /= static_cast<float>(rope.factor);
  } else if (rope.type == "llama3") {
    const float factor = static_cast<float>(rope.factor), lo = static_cast<float>(rope.low_freq_factor),
                hi = static_cast<float>(rope.high_freq_factor),
                old = static_cast<float>(rope.original_max_position);
    const float low_wavelen = old / lo, high_wavelen = old / hi;
    const float pi = 3.14159265358979323846f;
    for (float& x : f) {
      const float wavelen = 2 * pi / x;
      float v = wavelen > low_wavelen ? x / factor : x;
      const float smooth = (old / wavelen - lo) / (hi - lo);
      const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      if (medium) v = (1 - smooth) * v / factor + smooth * v;
      x = v;
    }
  }
  return ops::floats(f, device);
}

Tensor load_norm(const TensorStore& ts, const std::string& name, int64_t n, bool plus_one) {
  Tensor w = load_f32(ts, name, {n});
  if (!plus_one) return w;
  return ops::add(w, ops::floats(std::vector<float>(static_cast<size_t>(n), 1.0f), w.device()));
}

void expect_attention(const std::string& p, const AttentionShape& s, std::vector<ExpectedTensor>& e) {
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim, H = s.hidden;
  e.push_back({p + "q_proj.weight", {q, H}});
  e.push_back({p + "k_proj.weight", {kv, H}});
  e.push_back({p + "v_proj.weight", {kv, H}});
  e.push_back({p + "o_proj.weight", {H, q}});
  if (s.bias) {
    e.push_back({p + "q_proj.bias", {q}});
    e.push_back({p + "k_proj.bias", {kv}});
    e.push_back({p + "v_proj.bias", {kv}});
    e.push_back({p + "o_proj.bias", {H}, true});
  }
  if (s.qk_norm) {
    e.push_back({p + "q_norm.weight", {s.head_dim}});
    e.push_back({p + "k_norm.weight", {s.head_dim}});
  }
}

AttentionWeights load_attention(const TensorStore& ts, const std::string& p, const AttentionShape& s,
                                Tensor inv_freq) {
  AttentionWeights w;
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim, H = s.hidden;
  w.q = load_linear(ts, p + "q_proj", q, H);
  w.k = load_linear(ts, p + "k_proj", kv, H);
  w.v = load_linear(ts, p + "v_proj", kv, H);
  w.o = load_linear(ts, p + "o_proj", H, q);
  if (s.bias) {
    w.q_bias = load_f32(ts, p + "q_proj.bias", {q});
    w.k_bias = load_f32(ts, p + "k_proj.bias", {kv});
    w.v_bias = load_f32(ts, p + "v_proj.bias", {kv});
    if (ts.has(p + "o_proj.bias")) w.o_bias = load_f32(ts, p + "o_proj.bias", {H});
  }
  if (s.qk_norm) {
    w.q_norm = load_norm(ts, p + "q_norm.weight", s.head_dim, s.norm_plus_one);
    w.k_norm = load_norm(ts, p + "k_norm.weight", s.head_dim, s.norm_plus_one);
  }
  w.inv_freq = std::move(inv_freq);
  return w;
}

namespace {

Tensor project(const Tensor& x, const Linear& w, const Tensor& bias) {
  Tensor y = ops::matmul(x, w);
  if (bias.defined()) ops::add_inplace(y, bias);
  return y;
}

}  // namespace

Tensor attention(const AttentionWeights& w, const AttentionShape& s, const Tensor& x, const Tensor& positions,
                 KvCache& cache) {
  const int64_t T = x.dim(0);
  Tensor q = project(x, w.q, w.q_bias).reshape({T, s.heads, s.head_dim});
  Tensor k = project(x, w.k, w.k_bias).reshape({T, s.kv_heads, s.head_dim});
  Tensor v = project(x, w.v, w.v_bias).reshape({T, s.kv_heads, s.head_dim});
  if (s.qk_norm) {
    q = ops::rms_norm(q, w.q_norm, s.eps);
    k = ops::rms_norm(k, w.k_norm, s.eps);
  }
  ops::rope_inplace(q, positions, w.inv_freq, false);
  ops::rope_inplace(k, positions, w.inv_freq, false);
  cache.append(k, v);
  AttentionParams ap;
  ap.scale = s.scale;
  ap.window = s.window;
  Tensor out = ops::attention(q, cache.keys(), cache.values(), positions, cache.positions(), ap);
  return project(out.reshape({T, s.heads * s.head_dim}), w.o, w.o_bias);
}

void expect_mlp(const std::string& p, int64_t I, int64_t H, std::vector<ExpectedTensor>& e) {
  e.push_back({p + "gate_proj.weight", {I, H}});
  e.push_back({p + "up_proj.weight", {I, H}});
  e.push_back({p + "down_proj.weight", {H, I}});
}

Mlp load_mlp(const TensorStore& ts, const std::string& p, int64_t I, int64_t H) {
  return {load_linear(ts, p + "gate_proj", I, H), load_linear(ts, p + "up_proj", I, H),
          load_linear(ts, p + "down_proj", H, I)};
}

Tensor gated_mlp(const Mlp& m, Unary act, const Tensor& x) {
  return ops::matmul(ops::gated(act, ops::matmul(x, m.gate), ops::matmul(x, m.up)), m.down);
}

void expect_softmax_moe(const std::string& p, int64_t E, int64_t I, int64_t H,
                        const std::function<bool(const std::string&)>& has, std::vector<ExpectedTensor>& e) {
  e.push_back({p + "gate.weight", {E, H}});
  const std::string x = p + "experts.";
  if (has(x + "gate_up_proj") || has(x + "gate_up_proj.weight")) {
    const std::string s = has(x + "gate_up_proj") ? "" : ".weight";
    e.push_back({x + "gate_up_proj" + s, {E, 2 * I, H}});
    e.push_back({x + "down_proj" + s, {E, H, I}});
  } else if (has(x + "gate_proj.weight")) {
    e.push_back({x + "gate_proj.weight", {E, I, H}});
    e.push_back({x + "up_proj.weight", {E, I, H}});
    e.push_back({x + "down_proj.weight", {E, H, I}});
  } else {
    for (int64_t i = 0; i < E; i++) expect_mlp(x + std::to_string(i) + ".", I, H, e);
  }
}

SoftmaxMoe load_softmax_moe(const TensorStore& ts, const std::string& p, int64_t E, int64_t I, int64_t H,
                            int top_k, bool renormalize) {
  SoftmaxMoe m;
  m.router = load_linear(ts, p + "gate", E, H);
  m.top_k = top_k;
  m.renormalize = renormalize;
  m.experts.resize(static_cast<size_t>(E));
  const std::string x = p + "experts.";
  if (ts.has(x + "gate_up_proj") || ts.has(x + "gate_up_proj.weight")) {
    const std::string s = ts.has(x + "gate_up_proj") ? "" : ".weight";
    Linear gu = load_stacked(ts, x + "gate_up_proj" + s, E, 2 * I, H),
           dn = load_stacked(ts, x + "down_proj" + s, E, H, I);
    for (int64_t e = 0; e < E; e++) {
      Linear g = gu.select(e);
      m.experts[e] = {g.rows(0, I), g.rows(I, 2 * I), dn.select(e)};
    }
  } else if (ts.has(x + "gate_proj.weight")) {
    Linear g = load_stacked(ts, x + "gate_proj.weight", E, I, H),
           u = load_stacked(ts, x + "up_proj.weight", E, I, H),
           d = load_stacked(ts, x + "down_proj.weight", E, H, I);
    for (int64_t e = 0; e < E; e++) m.experts[e] = {g.select(e), u.select(e), d.select(e)};
  } else {
    for (int64_t e = 0; e < E; e++) m.experts[e] = load_mlp(ts, x + std::to_string(e) + ".", I, H);
  }
  return m;
}

Tensor softmax_moe(const SoftmaxMoe& m, Unary act, const Tensor& x) {
  const int64_t T = x.dim(0), H = x.dim(1);
  const int K = m.top_k, E = static_cast<int>(m.experts.size());
  Tensor top_w, top_i;
  ops::topk(ops::softmax(ops::matmul(x, m.router)), K, &top_w, &top_i);
  // The expert choice must reach the host to pick which weights to run: T x K weights and indices come back
  // (the only host read of the forward).
  std::vector<float> w = ops::to_vector(top_w);
  std::vector<int32_t> idx(static_cast<size_t>(T * K));
  {
    Tensor hi = ops::to_host(top_i);
    std::copy(hi.data<int32_t>(), hi.data<int32_t>() + T * K, idx.begin());
  }
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; t++) {
    float sum = 0;
    for (int j = 0; j < K; j++) sum += w[t * K + j];
    const float norm = m.renormalize ? 1.0f / sum : 1.0f;
    for (int j = 0; j < K; j++)
      by_expert.at(static_cast<size_t>(idx[t * K + j])).push_back({t, w[t * K + j] * norm});
  }
  Tensor out = ops::zeros({T, H}, x.device());
  for (int e = 0; e < E; e++) {
    const auto& rows = by_expert[e];
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    Tensor xe = x;
    if (n != T) {
      xe = ops::zeros({n, H}, x.device());
      for (int64_t j = 0; j < n; j++)
        ops::copy_into(x.slice(0, rows[j].first, rows[j].first + 1), xe.slice(0, j, j + 1));
    }
    Tensor y = gated_mlp(m.experts[e], act, xe);
    for (int64_t j = 0; j < n; j++)
      ops::add_inplace(out.slice(0, rows[j].first, rows[j].first + 1),
                       ops::scale(y.slice(0, j, j + 1), rows[j].second));
  }
  return out;
}

}  // namespace vatic::blocks
