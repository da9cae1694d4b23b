#include "runner/model_resolve.h"

#include "store/store.h"

namespace vatic::runner {

ModelSource resolve_model(const std::string& name, const std::string& dir) {
  if (!dir.empty()) return ModelSource::from_directory(dir);
  return ModelStore(ModelStore::default_root()).resolve(name);
}

}  // namespace vatic::runner
