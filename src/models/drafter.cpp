#include "models/model.h"
#include "ops/ops.h"

namespace vatic {

std::vector<int32_t> Drafter::draft_greedy(SequenceState& target_state, int32_t last_token,
                                           const Tensor& last_hidden, int steps) {
  std::vector<int32_t> ids;
  draft(target_state, last_token, last_hidden, steps, [&](const Tensor& logits) {
    ids.push_back(ops::argmax_rows(logits)[0]);
    return ids.back();
  });
  return ids;
}

}  // namespace vatic
