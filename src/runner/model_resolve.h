#pragma once
// Model lookup for the runner, kept in its own file so the store's types and the engine's never meet in one
// translation unit.
#include <string>

#include "formats/model_source.h"

namespace vatic::runner {

// A model in the store ($VATIC_MODELS) by name, or a Hugging Face directory when `dir` is set.
ModelSource resolve_model(const std::string& name, const std::string& dir);

}  // namespace vatic::runner
