#include "models/loader.h"

namespace vatic {

std::unique_ptr<LanguageModel> load_glm4_moe_lite(const json& config, const ModelSource& source) {
  throw InvalidInput(fmt::format("{}: Glm4MoeLiteForCausalLM is not supported by this build yet", source.name));
}

std::unique_ptr<Drafter> load_builtin_drafter(LanguageModel& target) { return nullptr; }

}  // namespace vatic
