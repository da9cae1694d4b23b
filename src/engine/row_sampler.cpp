#include "engine/row_sampler.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "ops/ops.h"
#include "util/error.h"

namespace vatic {

RowSampler::RowSampler(const Sampler& sampler, int64_t vocab, SamplingPath path, int candidates)
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

Distribution RowSampler::distribution(const Tensor& logits, int64_t row, const std::vector<int32_t>& extra,
                                      const uint64_t* allowed) {
  if (!uses_candidates(logits)) return full(logits, row, extra, allowed);
  const SamplerOptions& o = sampler_.options();
  const bool greedy = o.greedy();
  if (!greedy && o.top_k > kMaxTopK) return full(logits, row, extra, allowed);

  // The penalties and the mask change a copy: the raw row stays for logprobs and later rows.
  Tensor work = row_of(logits, row);
  std::vector<int32_t> ids, counts;
  sampler_.penalty_counts(extra, &ids, &counts);
  if (!ids.empty() || allowed) {
    Tensor copy = ops::empty_like(work, work.shape());
    ops::copy_into(work, copy);
    work = copy;
    if (!ids.empty())
      ops::penalize(work, ids, counts, o.repeat_penalty, o.presence_penalty, o.frequency_penalty);
    if (allowed) ops::mask_tokens(work, std::vector<uint64_t>(allowed, allowed + (vocab_ + 63) / 64));
  }
  // Without top_k, one token more than the candidates: the witness for the rest of the row.
  const bool need_norm = !greedy && o.top_k == 0 && candidates_ < vocab_;
  const int64_t K = greedy ? 1 : std::min<int64_t>(o.top_k > 0 ? o.top_k : candidates_ + 1, vocab_);
  Tensor values, indices;
  ops::topk(work, static_cast<int>(K), &values, &indices);
  Tensor norm = need_norm ? ops::logsumexp(work, 1.0f / o.temperature) : Tensor();
  const std::vector<float> v = ops::to_vector(values);
  const Tensor hi = ops::to_host(indices);
  const int32_t* id = hi.data<int32_t>();

  // -inf first: nothing can be drawn, or only tokens a mask allows at -inf; the full row says which (or why
  // not).
  if (!std::isfinite(v[0]) && (allowed || !greedy)) {
    counters_.fallbacks++;
    return full(logits, row, extra, allowed);
  }
  if (greedy) {
    counters_.candidate_rows++;
    return Distribution{{id[0]}, {1.0f}};
  }
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
  std::optional<Distribution> d = sampler_.distribution_from_candidates(cid, cl, log_norm);
  if (!d) {
    counters_.fallbacks++;
    return full(logits, row, extra, allowed);
  }
  counters_.candidate_rows++;
  return std::move(*d);
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
