#pragma once
// Builds the right model class for a ModelSource (a Hugging Face directory or a store model).
#include <memory>

#include "formats/model_source.h"
#include "formats/safetensors.h"
#include "models/model.h"

namespace vatic {

std::shared_ptr<const TensorStore> open_weights(const ModelSource& source);
std::unique_ptr<LanguageModel> load_language_model(const ModelSource& source);
// The drafter for `target` from `draft_source` (a Gemma 4 assistant), or the MTP layers inside the target's own
// checkpoint when draft_source is null and the target has them. Returns null when there is none.
std::unique_ptr<Drafter> load_drafter(LanguageModel& target, const ModelSource* draft_source);

// Implemented by the model families (models/<family>/).
std::unique_ptr<LanguageModel> load_glm4_moe_lite(const json& config, const ModelSource& source);
// The next-token-prediction layers inside a checkpoint (GLM's MTP), or null when the model has none.
std::unique_ptr<Drafter> load_builtin_drafter(LanguageModel& target);

}  // namespace vatic
