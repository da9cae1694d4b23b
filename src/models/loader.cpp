#include "models/loader.h"

#include "models/model_drafter.h"
#include "models/registry.h"
#include "util/files.h"

namespace vatic {

std::shared_ptr<const TensorStore> open_weights(const ModelSource& source) {
  if (source.weights.empty()) throw InvalidInput(fmt::format("{}: no weights", source.name));
  if (source.weights.size() == 1) return std::make_shared<TensorStore>(source.weights.front());
  return std::make_shared<TensorStore>(source.weights);
}

std::unique_ptr<LanguageModel> load_language_model(const ModelSource& source) {
  json cfg = read_model_config(source);
  return family_of(cfg, source.config.string()).load(cfg, source);
}

std::unique_ptr<Drafter> load_drafter(LanguageModel& target, const ModelSource* draft_source) {
  if (!draft_source) {
    const ModelFamily* f = find_family(target.info().architecture);
    return f ? f->builtin_drafter(target) : nullptr;
  }
  json cfg = read_model_config(*draft_source);
  const ModelFamily& fam = family_of(cfg, draft_source->config.string());
  if (fam.drafter_only(cfg)) return fam.load_drafter_for(target, cfg, *draft_source);
  // A model of its own: it drafts with its own KV cache, over the target's vocabulary.
  auto model = fam.load(cfg, *draft_source);
  if (model->info().vocab_size != target.info().vocab_size)
    throw InvalidInput(fmt::format("{} ({}) cannot draft for {}: its vocabulary has {} tokens, the target's {}",
                                   draft_source->name, model->info().architecture, target.info().architecture,
                                   model->info().vocab_size, target.info().vocab_size));
  return std::make_unique<ModelDrafter>(std::move(model));
}

}  // namespace vatic
