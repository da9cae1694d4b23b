#include "models/loader.h"

#include "formats/model_config.h"
#include "models/gemma4/gemma4_assistant.h"
#include "models/gemma4/gemma4_model.h"
#include "util/files.h"

namespace vatic {

std::shared_ptr<const TensorStore> open_weights(const ModelSource& source) {
  if (source.weights.empty()) throw InvalidInput(fmt::format("{}: no weights", source.name));
  if (source.weights.size() == 1) return std::make_shared<TensorStore>(source.weights.front());
  return std::make_shared<TensorStore>(source.weights);
}

static json read_config(const ModelSource& source) {
  try {
    return json::parse(read_file(source.config));
  } catch (const json::exception& e) {
    throw InvalidInput(fmt::format("{}: invalid JSON: {}", source.config.string(), e.what()));
  }
}

std::unique_ptr<LanguageModel> load_language_model(const ModelSource& source, Device device,
                                                   Weights::Progress progress) {
  json cfg = read_config(source);
  Architecture arch = detect_architecture(cfg, source.config.string());
  auto weights = [&] { return std::make_shared<const Weights>(open_weights(source), device, progress); };
  switch (arch) {
    case Architecture::Gemma4ForConditionalGeneration:
    case Architecture::Gemma4ForCausalLM:
      return std::make_unique<Gemma4Model>(Gemma4TextConfig::parse(cfg, source.config.string()), weights());
    case Architecture::Glm4MoeLiteForCausalLM:
      return load_glm4_moe_lite(cfg, source, weights());
    case Architecture::Gemma4AssistantForCausalLM:
      throw InvalidInput(fmt::format("{} is a drafter (Gemma4AssistantForCausalLM); use it as DRAFT of its target",
                                     source.name));
  }
  fail("unreachable");
}

std::unique_ptr<Drafter> load_drafter(LanguageModel& target, const ModelSource* draft_source,
                                      Weights::Progress progress) {
  if (!draft_source) return load_builtin_drafter(target);
  json cfg = read_config(*draft_source);
  Architecture arch = detect_architecture(cfg, draft_source->config.string());
  auto* gemma = dynamic_cast<Gemma4Model*>(&target);
  if (arch != Architecture::Gemma4AssistantForCausalLM || !gemma)
    throw InvalidInput(fmt::format("{} ({}) cannot draft for {} ({})", draft_source->name, architecture_name(arch),
                                   target.info().architecture, target.info().architecture));
  return std::make_unique<Gemma4Assistant>(
      *gemma, Gemma4AssistantConfig::parse(cfg, draft_source->config.string()),
      std::make_shared<const Weights>(open_weights(*draft_source), gemma->device(), std::move(progress)));
}

}  // namespace vatic
