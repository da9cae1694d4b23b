#include "formats/model_source.h"

#include <set>

#include "util/error.h"
#include "util/files.h"

namespace vatic {
namespace fs = std::filesystem;

ModelSource ModelSource::from_directory(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw NotFound(fmt::format("model directory {} not found", dir.string()));
  ModelSource s;
  s.name = dir.string();
  s.config = dir / "config.json";
  if (!fs::is_regular_file(s.config, ec))
    throw InvalidInput(fmt::format("{}: config.json is missing (expected a Hugging Face model directory)",
                                   dir.string()));
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::is_regular_file(index, ec)) {
    json j;
    j = parse_json(read_file(index), index.string());
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw InvalidInput(fmt::format("{} has no \"weight_map\" object", index.string()));
    std::set<std::string> seen;
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw InvalidInput(fmt::format("{}: shard of {} is not a file name", index.string(), tensor));
      std::string f = file.get<std::string>();
      fs::path rel(f);
      if (f.empty() || rel.is_absolute() || rel.filename() != rel)
        throw InvalidInput(fmt::format("{}: shard name \"{}\" is not a file in the model directory", index.string(), f));
      if (!seen.insert(f).second) continue;
      if (!fs::is_regular_file(dir / f, ec))
        throw InvalidInput(fmt::format("shard {} named by {} is missing", (dir / f).string(), index.string()));
      s.weights.push_back(dir / f);
    }
  } else if (fs::is_regular_file(dir / "model.safetensors", ec)) {
    s.weights.push_back(dir / "model.safetensors");
  } else {
    throw InvalidInput(fmt::format(
        "no model weights in {}: expected model.safetensors or model.safetensors.index.json", dir.string()));
  }
  if (fs::is_regular_file(dir / "tokenizer.json", ec)) s.tokenizer = dir / "tokenizer.json";
  if (fs::is_regular_file(dir / "generation_config.json", ec)) s.generation_config = dir / "generation_config.json";
  return s;
}

}  // namespace vatic
