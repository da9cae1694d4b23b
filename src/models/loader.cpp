#include "models/loader.h"

#include "models/model_drafter.h"
#include "models/registry.h"
#include "util/files.h"

namespace vatic {

std::shared_ptr<const TensorStore> open_weights(const ModelSource& source) {
  if (source.tensors) return source.tensors;
  if (source.weights.empty()) throw InvalidInput(fmt::format("{}: no weights", source.name));
  if (source.weights.size() == 1) return std::make_shared<TensorStore>(source.weights.front());
  return std::make_shared<TensorStore>(source.weights);
}

std::unique_ptr<LanguageModel> load_language_model(const ModelSource& source, Device device,
                                                   Weights::Progress progress) {
  json cfg = read_model_config(source);
  const ModelFamily& fam = family_of(cfg, source.config.string());
  return fam.load(cfg, source, std::make_shared<const Weights>(open_weights(source), device, std::move(progress)));
}

std::unique_ptr<Drafter> load_drafter(LanguageModel& target, const ModelSource* draft_source,
                                      Weights::Progress progress) {
  if (!draft_source) {
    const ModelFamily* f = find_family(target.info().architecture);
    return f ? f->builtin_drafter(target) : nullptr;
  }
  json cfg = read_model_config(*draft_source);
  const ModelFamily& fam = family_of(cfg, draft_source->config.string());
  // The drafter lives where its target does.
  auto weights = std::make_shared<const Weights>(open_weights(*draft_source), target.device(), std::move(progress));
  if (fam.drafter_only(cfg)) return fam.load_drafter_for(target, cfg, *draft_source, std::move(weights));
  // A model of its own: it drafts with its own KV cache, over the target's vocabulary.
  auto model = fam.load(cfg, *draft_source, std::move(weights));
  if (model->info().vocab_size != target.info().vocab_size)
    throw InvalidInput(fmt::format("{} ({}) cannot draft for {}: its vocabulary has {} tokens, the target's {}",
                                   draft_source->name, model->info().architecture, target.info().architecture,
                                   model->info().vocab_size, target.info().vocab_size));
  return std::make_unique<ModelDrafter>(std::move(model));
}

}  // namespace vatic
