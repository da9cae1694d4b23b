#include "models/model_drafter.h"

#include <algorithm>

#include "util/error.h"

namespace vatic {

namespace {
// Prefill chunk for catching up with the target (bounds the drafter's activation memory on long prompts).
constexpr size_t kCatchUpChunk = 512;
}  // namespace

ModelDrafter::ModelDrafter(std::unique_ptr<LanguageModel> model)
    : model_(std::move(model)), state_(model_->new_state()) {}

std::string ModelDrafter::name() const {
  return model_->info().architecture + " draft model";
}

void ModelDrafter::rewind(int64_t n) {
  n = std::max<int64_t>(0, n - missing_);
  if (n == 0) missing_ = 0;
  if (static_cast<int64_t>(committed_.size()) > n) committed_.resize(static_cast<size_t>(n));
}

void ModelDrafter::observe(const std::vector<int32_t>& tokens, const Tensor&, int64_t start) {
  int64_t at = start - missing_;
  if (at > static_cast<int64_t>(committed_.size())) {
    // The target continued from tokens the drafter never saw (a restored prefix): draft from what it has.
    // Drafts only change the acceptance rate, never the output.
    missing_ += at - static_cast<int64_t>(committed_.size());
    at = static_cast<int64_t>(committed_.size());
  }
  committed_.resize(static_cast<size_t>(std::max<int64_t>(at, 0)));
  committed_.insert(committed_.end(), tokens.begin(), tokens.end());
}

std::vector<Tensor> ModelDrafter::draft(SequenceState&, int32_t last_token, const Tensor&, int steps,
                                        const std::function<int32_t(const Tensor& logits)>& choose) {
  std::vector<Tensor> out;
  if (steps <= 0) return out;
  // What the cache must hold before the first draft step: the committed tokens, then last_token.
  std::vector<int32_t> want = committed_;
  want.push_back(last_token);
  size_t keep = 0;
  while (keep < ran_.size() && keep < want.size() - 1 && ran_[keep] == want[keep]) keep++;
  if (static_cast<int64_t>(keep) < state_->length()) {
    if (state_->can_rewind_to(static_cast<int64_t>(keep))) {
      state_->rewind(static_cast<int64_t>(keep));
    } else {
      state_ = model_->new_state();
      keep = 0;
    }
  }
  ran_.resize(keep);
  const int64_t V = model_->info().vocab_size;
  ForwardResult r;
  for (size_t s = keep; s < want.size(); s += kCatchUpChunk) {
    const size_t e = std::min(want.size(), s + kCatchUpChunk);
    std::vector<int32_t> part(want.begin() + static_cast<std::ptrdiff_t>(s),
                              want.begin() + static_cast<std::ptrdiff_t>(e));
    r = model_->forward(*state_, part, e == want.size() ? 1 : 0);
    ran_.insert(ran_.end(), part.begin(), part.end());
  }
  for (int i = 0; i < steps; i++) {
    Tensor logits = r.logits.reshape({V});
    out.push_back(logits);
    const int32_t t = choose(logits);
    if (i + 1 == steps) break;
    r = model_->forward(*state_, {t}, 1);
    ran_.push_back(t);
  }
  return out;
}

}  // namespace vatic
