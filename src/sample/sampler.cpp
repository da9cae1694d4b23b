#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <unordered_map>

#include "util/error.h"

namespace vatic {

void SamplerOptions::validate() const {
  auto bad = [](const std::string& m) { throw InvalidInput(m); };
  if (!std::isfinite(temperature) || temperature < 0) bad(fmt::format("invalid temperature {}: must be >= 0", temperature));
  if (top_k < 0) bad(fmt::format("invalid top_k {}: must be >= 0", top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) bad(fmt::format("invalid top_p {}: must be in (0, 1]", top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) bad(fmt::format("invalid min_p {}: must be in [0, 1]", min_p));
  if (!std::isfinite(repeat_penalty) || repeat_penalty < 0)
    bad(fmt::format("invalid repeat_penalty {}: must be >= 0", repeat_penalty));
  if (repeat_last_n < -1) bad(fmt::format("invalid repeat_last_n {}: must be >= -1", repeat_last_n));
  if (!std::isfinite(presence_penalty)) bad("invalid presence_penalty");
  if (!std::isfinite(frequency_penalty)) bad("invalid frequency_penalty");
  if (top_logprobs < 0 || top_logprobs > 20) bad(fmt::format("invalid top_logprobs {}: must be in [0, 20]", top_logprobs));
}

float Distribution::prob_of(int32_t id) const {
  for (size_t i = 0; i < ids.size(); i++)
    if (ids[i] == id) return probs[i];
  return 0.0f;
}

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Sampler::Sampler(SamplerOptions options, int64_t vocab_size, int64_t context_length)
    : opt_(options), vocab_(vocab_size) {
  opt_.validate();
  if (opt_.repeat_penalty <= 0) opt_.repeat_penalty = 1.0f;
  window_ = opt_.repeat_last_n < 0 ? (context_length > 0 ? context_length : INT32_MAX) : opt_.repeat_last_n;
  seed_state_ = opt_.seed >= 0 ? static_cast<uint64_t>(opt_.seed) : std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
}

void Sampler::set_history(const std::vector<int32_t>& tokens) {
  history_.clear();
  for (auto t : tokens) commit(t);
}

void Sampler::commit(int32_t token) {
  if (window_ <= 0) return;
  history_.push_back(token);
  while (static_cast<int64_t>(history_.size()) > window_) history_.pop_front();
}

double Sampler::uniform() {
  uint64_t r = splitmix64(seed_state_ ^ splitmix64(counter_++));
  return static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0);
}

void Sampler::penalty_counts(const std::vector<int32_t>& extra, std::vector<int32_t>* ids,
                             std::vector<int32_t>* counts) const {
  ids->clear();
  counts->clear();
  if (!opt_.has_penalties()) return;
  std::unordered_map<int32_t, int> index;
  // The last `window_` tokens of history + extra.
  std::vector<int32_t> recent(history_.begin(), history_.end());
  recent.insert(recent.end(), extra.begin(), extra.end());
  size_t start = recent.size() > static_cast<size_t>(window_) ? recent.size() - window_ : 0;
  for (size_t i = start; i < recent.size(); i++) {
    auto [it, fresh] = index.emplace(recent[i], static_cast<int>(ids->size()));
    if (fresh) {
      ids->push_back(recent[i]);
      counts->push_back(0);
    }
    (*counts)[it->second]++;
  }
}

void Sampler::penalize(std::vector<float>& logits, const std::vector<int32_t>& extra) const {
  if (!opt_.has_penalties()) return;
  std::vector<int32_t> ids, counts;
  penalty_counts(extra, &ids, &counts);
  for (size_t j = 0; j < ids.size(); j++) {
    const int32_t tok = ids[j];
    if (tok < 0 || tok >= vocab_) continue;
    float& l = logits[tok];
    if (opt_.repeat_penalty != 1.0f) l = l < 0 ? l * opt_.repeat_penalty : l / opt_.repeat_penalty;
    l -= opt_.presence_penalty;
    l -= opt_.frequency_penalty * static_cast<float>(counts[j]);
  }
}

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; i++)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

Distribution Sampler::distribution(const float* raw, const std::vector<int32_t>& extra, const uint64_t* allowed) const {
  std::vector<float> l(raw, raw + vocab_);
  penalize(l, extra);
  Distribution d;
  if (allowed) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    int64_t best = -1;
    for (int64_t w = 0; w * 64 < vocab_; w++) {
      const uint64_t bits = allowed[w];
      const int64_t base = w * 64, n = std::min<int64_t>(64, vocab_ - base);
      if (bits == ~uint64_t(0) && n == 64) {
        for (int64_t i = base; i < base + 64; i++)
          if (best < 0 || l[i] > l[best]) best = i;
        continue;
      }
      for (int64_t j = 0; j < n; j++) {
        if ((bits >> j) & 1) {
          if (best < 0 || l[base + j] > l[best]) best = base + j;
        } else {
          l[base + j] = kNegInf;
        }
      }
    }
    VATIC_CHECK(best >= 0, "the token mask allows no token");
    if (opt_.greedy()) {
      d.ids = {static_cast<int32_t>(best)};
      d.probs = {1.0f};
      return d;
    }
    // Every allowed token at -inf (e.g. outside a drafter's centroid set): the best allowed one stays drawable.
    if (!std::isfinite(l[best])) {
      d.ids = {static_cast<int32_t>(best)};
      d.probs = {1.0f};
      return d;
    }
  }
  if (opt_.greedy()) {
    d.ids = {argmax(l.data(), vocab_)};
    d.probs = {1.0f};
    return d;
  }
  // Candidates: the top-k (or every token that can be drawn).
  auto by_logit = [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(vocab_));
  for (int32_t i = 0; i < vocab_; i++)
    if (std::isfinite(l[i])) ids.push_back(i);  // -inf: masked (e.g. outside a drafter's centroid set)
  VATIC_CHECK(!ids.empty(), "sampling from logits that are all -inf");
  if (opt_.top_k > 0 && opt_.top_k < static_cast<int64_t>(ids.size())) {
    std::nth_element(ids.begin(), ids.begin() + opt_.top_k - 1, ids.end(), by_logit);
    ids.resize(opt_.top_k);
  }
  return *finish(std::move(ids), l.data(), true, std::numeric_limits<double>::quiet_NaN());
}

std::optional<Distribution> Sampler::distribution_from_candidates(const std::vector<int32_t>& ids,
                                                                  const std::vector<float>& logits,
                                                                  double log_norm) const {
  VATIC_CHECK(!opt_.greedy() && ids.size() == logits.size(), "sampling candidates: {} ids, {} logits", ids.size(),
              logits.size());
  if (ids.empty()) return std::nullopt;
  std::vector<int32_t> pos(ids.size());
  std::iota(pos.begin(), pos.end(), 0);
  // finish() reads logits by position here; the ids are mapped back at the end.
  std::optional<Distribution> d =
      finish(std::move(pos), logits.data(), false, opt_.top_k > 0 ? std::nan("") : log_norm);
  if (!d) return d;
  for (auto& i : d->ids) i = ids[static_cast<size_t>(i)];
  // The full-row order (see finish): by id unless nucleus sampling sorted it by logit.
  const bool nucleus = opt_.top_p > 0 && opt_.top_p < 1;
  if (!nucleus && d->ids.size() > 1) {
    std::vector<size_t> o(d->ids.size());
    std::iota(o.begin(), o.end(), 0);
    std::sort(o.begin(), o.end(), [&](size_t a, size_t b) { return d->ids[a] < d->ids[b]; });
    Distribution r;
    for (size_t i : o) {
      r.ids.push_back(d->ids[i]);
      r.probs.push_back(d->probs[i]);
    }
    return r;
  }
  return d;
}

std::optional<Distribution> Sampler::finish(std::vector<int32_t> ids, const float* l, bool indexed_by_id,
                                            double log_norm) const {
  // indexed_by_id: l[id] over the whole vocabulary; else ids are positions into the candidates' logits, which are
  // sorted by logit already (ties by id), so position order is logit order.
  const bool nucleus = opt_.top_p > 0 && opt_.top_p < 1;
  const bool partial = !std::isnan(log_norm);
  auto by_logit = [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  // The order of the drawn distribution: by logit for top-p, else by id (both paths alike, so that one seed draws
  // one token whichever path built the distribution).
  if (indexed_by_id) {
    if (nucleus) {
      std::sort(ids.begin(), ids.end(), by_logit);
    } else if (!std::is_sorted(ids.begin(), ids.end())) {
      std::sort(ids.begin(), ids.end());
    }
  }
  std::vector<double> p(ids.size());
  if (partial) {
    for (size_t i = 0; i < ids.size(); i++)
      p[i] = std::exp(static_cast<double>(l[ids[i]]) / opt_.temperature - log_norm);
  } else {
    double mx = -std::numeric_limits<double>::infinity();
    for (int32_t i : ids) mx = std::max(mx, static_cast<double>(l[i]));
    double sum = 0;
    for (size_t i = 0; i < ids.size(); i++) {
      p[i] = std::exp((static_cast<double>(l[ids[i]]) - mx) / opt_.temperature);
      sum += p[i];
    }
    for (auto& v : p) v /= sum;
  }
  std::vector<char> keep(ids.size(), 1);
  double cum = 0;
  if (nucleus) {
    // Sorted descending: keep a token while the mass before it is below top_p (the crossing token stays).
    for (size_t i = 0; i < ids.size(); i++) {
      if (cum >= opt_.top_p) keep[i] = 0;
      cum += p[i];
    }
  }
  double best = 0;
  if (opt_.min_p > 0) {
    for (size_t i = 0; i < ids.size(); i++)
      if (keep[i]) best = std::max(best, p[i]);
    for (size_t i = 0; i < ids.size(); i++)
      if (p[i] < opt_.min_p * best) keep[i] = 0;
  }
  if (partial) {
    // The last entry is a witness: the best token outside the candidates. The kept tokens are a prefix in logit
    // order, so when the witness is provably dropped (the nucleus closed before it, or min_p cuts it) so is every
    // token after it. The margin keeps rounding (the normaliser comes from the device in F32) from deciding.
    constexpr double kMargin = 1e-4;
    VATIC_CHECK(ids.size() >= 2, "sampling candidates without a witness");
    const double before = cum - p.back();
    const bool closed = nucleus && before >= opt_.top_p + kMargin;
    const bool cut = opt_.min_p > 0 && p.back() < opt_.min_p * best * (1 - kMargin);
    if (!closed && !cut) return std::nullopt;
    keep.back() = 0;
  }
  Distribution d;
  double total = 0;
  for (size_t i = 0; i < ids.size(); i++)
    if (keep[i]) total += p[i];
  total = std::max(total, 1e-20);
  for (size_t i = 0; i < ids.size(); i++) {
    if (!keep[i]) continue;
    d.ids.push_back(ids[i]);
    d.probs.push_back(static_cast<float>(p[i] / total));
  }
  return d;
}

int32_t Sampler::sample(const Distribution& d) {
  if (d.ids.size() == 1) return d.ids[0];
  double u = uniform(), cum = 0;
  for (size_t i = 0; i < d.ids.size(); i++) {
    cum += d.probs[i];
    if (u < cum) return d.ids[i];
  }
  return d.ids.back();
}

TokenLogprob Sampler::logprob(const float* logits, int64_t V, int32_t id) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < V; i++) mx = std::max<double>(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < V; i++) sum += std::exp(logits[i] - mx);
  return {id, static_cast<float>(logits[id] - mx - std::log(sum))};
}

std::vector<TokenLogprob> Sampler::top_logprobs(const float* logits, int64_t V, int n) {
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  n = static_cast<int>(std::min<int64_t>(n, V));
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<TokenLogprob> out;
  for (int i = 0; i < n; i++) out.push_back(logprob(logits, V, ids[i]));
  return out;
}

bool accept_draft(const Distribution& p, const Distribution& q, int32_t draft, double u) {
  return accept_draft(p.prob_of(draft), q.prob_of(draft), u);
}

bool accept_draft(double pd, double qd, double u) {
  if (qd <= 0) return false;  // cannot happen for a token the drafter drew
  return u < std::min(1.0, pd / qd);
}

Distribution residual(const Distribution& p, const Distribution& q) {
  Distribution r;
  std::unordered_map<int32_t, float> qmap;
  for (size_t i = 0; i < q.ids.size(); i++) qmap[q.ids[i]] = q.probs[i];
  double sum = 0;
  for (size_t i = 0; i < p.ids.size(); i++) {
    auto it = qmap.find(p.ids[i]);
    double v = std::max(0.0, static_cast<double>(p.probs[i]) - (it == qmap.end() ? 0.0 : it->second));
    if (v > 0) {
      r.ids.push_back(p.ids[i]);
      r.probs.push_back(static_cast<float>(v));
      sum += v;
    }
  }
  if (sum <= 0) return p;  // p == q: any rejection is impossible, keep p for safety
  for (auto& v : r.probs) v = static_cast<float>(v / sum);
  return r;
}

}  // namespace vatic
