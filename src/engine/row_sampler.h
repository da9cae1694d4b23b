#pragma once
// Tokens from logits rows wherever the rows live. On the host the sampler reads the whole row. For rows on a
// device (or when forced) only candidates cross to the host: the penalties and a grammar's mask are applied
// to a copy of the row on the device, and its best K tokens (K = top_k, or a cap without top_k) come back
// with the row's softmax normaliser; Sampler::distribution_from_candidates builds the full-row distribution
// from them. Logprobs come from the device too (the row's log-sum-exp, the chosen token's logit, a top-k of
// the raw row).
//
// Without top_k, when the full-row distribution holds more tokens than the candidates (neither the nucleus nor
// min_p ends within them; one more token, the witness, proves that they do), the candidates are taken again
// at the cap (kMaxTopK) before the row is read whole (a fallback). Sampling by temperature alone (no top_k,
// top_p or min_p) draws from the whole vocabulary and needs no candidates: its distribution stays implicit on
// the device (RowDistribution), the host reads the probability mass of each block of ids, walks the blocks
// with the draw's uniform number as Sampler::sample walks a distribution in id order, and reads the one block
// the draw lands in. (The masses are f32 sums, so a draw may differ from the host sampler's where the uniform
// number lies within ~1e-6 of a boundary: the same distribution, up to rounding.) Speculative acceptance reads
// the two probabilities it compares; the draw after a rejected draft (from the residual max(0, p - q)) reads the
// residual's mass per block from the device and then the two blocks the draw lands in. The fallbacks that read
// a row whole: top_k above kMaxTopK, a nucleus or min_p set wider than kMaxTopK - 1 tokens, and rows where
// nothing finite can be drawn (a grammar mask that leaves only -inf logits).
#include <cstdint>
#include <optional>
#include <vector>

#include "sample/sampler.h"
#include "tensor/tensor.h"

namespace vatic {

enum class SamplingPath {
  Auto,        // candidates for rows that live off the host, the whole row on the host
  Candidates,  // candidates wherever the rows live (tests prove the path on the CPU)
  FullRow,     // always the whole row
};

// What a token is drawn from: a Distribution on the host, or (sampling by temperature alone from a row off the
// host) the implicit softmax(row / T) of the row after the penalties and the mask, left where the row lives.
struct RowDistribution {
  Distribution dist;  // explicit
  // Implicit: the row [V] (F32, penalties and mask applied; a copy the model cannot overwrite), its log Σ exp(l / T)
  // and the probability mass of each block of kBlock ids.
  Tensor row;
  double log_norm = 0;
  std::vector<double> block_mass;
  bool implicit() const { return row.defined(); }
};

class RowSampler {
 public:
  static constexpr int kDefaultCandidates = 256;
  static constexpr int kMaxTopK = 1024;
  static constexpr int64_t kBlock = 1024;  // ids per block of an implicit distribution

  // `candidates`: how many tokens come back when top_k is 0 (0 = kDefaultCandidates). Draws use the sampler's
  // stream.
  RowSampler(Sampler& sampler, int64_t vocab, SamplingPath path, int candidates = 0);

  // Whether rows of `logits` go through candidates.
  bool uses_candidates(const Tensor& logits) const;
  // The distribution of row `row` of logits [T, V] (or [V]) exactly as Sampler::distribution defines it.
  Distribution distribution(const Tensor& logits, int64_t row, const std::vector<int32_t>& extra = {},
                            const uint64_t* allowed = nullptr);
  // What generation draws from: implicit for sampling by temperature alone from rows that go through
  // candidates, else distribution().
  RowDistribution row_distribution(const Tensor& logits, int64_t row, const std::vector<int32_t>& extra = {},
                                   const uint64_t* allowed = nullptr);
  // One draw from the sampler's stream: the token Sampler::sample would draw from the explicit distribution.
  int32_t sample(const RowDistribution& d);
  double prob_of(const RowDistribution& d, int32_t id);
  // accept_draft() and a draw from residual() for either kind of distribution.
  bool accept(const RowDistribution& p, const RowDistribution& q, int32_t draft, double u);
  int32_t sample_residual(const RowDistribution& p, const RowDistribution& q);

  // log-softmax of the raw row for `id`, and when top_n > 0 the top_n most likely tokens.
  void logprobs(const Tensor& logits, int64_t row, int32_t id, int top_n, TokenLogprob* chosen,
                std::vector<TokenLogprob>* top);

  struct Counters {
    int64_t candidate_rows = 0;  // distributions built from candidates
    int64_t implicit_rows = 0;   // distributions left implicit on the device
    int64_t full_rows = 0;       // rows read whole (the host path, fallbacks, residuals of mixed distributions)
    int64_t fallbacks = 0;       // rows whose candidates could not prove the result
    int64_t wide_retries = 0;    // candidates taken again at kMaxTopK because the first ones could not prove it
  };
  const Counters& counters() const { return counters_; }

 private:
  Tensor row_of(const Tensor& logits, int64_t row) const;
  const float* host_row(const Tensor& logits, int64_t row, std::vector<float>& buf) const;
  Distribution full(const Tensor& logits, int64_t row, const std::vector<int32_t>& extra,
                    const uint64_t* allowed);
  // The row after the penalties and the mask: a copy when either applies (the raw row stays for logprobs and
  // later rows), or when `always_copy`.
  Tensor penalized(const Tensor& logits, int64_t row, const std::vector<int32_t>& extra, const uint64_t* allowed,
                   bool always_copy) const;
  // Candidates of the penalized row `work`: K best (with the witness when `need_norm`); nullopt when they cannot
  // prove the result. *nothing_finite: the best one is -inf.
  std::optional<Distribution> from_candidates(const Tensor& work, int64_t K, bool need_norm, bool* nothing_finite);
  std::vector<float> block_of(const RowDistribution& d, int64_t b) const;
  Distribution materialize(const RowDistribution& d);

  Sampler& sampler_;
  int64_t vocab_;
  SamplingPath path_;
  int candidates_;
  Counters counters_;
};

}  // namespace vatic
