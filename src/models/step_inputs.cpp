#include "models/step_inputs.h"

#include <numeric>

#include "ops/ops.h"

namespace vatic {

namespace {
thread_local const StepInputs* current = nullptr;
}

StepInputs step_inputs(const std::vector<int32_t>& tokens, int64_t start, Device device) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (current) {
    VATIC_CHECK(current->ids.numel() == T && current->ids.device() == device,
                "step inputs of {} tokens on {} for a forward of {} on {}", current->ids.numel(),
                current->ids.device().str(), T, device.str());
    return *current;
  }
  std::vector<int32_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), static_cast<int32_t>(start));
  return {ops::ids(tokens, device), ops::ids(pos, device)};
}

StepInputsOverride::StepInputsOverride(const StepInputs& inputs) : previous_(current) { current = &inputs; }
StepInputsOverride::~StepInputsOverride() { current = previous_; }

}  // namespace vatic
