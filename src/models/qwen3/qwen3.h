#pragma once
#include "models/decoder.h"

namespace vatic {
// The Qwen3 attention and dense layers (Qwen3-MoE builds on them).
DecoderSpec qwen3_spec(const Fields& f, const std::string& architecture);
}  // namespace vatic
