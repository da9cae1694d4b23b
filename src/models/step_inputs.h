#pragma once
// The token ids and positions a forward reads, as device tensors. A forward that takes them from here (and changes
// no other host state than its KV caches) can be recorded once into a device graph and replayed for later tokens:
// while ForwardGraphs records, step_inputs hands out the graph's own input buffers, which it refills before each
// replay.
#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace vatic {

struct StepInputs {
  Tensor ids;        // I32 [T]: the tokens
  Tensor positions;  // I32 [T]: start, start + 1, ..
};

StepInputs step_inputs(const std::vector<int32_t>& tokens, int64_t start, Device device);

// While alive, step_inputs on this thread returns `inputs` (for a forward of the same length) instead of uploading.
class StepInputsOverride {
 public:
  explicit StepInputsOverride(const StepInputs& inputs);
  ~StepInputsOverride();
  StepInputsOverride(const StepInputsOverride&) = delete;
  StepInputsOverride& operator=(const StepInputsOverride&) = delete;

 private:
  const StepInputs* previous_;
};

}  // namespace vatic
