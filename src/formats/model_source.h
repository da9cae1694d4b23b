#pragma once
// Where a model's files are, whether it comes from a Hugging Face directory or from the model store.
// The engine loads from a ModelSource and never cares which of the two it was.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "util/json.h"

namespace vatic {

class TensorStore;

struct ModelSource {
  std::string name;                                  // model name or directory, for messages
  std::filesystem::path config;                      // config.json
  std::vector<std::filesystem::path> weights;        // safetensors files holding the tensors (any split)
  std::shared_ptr<const TensorStore> tensors;        // or the tensors themselves, in memory (benchmarks)
  std::filesystem::path tokenizer;                   // tokenizer.json; empty for drafters
  std::filesystem::path generation_config;           // may be empty
  json params = json::object();                      // Modelfile PARAMETERs (store models only)
  std::string system;                                // Modelfile SYSTEM
  std::string renderer, parser;                      // chat format names; empty = default for the architecture
  std::shared_ptr<ModelSource> draft;                // the MTP drafter, when attached

  // A Hugging Face directory: config.json, model.safetensors or the shards named by
  // model.safetensors.index.json, tokenizer.json, generation_config.json.
  static ModelSource from_directory(const std::filesystem::path& dir);
};

}  // namespace vatic
