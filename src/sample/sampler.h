#pragma once
// logits -> token. Order of operations (as ollama's sampler): penalties over the recent history, then greedy
// (temperature 0) or top-k -> softmax(logits / temperature) -> top-p -> min-p -> renormalise -> draw.
// Seeded runs draw from SplitMix64(seed, counter): the same seed gives the same output on any machine.
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "util/json.h"

namespace vatic {

struct SamplerOptions {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;    // -1 = whole context
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int64_t seed = -1;         // < 0 = unseeded
  int top_logprobs = 0;      // 0..20
  bool logprobs = false;

  // Throws InvalidInput with a message naming the option for out-of-range values.
  void validate() const;
  bool greedy() const { return temperature <= 0.0f; }
  bool has_penalties() const {
    return repeat_last_n != 0 && (repeat_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f);
  }
};

// A sparse probability distribution over token ids (ids with probability 0 are absent).
struct Distribution {
  std::vector<int32_t> ids;
  std::vector<float> probs;
  float prob_of(int32_t id) const;
};

struct TokenLogprob {
  int32_t id;
  float logprob;
};

class Sampler {
 public:
  Sampler(SamplerOptions options, int64_t vocab_size, int64_t context_length = 0);

  const SamplerOptions& options() const { return opt_; }
  // Penalty history: the prompt first, then every committed token.
  void set_history(const std::vector<int32_t>& tokens);
  void commit(int32_t token);

  // The distribution the next token is drawn from, given raw logits [V] and tokens that would precede it
  // beyond the committed history (a draft chain). `allowed` (ceil(V / 64) words of bits, e.g. a grammar's token
  // mask) restricts it to those tokens: the distribution is renormalised over them, greedy picks the best of them.
  Distribution distribution(const float* logits, const std::vector<int32_t>& extra = {},
                            const uint64_t* allowed = nullptr) const;
  // The same distribution from candidates instead of the whole row, for logits that live on a device.
  // `ids` / `logits`: the row's best tokens after the penalties and the mask, sorted by logit descending (ties:
  // lower id first), -inf ones left out. With top_k > 0 they must be the top_k best (or every finite token), and
  // log_norm is ignored. With top_k = 0 they are every finite token (log_norm NaN), or the best K + 1 with
  // `log_norm` = log Σ_i exp(l_i / T) over the whole row: the K + 1-th is a witness for the rest of the row, and the
  // result is returned only when it provably leaves the witness out (the nucleus closes within the first K, or
  // min_p cuts the witness); otherwise nullopt, and the caller must use the whole row. Not for greedy options.
  std::optional<Distribution> distribution_from_candidates(const std::vector<int32_t>& ids,
                                                           const std::vector<float>& logits, double log_norm) const;
  // The penalty history for one distribution: each distinct recent token (history then `extra`) and its count.
  void penalty_counts(const std::vector<int32_t>& extra, std::vector<int32_t>* ids, std::vector<int32_t>* counts) const;
  int32_t sample(const Distribution& d);
  // Draws in [0, 1) from the sampler's stream.
  double uniform();

  // log-softmax of the raw logits for `id`, and the `n` most likely alternatives.
  static TokenLogprob logprob(const float* logits, int64_t V, int32_t id);
  static std::vector<TokenLogprob> top_logprobs(const float* logits, int64_t V, int n);

 private:
  void penalize(std::vector<float>& logits, const std::vector<int32_t>& extra) const;
  // softmax(l / T) over the candidates (sorted by logit when nucleus sampling), then top-p, min-p, renormalise.
  // log_norm: NaN = normalise over the candidates; else the whole row's log Σ exp(l / T), and the candidates are its
  // best tokens (nullopt when they cannot prove the result).
  std::optional<Distribution> finish(std::vector<int32_t> ids, const float* l, bool indexed_by_id,
                                     double log_norm) const;

  SamplerOptions opt_;
  int64_t vocab_;
  int64_t window_;
  std::deque<int32_t> history_;
  uint64_t seed_state_;
  uint64_t counter_ = 0;
};

int32_t argmax(const float* logits, int64_t n);

// Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): accept draft d with probability
// min(1, p(d)/q(d)); on rejection draw from normalize(max(0, p - q)).
bool accept_draft(const Distribution& p, const Distribution& q, int32_t draft, double u);
// The same rule on the two probabilities of the draft: p(d) under the target, q(d) under the drafter.
bool accept_draft(double pd, double qd, double u);
Distribution residual(const Distribution& p, const Distribution& q);

}  // namespace vatic
