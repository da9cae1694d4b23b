#pragma once
// Classic speculative decoding with a small model of the target's family and tokenizer (Qwen3-0.6B for
// Qwen3-8B): the drafter keeps its own KV cache, follows the target's committed tokens (observe / rewind) and
// drafts K tokens autoregressively. Its logits are the q of the acceptance rule, so sampled output keeps the
// target's distribution.
#include <memory>
#include <vector>

#include "models/model.h"

namespace vatic {

class ModelDrafter final : public Drafter {
 public:
  explicit ModelDrafter(std::unique_ptr<LanguageModel> model);

  std::vector<Tensor> draft(SequenceState& target_state, int32_t last_token, const Tensor& last_hidden,
                            int steps, const std::function<int32_t(const Tensor& logits)>& choose) override;
  std::string name() const override;
  // Committed tokens arrive through observe(); the hidden rows are not used.
  bool wants_hidden() const override { return true; }
  void observe(const std::vector<int32_t>& tokens, const Tensor& hidden, int64_t start) override;
  void rewind(int64_t n) override;

  const LanguageModel& model() const { return *model_; }

 private:
  std::unique_ptr<LanguageModel> model_;
  std::unique_ptr<SequenceState> state_;
  std::vector<int32_t> committed_;  // the target's tokens as far as the drafter was told
  std::vector<int32_t> ran_;        // the tokens in the drafter's cache (a prefix of committed_ + drafts)
  // Tokens the drafter missed (a restored prefix it never saw): positions of committed_ are shifted by this
  // many.
  int64_t missing_ = 0;
};

}  // namespace vatic
