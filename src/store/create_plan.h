#pragma once
// The plan of `vatic create` (create.cpp): which blob each tensor goes to, and how it is quantized on the
// way.
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "quant/quantize.h"
#include "store/model_input.h"

namespace vatic::store_detail {

// One tensor blob: a weight (possibly stacked from per-expert tensors, possibly quantized, with its scales
// and biases), built only when its turn to be written comes.
struct Group {
  std::string name;
  uint64_t source_bytes = 0;
  int64_t params = 0;
  QuantType type = QuantType::None;
  std::string status;
  std::function<void(std::vector<NamedTensor>&, std::map<std::string, std::string>&)> build;
};

struct Plan {
  std::vector<Group> groups;  // in name order
  int64_t params = 0;
  uint64_t bytes = 0;
  std::set<QuantType> types;
  int group_size = 0;
};

// Checks the model's tensors and plans its blobs: pre-quantized weights are copied as they are (and refuse to
// be quantized again), everything else is quantized to `requested` as the family's policy decides.
Plan make_plan(const ModelInput& in, QuantType requested, int group_size, bool is_draft);

}  // namespace vatic::store_detail
