#include "engine/row_sampler.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "ops/ops.h"
#include "util/error.h"

namespace vatic {

RowSampler::RowSampler(Sampler& sampler, int64_t vocab, SamplingPath path, int candidates)
    : sampler_(sampler),
      vocab_(vocab),
      path_(path),
      candidates_(candidates > 0 ? candidates : kDefaultCandidates) {}

bool RowSampler::uses_candidates(const Tensor& logits) const {
  switch (path_) {
    case SamplingPath::Candidates:
      return true;
    case SamplingPath::FullRow:
      return false;
    case SamplingPath::Auto:
      break;
  }
  return !logits.device().is_cpu();
}

Tensor RowSampler::row_of(const Tensor& logits, int64_t row) const {
  VATIC_CHECK(logits.dim(-1) == vocab_, "logits {} for a vocabulary of {}", logits.describe(), vocab_);
  const Tensor c = ops::contiguous(logits);
  Tensor r = c.reshape({c.numel() / vocab_, vocab_});
  return ops::to_f32(r.slice(0, row, row + 1));
}

const float* RowSampler::host_row(const Tensor& logits, int64_t row, std::vector<float>& buf) const {
  if (logits.device().is_cpu() && logits.dtype() == DType::F32 && logits.is_contiguous())
    return logits.data<float>() + row * vocab_;
  buf = ops::to_vector(row_of(logits, row));
  return buf.data();
}

Distribution RowSampler::full(const Tensor& logits, int64_t row, const std::vector<int32_t>& extra,
                              const uint64_t* allowed) {
  counters_.full_rows++;
  std::vector<float> buf;
  return sampler_.distribution(host_row(logits, row, buf), extra, allowed);
}

Tensor RowSampler::penalized(const Tensor& logits, int64_t row, const std::vector<int32_t>& extra,
                             const uint64_t* allowed, bool always_copy) const {
  const SamplerOptions& o = sampler_.options();
  Tensor work = row_of(logits, row);
  std::vector<int32_t> ids, counts;
  sampler_.penalty_counts(extra, &ids, &counts);
  if (!ids.empty() || allowed || always_copy) {
    Tensor copy = ops::empty_like(work, work.shape());
    ops::copy_into(work, copy);
    work = copy;
    if (!ids.empty())
      ops::penalize(work, ids, counts, o.repeat_penalty, o.presence_penalty, o.frequency_penalty);
    if (allowed) ops::mask_tokens(work, std::vector<uint64_t>(allowed, allowed + (vocab_ + 63) / 64));
  }
  return work;
}

std::optional<Distribution> RowSampler::from_candidates(const Tensor& work, int64_t K, bool need_norm,
                                                        bool* nothing_finite) {
  const SamplerOptions& o = sampler_.options();
  const bool greedy = o.greedy();
  Tensor values, indices;
  ops::topk(work, static_cast<int>(K), &values, &indices);
  Tensor norm = need_norm ? ops::logsumexp(work, 1.0f / o.temperature) : Tensor();
  const std::vector<float> v = ops::to_vector(values);
  const Tensor hi = ops::to_host(indices);
  const int32_t* id = hi.data<int32_t>();
  *nothing_finite = !std::isfinite(v[0]);
  if (greedy) return Distribution{{id[0]}, {1.0f}};
  if (*nothing_finite) return std::nullopt;
  std::vector<int32_t> cid;
  std::vector<float> cl;
  for (int64_t i = 0; i < K && std::isfinite(v[i]); i++) {
    cid.push_back(id[i]);
    cl.push_back(v[i]);
  }
  // Fewer finite tokens than K (or the whole row): the candidates are every token that can be drawn.
  const bool complete = static_cast<int64_t>(cid.size()) < K || K == vocab_;
  const double log_norm = need_norm && !complete ? static_cast<double>(ops::to_vector(norm)[0])
                                                 : std::numeric_limits<double>::quiet_NaN();
  return sampler_.distribution_from_candidates(cid, cl, log_norm);
}

Distribution RowSampler::distribution(const Tensor& logits, int64_t row, const std::vector<int32_t>& extra,
                                      const uint64_t* allowed) {
  if (!uses_candidates(logits)) return full(logits, row, extra, allowed);
  const SamplerOptions& o = sampler_.options();
  const bool greedy = o.greedy();
  if (!greedy && o.top_k > kMaxTopK) return full(logits, row, extra, allowed);

  const Tensor work = penalized(logits, row, extra, allowed, false);
  // Without top_k, one token more than the candidates: the witness for the rest of the row.
  const bool need_norm = !greedy && o.top_k == 0 && candidates_ < vocab_;
  const int64_t K = greedy ? 1 : std::min<int64_t>(o.top_k > 0 ? o.top_k : candidates_ + 1, vocab_);
  bool nothing_finite = false;
  std::optional<Distribution> d = from_candidates(work, K, need_norm, &nothing_finite);
  // Unproved by the default candidates: once more at the cap, which still costs far less than the row.
  if (!d && !nothing_finite && need_norm && K < std::min<int64_t>(kMaxTopK, vocab_)) {
    counters_.wide_retries++;
    const int64_t wide = std::min<int64_t>(kMaxTopK, vocab_);
    d = from_candidates(work, wide, wide < vocab_, &nothing_finite);
  }
  // -inf first: nothing can be drawn, or only tokens a mask allows at -inf; the full row says which (or why
  // not).
  if (!d || (nothing_finite && allowed)) {
    counters_.fallbacks++;
    return full(logits, row, extra, allowed);
  }
  counters_.candidate_rows++;
  return std::move(*d);
}

RowDistribution RowSampler::row_distribution(const Tensor& logits, int64_t row, const std::vector<int32_t>& extra,
                                             const uint64_t* allowed) {
  const SamplerOptions& o = sampler_.options();
  const bool nucleus = o.top_p > 0 && o.top_p < 1;
  const bool temperature_only = !o.greedy() && o.top_k == 0 && !nucleus && !(o.min_p > 0);
  RowDistribution d;
  if (!temperature_only || !uses_candidates(logits) || candidates_ >= vocab_) {
    d.dist = distribution(logits, row, extra, allowed);
    return d;
  }
  const Tensor work = penalized(logits, row, extra, allowed, true).reshape({vocab_});
  // log Σ exp(l / T) of each block of ids; the tail block (vocab not a multiple of kBlock) separately.
  const int64_t nb = vocab_ / kBlock, tail = vocab_ - nb * kBlock;
  const float inv_t = 1.0f / o.temperature;
  std::vector<float> lse;
  if (nb > 0) lse = ops::to_vector(ops::logsumexp(work.slice(0, 0, nb * kBlock).reshape({nb, kBlock}), inv_t));
  if (tail > 0) lse.push_back(ops::to_vector(ops::logsumexp(work.slice(0, nb * kBlock, vocab_).reshape({1, tail}),
                                                            inv_t))[0]);
  double mx = -std::numeric_limits<double>::infinity();
  for (float x : lse) mx = std::max(mx, static_cast<double>(x));
  if (!std::isfinite(mx)) {  // nothing finite to draw: the full row says which (or why not)
    counters_.fallbacks++;
    d.dist = full(logits, row, extra, allowed);
    return d;
  }
  double sum = 0;
  for (float x : lse) sum += std::exp(static_cast<double>(x) - mx);
  d.row = work;
  d.log_norm = mx + std::log(sum);
  d.block_mass.reserve(lse.size());
  for (float x : lse) d.block_mass.push_back(std::exp(static_cast<double>(x) - d.log_norm));
  counters_.implicit_rows++;
  return d;
}

std::vector<float> RowSampler::block_of(const RowDistribution& d, int64_t b) const {
  return ops::to_vector(d.row.slice(0, b * kBlock, std::min(vocab_, (b + 1) * kBlock)));
}

int32_t RowSampler::sample(const RowDistribution& d) {
  if (!d.implicit()) return sampler_.sample(d.dist);
  // Sampler::sample's walk in id order, a block at a time: whole blocks by their mass, then the ids of the
  // block the draw lands in.
  const double inv_t = 1.0 / sampler_.options().temperature;
  const double u = sampler_.uniform();
  double cum = 0;
  const int64_t nb = static_cast<int64_t>(d.block_mass.size());
  int64_t last = -1;  // the last block that holds a token that can be drawn
  for (int64_t b = 0; b < nb; b++) {
    if (d.block_mass[b] <= 0) continue;
    last = b;
    if (u >= cum + d.block_mass[b]) {
      cum += d.block_mass[b];
      continue;
    }
    // The draw lands here by the blocks' masses; the ids' own sum decides (rounding may carry it on).
    const std::vector<float> l = block_of(d, b);
    for (size_t i = 0; i < l.size(); i++) {
      if (!std::isfinite(l[i])) continue;
      cum += std::exp(static_cast<double>(l[i]) * inv_t - d.log_norm);
      if (u < cum) return static_cast<int32_t>(b * kBlock + static_cast<int64_t>(i));
    }
  }
  // Rounding left u above the total: the last id that can be drawn, as Sampler::sample returns the last one.
  VATIC_CHECK(last >= 0, "sampling from an implicit distribution with no mass");
  const std::vector<float> l = block_of(d, last);
  for (size_t i = l.size(); i-- > 0;)
    if (std::isfinite(l[i])) return static_cast<int32_t>(last * kBlock + static_cast<int64_t>(i));
  return static_cast<int32_t>(last * kBlock);
}

double RowSampler::prob_of(const RowDistribution& d, int32_t id) {
  if (!d.implicit()) return d.dist.prob_of(id);
  VATIC_CHECK(id >= 0 && id < vocab_, "token {} outside a vocabulary of {}", id, vocab_);
  const float l = ops::to_vector(d.row.slice(0, id, id + 1))[0];
  return std::isfinite(l) ? std::exp(static_cast<double>(l) / sampler_.options().temperature - d.log_norm) : 0.0;
}

bool RowSampler::accept(const RowDistribution& p, const RowDistribution& q, int32_t draft, double u) {
  // The probabilities as an explicit distribution stores them (floats).
  return accept_draft(static_cast<float>(prob_of(p, draft)), static_cast<float>(prob_of(q, draft)), u);
}

Distribution RowSampler::materialize(const RowDistribution& d) {
  if (!d.implicit()) return d.dist;
  counters_.full_rows++;
  const std::vector<float> l = ops::to_vector(d.row);
  const double inv_t = 1.0 / sampler_.options().temperature;
  Distribution r;
  for (int64_t i = 0; i < vocab_; i++) {
    if (!std::isfinite(l[i])) continue;
    r.ids.push_back(static_cast<int32_t>(i));
    r.probs.push_back(static_cast<float>(std::exp(static_cast<double>(l[i]) * inv_t - d.log_norm)));
  }
  return r;
}

int32_t RowSampler::sample_residual(const RowDistribution& p, const RowDistribution& q) {
  if (!p.implicit() || !q.implicit()) return sampler_.sample(residual(materialize(p), materialize(q)));
  // Both implicit: the residual's mass per block comes from the device, the draw walks the blocks in id order as
  // Sampler::sample walks residual(p, q), and reads the two blocks (of p and q) it lands in.
  const float inv_t = 1.0f / sampler_.options().temperature;
  const int64_t nb = vocab_ / kBlock, tail = vocab_ - nb * kBlock;
  const float pl = static_cast<float>(p.log_norm), ql = static_cast<float>(q.log_norm);
  std::vector<float> mass;
  if (nb > 0)
    mass = ops::to_vector(ops::residual_mass(p.row.slice(0, 0, nb * kBlock).reshape({nb, kBlock}),
                                             q.row.slice(0, 0, nb * kBlock).reshape({nb, kBlock}), inv_t, pl, inv_t,
                                             ql));
  if (tail > 0)
    mass.push_back(ops::to_vector(ops::residual_mass(p.row.slice(0, nb * kBlock, vocab_).reshape({1, tail}),
                                                     q.row.slice(0, nb * kBlock, vocab_).reshape({1, tail}), inv_t,
                                                     pl, inv_t, ql))[0]);
  double total = 0;
  for (float m : mass) total += m;
  if (!(total > 0)) return sample(p);  // p == q: no rejection was possible; residual() keeps p
  // The residual of one id exactly as residual() computes it from the two explicit distributions' floats.
  const double inv_td = 1.0 / sampler_.options().temperature;
  auto prob = [inv_td](float l, double log_norm) {
    return std::isfinite(l) ? static_cast<float>(std::exp(static_cast<double>(l) * inv_td - log_norm)) : 0.0f;
  };
  const double u = sampler_.uniform();
  double cum = 0;
  int64_t last = -1;  // the last block with residual mass
  for (int64_t b = 0; b < static_cast<int64_t>(mass.size()); b++) {
    if (mass[b] <= 0) continue;
    last = b;
    const double m = mass[b] / total;
    if (u >= cum + m) {
      cum += m;
      continue;
    }
    const std::vector<float> lp = block_of(p, b), lq = block_of(q, b);
    for (size_t i = 0; i < lp.size(); i++) {
      const double v = std::max(0.0, static_cast<double>(prob(lp[i], p.log_norm)) - prob(lq[i], q.log_norm));
      if (v <= 0) continue;
      cum += v / total;
      if (u < cum) return static_cast<int32_t>(b * kBlock + static_cast<int64_t>(i));
    }
  }
  // Rounding left u above the total: the last id with residual mass, as Sampler::sample returns the last one.
  const std::vector<float> lp = block_of(p, last), lq = block_of(q, last);
  for (size_t i = lp.size(); i-- > 0;)
    if (static_cast<double>(prob(lp[i], p.log_norm)) - prob(lq[i], q.log_norm) > 0)
      return static_cast<int32_t>(last * kBlock + static_cast<int64_t>(i));
  return static_cast<int32_t>(last * kBlock);
}

void RowSampler::logprobs(const Tensor& logits, int64_t row, int32_t id, int top_n, TokenLogprob* chosen,
                          std::vector<TokenLogprob>* top) {
  top->clear();
  if (!uses_candidates(logits)) {
    std::vector<float> buf;
    const float* r = host_row(logits, row, buf);
    *chosen = Sampler::logprob(r, vocab_, id);
    if (top_n > 0) *top = Sampler::top_logprobs(r, vocab_, top_n);
    return;
  }
  Tensor raw = row_of(logits, row);
  const Tensor lse = ops::logsumexp(raw, 1.0f);
  const Tensor value = ops::gather_rows(raw.reshape({vocab_, 1}), ops::ids({id}, raw.device()));
  Tensor tv, ti;
  const int n = static_cast<int>(std::min<int64_t>(top_n, vocab_));
  if (n > 0) ops::topk(raw, n, &tv, &ti);
  const double norm = ops::to_vector(lse)[0];
  *chosen = {id, static_cast<float>(ops::to_vector(value)[0] - norm)};
  if (n > 0) {
    const std::vector<float> v = ops::to_vector(tv);
    const Tensor hi = ops::to_host(ti);
    for (int i = 0; i < n; i++) top->push_back({hi.data<int32_t>()[i], static_cast<float>(v[i] - norm)});
  }
}

}  // namespace vatic
