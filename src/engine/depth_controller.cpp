#include "engine/depth_controller.h"

#include <algorithm>
#include <cmath>

namespace vatic {

namespace {
constexpr double kCostAlpha = 0.3;
constexpr double kAcceptAlpha = 0.1;
// Samples of a position before its acceptance is trusted (and the depth one deeper may be chosen); its
// estimate is their mean this early (record), so three are enough to climb a depth in a short reply.
constexpr int kTrustedSamples = 3;
// A position's acceptance above an even chance is shrunk toward it by one pseudo-sample, so a position seen a
// few times (the deep ones, sampled only by probes) does not look better than it has shown; it weighs little
// once it has ten.
constexpr double kPriorWeight = 1.0;
constexpr double kPriorRate = 0.5;
// Clean cost samples of depth 1 before plain decoding's cost is measured: the first rounds of a reply are
// sometimes several times slower than later ones, and the two must not be compared on them.
constexpr int kSeedZeroAfter = 4;
// A depth's first clean samples: its estimate is their minimum, so one slow round cannot set it.
constexpr int kSeedSamples = 2;
// A deeper depth is chosen only when it promises this much more than the chosen one: estimates within 10 %
// of each other are noise, and every change costs a round that measures nothing clean.
constexpr double kSwitchMargin = 0.1;
// Rounds between probes one deeper than the chosen depth: from the minimum after a change of depth, doubled
// after each probe that did not pay, up to the maximum.
constexpr int kMinProbeInterval = 4;
constexpr int kMaxProbeInterval = 64;
}  // namespace

DepthController::DepthController(int max_depth)
    : max_depth_(std::max(0, max_depth)),
      cost_(max_depth_ + 1, -1.0),
      accept_(max_depth_ + 1, 1.0),
      accept_n_(max_depth_ + 1, 0),
      cost_n_(max_depth_ + 1, 0),
      fastest_(max_depth_ + 1, -1.0),
      selected_(std::min(1, max_depth_)) {}

double DepthController::acceptance(int i) const {
  if (i < 0 || i > max_depth_) return 0.0;
  auto shrunk = [&](int j) {
    const double n = std::min<double>(accept_n_[j], 1.0 / kAcceptAlpha);
    return std::min(accept_[j], (n * accept_[j] + kPriorWeight * kPriorRate) / (n + kPriorWeight));
  };
  if (accept_n_[i] >= kTrustedSamples) return shrunk(i);
  // Untrusted positions inherit the deepest trusted rate below them (optimistic at first).
  for (int j = i - 1; j >= 0; j--)
    if (accept_n_[j] >= kTrustedSamples) return shrunk(j);
  return 1.0;
}

double DepthController::expected_tokens(int n) const {
  double e = 1.0, run = 1.0;
  for (int k = 0; k < n; k++) {
    run *= acceptance(k);
    e += run;
  }
  return e;
}

double DepthController::measured(int n) const {
  // Timing noise only adds time, so a measured estimate is an upper bound on its depth's true cost, and
  // drafting deeper never costs less: a depth costs at most what any deeper depth was measured to. An estimate
  // above a deeper one is stale (taken while the machine was slower, such as a reply's first rounds, and not
  // re-measured since its depth stopped being run) and is lowered to it; one slow sample at depth 1 must not
  // make every depth look slower than plain decoding, nor a stale plain-decoding cost make a deeper depth look
  // slower than it was measured to be.
  double c = cost_[n];
  for (int k = n + 1; k <= max_depth_; k++)
    if (cost_[k] > 0) c = std::min(c, cost_[k]);
  return c;
}

double DepthController::cost(int n) const {
  // Drafting deeper never costs less: an unmeasured depth costs at least what every shallower depth is
  // estimated to, so an interpolation cannot make a deeper round look cheaper than a shallower one.
  double c = raw_cost(n);
  for (int k = 0; k < n; k++) c = std::max(c, raw_cost(k));
  return c;
}

double DepthController::raw_cost(int n) const {
  if (cost_[n] > 0) return measured(n);
  // A depth run only by probes has no estimate, but any round of it bounds its cost from above (noise and a
  // change's one-off costs only add time).
  const double e = estimated_cost(n);
  return fastest_[n] > 0 ? std::min(e, fastest_[n]) : e;
}

double DepthController::estimated_cost(int n) const {
  // Linear interpolation between sampled depths; beyond the deepest, the line through the two deepest sampled
  // depths (each further draft costs what the last measured one did). Below the shallowest, flat.
  int lo = -1, hi = -1;
  for (int k = n - 1; k >= 0; k--)
    if (cost_[k] > 0) {
      lo = k;
      break;
    }
  for (int k = n + 1; k <= max_depth_; k++)
    if (cost_[k] > 0) {
      hi = k;
      break;
    }
  if (lo >= 0 && hi >= 0) return measured(lo) + (measured(hi) - measured(lo)) * (n - lo) / double(hi - lo);
  if (lo >= 0) {
    // A shallower estimate that a deeper one contradicts (lowered by measured) says nothing about what a
    // further draft costs: the slope comes from the deepest one below lo that is consistent.
    int lo2 = -1;
    for (int k = lo - 1; k >= 0; k--)
      if (cost_[k] > 0 && cost_[k] <= measured(lo)) {
        lo2 = k;
        break;
      }
    if (lo2 >= 0) return measured(lo) + (measured(lo) - cost_[lo2]) * (n - lo) / double(lo - lo2);
    // One depth measured: what a further draft costs is unknown, so assume the worst, a round's cost in
    // proportion to the tokens it verifies; the depth is then chosen only once a second measured depth gives
    // the slope.
    return measured(lo) * (n + 1) / double(lo + 1);
  }
  if (hi >= 0) return measured(hi);
  return 1.0;
}

double DepthController::expected_rate(int n) const {
  return expected_tokens(n) / cost(n);
}

int DepthController::best() const {
  int frontier = 0;
  while (frontier < max_depth_ && accept_n_[frontier] >= kTrustedSamples) frontier++;
  const int limit = std::min(max_depth_, frontier + 1);
  int best = 0;
  for (int n = 1; n <= limit; n++)
    if (expected_rate(n) > expected_rate(best)) best = n;
  // Hysteresis: a deeper depth than the chosen one must promise clearly more (its estimates are the less
  // sampled); a shallower one is taken as soon as it promises as much.
  if (best > selected_ && selected_ <= limit &&
      expected_rate(best) <= (1.0 + kSwitchMargin) * expected_rate(selected_))
    return selected_;
  return best;
}

int DepthController::next() {
  if (max_depth_ == 0) return 0;
  // Start at depth 1 and grow on evidence: a deeper depth is tried once the positions above it are trusted
  // and promise more (its cost is then measured, not assumed). Plain decoding's cost is measured (two clean
  // rounds) once depth 1 has clean samples past a reply's first rounds; until then it is taken to cost what
  // depth 1 does, so useless drafts (an acceptance of 0) already tie it and park there.
  if (cost_n_[0] < kSeedSamples && cost_n_[1] >= kSeedZeroAfter) {
    last_was_probe_ = false;
    return 0;
  }
  int sel = best();
  if (sel != selected_) {
    selected_ = sel;
    probe_interval_ = kMinProbeInterval;
    since_probe_ = 0;
  } else if (last_was_probe_) {
    // Backing off only after a probe that did not pay (see record): one whose drafts were all accepted and
    // raised the deeper depth's estimate is evidence for climbing that has not yet cleared the margin, so the
    // next comes as soon. Doubling after every probe left the depth parked at 0 for a whole reply when a
    // reply's first rounds rejected its drafts and the probes afterwards were all accepted.
    if (!probe_paid_) probe_interval_ = std::min(probe_interval_ * 2, kMaxProbeInterval);
  }
  last_was_probe_ = false;
  if (++since_probe_ >= probe_interval_ && selected_ < max_depth_) {
    since_probe_ = 0;
    last_was_probe_ = true;
    return selected_ + 1;
  }
  return selected_;
}

void DepthController::record(int depth, int accepted, double seconds) {
  if (depth < 0 || depth > max_depth_) return;
  const bool probe = last_was_probe_ && depth == selected_ + 1;
  const double rate_before = probe ? expected_rate(depth) : 0.0;
  // Timing noise only ever adds time (a descheduled thread, a page fault), so the estimate follows a faster
  // round quickly and a slower one cautiously: at most 25% of the estimate per sample. The first round after
  // a depth change may carry one-off costs, so it neither seeds a depth that has no estimate yet nor raises
  // one.
  if (seconds > 0) {
    if (fastest_[depth] <= 0 || seconds < fastest_[depth]) fastest_[depth] = seconds;
    double& c = cost_[depth];
    if (depth == last_depth_) cost_n_[depth]++;
    if (c <= 0 || (depth == last_depth_ && cost_n_[depth] <= kSeedSamples)) {
      if (depth == last_depth_) c = c <= 0 ? seconds : std::min(c, seconds);
    } else if (seconds < c) {
      // A depth other than the chosen one is run only by probes, rounds apart, so its estimate follows a
      // faster round at once: one seeded in a reply's slow first rounds would otherwise stay stale for the
      // rest of the reply and keep a depth that pays from being chosen.
      c = depth == selected_ ? c + 0.5 * (seconds - c) : seconds;
    } else if (depth == last_depth_) {
      // A probe (or any round right after a change) pays the change's one-off costs (the drafter's weights
      // and the idle worker to bring back): it may lower an estimate, never raise it. Otherwise depth 0, once
      // chosen, stayed chosen for dozens of rounds while probes one deeper kept looking slow.
      c += kCostAlpha * std::min(seconds - c, 0.25 * c);
    }
  }
  last_depth_ = depth;
  for (int i = 0; i < depth; i++) {
    const bool ok = i < accepted;
    // The mean of the samples until there are 1 / kAcceptAlpha of them, a moving average after: an average
    // started at its first sample took one early rejection for an acceptance near 0 for a dozen samples.
    accept_n_[i]++;
    accept_[i] += std::max(kAcceptAlpha, 1.0 / accept_n_[i]) * ((ok ? 1.0 : 0.0) - accept_[i]);
    if (!ok) break;  // positions after a rejection were not tested
  }
  // A probe pays when all its drafts were accepted and it moved the probed depth's expected rate by a tenth
  // of the margin to climb or more: drafts accepted where the estimate already expected them (a good drafter
  // whose deeper rounds cost too much) tell nothing new and back off as before.
  probe_paid_ =
      probe && accepted == depth && expected_rate(depth) >= rate_before * (1.0 + kSwitchMargin / 10);
}

}  // namespace vatic
