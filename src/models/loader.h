#pragma once
// Builds the right model class for a ModelSource (a Hugging Face directory or a store model).
#include <memory>

#include "formats/model_source.h"
#include "formats/safetensors.h"
#include "models/model.h"
#include "models/weights.h"

namespace vatic {

std::shared_ptr<const TensorStore> open_weights(const ModelSource& source);
// The model's weights on `device` (uploaded as the model reads them; progress as in Weights).
std::unique_ptr<LanguageModel> load_language_model(const ModelSource& source, Device device,
                                                   Weights::Progress progress = {});
// The drafter for `target` from `draft_source` (a Gemma 4 assistant), or the MTP layers inside the target's own
// checkpoint when draft_source is null and the target has them; on the target's device. Returns null when there
// is none.
std::unique_ptr<Drafter> load_drafter(LanguageModel& target, const ModelSource* draft_source,
                                      Weights::Progress progress = {});

// Implemented by the model families (models/<family>/).
std::unique_ptr<LanguageModel> load_glm4_moe_lite(const json& config, const ModelSource& source,
                                                  std::shared_ptr<const Weights> weights);
// The next-token-prediction layers inside a checkpoint (GLM's MTP), or null when the model has none.
std::unique_ptr<Drafter> load_builtin_drafter(LanguageModel& target);

}  // namespace vatic
