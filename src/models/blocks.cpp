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

Tensor load_norm(const Weights& ts, const std::string& name, int64_t n, bool plus_one) {
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

AttentionWeights load_attention(const Weights& ts, const std::string& p, const AttentionShape& s,
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
  // The three projections in one op, then their biases.
  std::vector<Tensor> p = ops::matmul_many(x, {&w.q, &w.k, &w.v});
  if (w.q_bias.defined()) ops::add_inplace(p[0], w.q_bias);
  if (w.k_bias.defined()) ops::add_inplace(p[1], w.k_bias);
  if (w.v_bias.defined()) ops::add_inplace(p[2], w.v_bias);
  Tensor q = p[0].reshape({T, s.heads, s.head_dim});
  Tensor k = p[1].reshape({T, s.kv_heads, s.head_dim});
  Tensor v = p[2].reshape({T, s.kv_heads, s.head_dim});
  if (s.qk_norm) {
    std::vector<Tensor> n =
        ops::rms_norm_rope_many({{q, w.q_norm, true}, {k, w.k_norm, true}}, s.eps, positions, w.inv_freq, false);
    q = n[0];
    k = n[1];
  } else {
    ops::rope_inplace(q, positions, w.inv_freq, false);
    ops::rope_inplace(k, positions, w.inv_freq, false);
  }
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

Mlp load_mlp(const Weights& ts, const std::string& p, int64_t I, int64_t H) {
  return {load_linear(ts, p + "gate_proj", I, H), load_linear(ts, p + "up_proj", I, H),
          load_linear(ts, p + "down_proj", H, I)};
}

Tensor gated_mlp(const Mlp& m, Unary act, const Tensor& x) {
  return ops::matmul(ops::matmul_gated(x, m.gate, m.up, act), m.down);
}

void route_experts(const Tensor& logits, const MoeRouting& r, Tensor* weights, Tensor* experts) {
  RouteParams rp;
  rp.kind = r.gating;
  rp.k = r.top_k;
  rp.renormalize = r.renormalize;
  rp.scale = r.scale;
  rp.bias = r.score_bias.defined() ? &r.score_bias : nullptr;
  rp.expert_scale = r.expert_scale.defined() ? &r.expert_scale : nullptr;
  rp.groups = r.groups;
  rp.groups_kept = r.groups_kept;
  ops::route(logits, rp, weights, experts);
}

void expect_routed_moe(const std::string& p, int64_t E, int64_t I, int64_t H, RouteParams::Kind gating,
                       const std::function<bool(const std::string&)>& has, std::vector<ExpectedTensor>& e) {
  e.push_back({p + "gate.weight", {E, H}});
  if (gating == RouteParams::Sigmoid) e.push_back({p + "gate.e_score_correction_bias", {E}});
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

RoutedMoe load_routed_moe(const Weights& ts, const std::string& p, int64_t E, int64_t I, int64_t H,
                          MoeRouting routing) {
  RoutedMoe m;
  m.router = load_linear(ts, p + "gate", E, H);
  m.routing = std::move(routing);
  if (m.routing.gating == RouteParams::Sigmoid)
    m.routing.score_bias = load_f32(ts, p + "gate.e_score_correction_bias", {E});
  const std::string x = p + "experts.";
  if (ts.has(x + "gate_up_proj") || ts.has(x + "gate_up_proj.weight")) {
    const std::string s = ts.has(x + "gate_up_proj") ? "" : ".weight";
    Linear gu = load_stacked(ts, x + "gate_up_proj" + s, E, 2 * I, H);
    m.gate = gu.rows(0, I);
    m.up = gu.rows(I, 2 * I);
    m.down = load_stacked(ts, x + "down_proj" + s, E, H, I);
  } else if (ts.has(x + "gate_proj.weight")) {
    m.gate = load_stacked(ts, x + "gate_proj.weight", E, I, H);
    m.up = load_stacked(ts, x + "up_proj.weight", E, I, H);
    m.down = load_stacked(ts, x + "down_proj.weight", E, H, I);
  } else {
    auto name = [&x](const char* proj) {
      return [&x, proj](int64_t e) { return x + std::to_string(e) + "." + proj; };
    };
    m.gate = load_experts(ts, name("gate_proj"), E, I, H);
    m.up = load_experts(ts, name("up_proj"), E, I, H);
    m.down = load_experts(ts, name("down_proj"), E, H, I);
  }
  return m;
}

RoutedRows routed_moe_rows(const RoutedMoe& m, Unary act, const Tensor& x) {
  // Routing stays on the device: the router's logits, the k experts of each row, each row through them.
  Tensor weights, experts;
  route_experts(ops::matmul(x, m.router), m.routing, &weights, &experts);
  return {ops::matmul_experts(ops::matmul_experts_gated(x, m.gate, m.up, experts, act), m.down, experts), weights};
}

Tensor routed_moe(const RoutedMoe& m, Unary act, const Tensor& x) {
  RoutedRows r = routed_moe_rows(m, act, x);
  return ops::combine_rows(r.rows, r.weights);
}

}  // namespace vatic::blocks
