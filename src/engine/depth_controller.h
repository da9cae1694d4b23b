#pragma once
// Chooses the speculative draft depth that maximises expected committed tokens per second, from measured
// round costs per depth and per-position acceptance rates. It starts at depth 1 and grows on evidence. Depth
// 0 is plain decoding; the controller keeps probing one step deeper now and then so it can climb back when
// drafts start to pay.
#include <vector>

namespace vatic {

class DepthController {
 public:
  explicit DepthController(int max_depth);

  int max_depth() const { return max_depth_; }
  // The depth for the next round.
  int next();
  // A finished round: the depth used, how many drafts were accepted, its wall time.
  void record(int depth, int accepted, double seconds);
  // Expected tokens per second at depth n under the current estimates (for statistics and tests).
  double expected_rate(int n) const;
  double expected_tokens(int n) const;
  double acceptance(int position) const;  // conditional acceptance rate of draft position (0-based)

 private:
  double cost(int n) const;
  double raw_cost(int n) const;
  double estimated_cost(int n) const;  // an unmeasured depth's cost from the measured ones
  double measured(int n) const;  // a measured depth's estimate, at most any deeper one's
  int best() const;

  int max_depth_;
  std::vector<double> cost_;    // EWMA round time per depth (seconds), < 0 = unsampled
  std::vector<double> accept_;  // EWMA conditional acceptance per position
  std::vector<int> accept_n_;   // samples per position
  std::vector<int> cost_n_;     // clean cost samples per depth (rounds at the depth run before)
  std::vector<double> fastest_;  // fastest round seen per depth, clean or not (seconds), < 0 = none
  int last_depth_ = -1;
  int selected_;
  int probe_interval_ = 4;
  int since_probe_ = 0;
  bool last_was_probe_ = false;
  bool probe_paid_ = false;  // the last probe's drafts were all accepted and raised its depth's estimate
};

}  // namespace vatic
