#include "models/glm4_moe_lite/glm4_moe_lite_model.h"
#include "models/glm4_moe_lite/glm4_mtp_drafter.h"
#include "models/loader.h"

namespace vatic {

std::unique_ptr<LanguageModel> load_glm4_moe_lite(const json& config, const ModelSource& source,
                                                  std::shared_ptr<const Weights> weights) {
  return std::make_unique<Glm4MoeLiteModel>(Glm4MoeLiteConfig::parse(config, source.config.string()),
                                            std::move(weights));
}

std::unique_ptr<Drafter> load_builtin_drafter(LanguageModel& target) {
  auto* glm = dynamic_cast<Glm4MoeLiteModel*>(&target);
  if (!glm || glm->config().num_nextn_predict_layers <= 0) return nullptr;
  // The first MTP layer follows the decoder layers. Checkpoints converted without it have no drafter.
  const int layer = glm->config().num_layers;
  if (!glm->weights()->has(glm->config().layer_prefix(layer) + "eh_proj.weight")) return nullptr;
  return std::make_unique<Glm4MtpDrafter>(*glm, layer);
}

}  // namespace vatic
