#include "cli/model_arg.h"

#include <filesystem>

#include "store/store.h"

namespace vatic::cli {

ModelSource resolve_model_arg(const std::string& arg) {
  std::error_code ec;
  if (std::filesystem::is_directory(arg, ec)) return ModelSource::from_directory(arg);
  return ModelStore(ModelStore::default_root()).resolve(arg);
}

}  // namespace vatic::cli
