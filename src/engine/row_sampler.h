#pragma once
// Tokens from logits rows wherever the rows live. On the host the sampler reads the whole row. For rows on a
// device (or when forced) only candidates cross to the host: the penalties and a grammar's mask are applied
// to a copy of the row on the device, and its best K tokens (K = top_k, or a cap without top_k) come back
// with the row's softmax normaliser; Sampler::distribution_from_candidates builds the full-row distribution
// from them. Logprobs come from the device too (the row's log-sum-exp, the chosen token's logit, a top-k of
// the raw row).
//
// When the candidates cannot prove the result, the row is read whole instead (a fallback): without top_k,
// when the full-row distribution holds more tokens than the candidates (neither the nucleus nor min_p ends
// within them; one more token, the witness, proves that they do), e.g. pure temperature sampling over the
// whole vocabulary; top_k above kMaxTopK; and rows where nothing finite can be drawn (a grammar mask that
// leaves only -inf logits).
#include <cstdint>
#include <vector>

#include "sample/sampler.h"
#include "tensor/tensor.h"

namespace vatic {

enum class SamplingPath {
  Auto,        // candidates for rows that live off the host, the whole row on the host
  Candidates,  // candidates wherever the rows live (tests prove the path on the CPU)
  FullRow,     // always the whole row
};

class RowSampler {
 public:
  static constexpr int kDefaultCandidates = 256;
  static constexpr int kMaxTopK = 1024;

  // `candidates`: how many tokens come back when top_k is 0 (0 = kDefaultCandidates).
  RowSampler(const Sampler& sampler, int64_t vocab, SamplingPath path, int candidates = 0);

  // Whether rows of `logits` go through candidates.
  bool uses_candidates(const Tensor& logits) const;
  // The distribution of row `row` of logits [T, V] (or [V]) exactly as Sampler::distribution defines it.
  Distribution distribution(const Tensor& logits, int64_t row, const std::vector<int32_t>& extra = {},
                            const uint64_t* allowed = nullptr);
  // log-softmax of the raw row for `id`, and when top_n > 0 the top_n most likely tokens.
  void logprobs(const Tensor& logits, int64_t row, int32_t id, int top_n, TokenLogprob* chosen,
                std::vector<TokenLogprob>* top);

  struct Counters {
    int64_t candidate_rows = 0;  // distributions built from candidates
    int64_t full_rows = 0;       // rows read whole (the host path, and fallbacks)
    int64_t fallbacks = 0;       // rows whose candidates could not prove the result
  };
  const Counters& counters() const { return counters_; }

 private:
  Tensor row_of(const Tensor& logits, int64_t row) const;
  const float* host_row(const Tensor& logits, int64_t row, std::vector<float>& buf) const;
  Distribution full(const Tensor& logits, int64_t row, const std::vector<int32_t>& extra,
                    const uint64_t* allowed);

  const Sampler& sampler_;
  int64_t vocab_;
  SamplingPath path_;
  int candidates_;
  Counters counters_;
};

}  // namespace vatic
