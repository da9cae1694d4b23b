#pragma once
#include <string>

#include "formats/model_source.h"

namespace vatic::cli {

// A model named on the command line: a Hugging Face directory, or otherwise the name of a model in the store.
ModelSource resolve_model_arg(const std::string& arg);

}  // namespace vatic::cli
