#pragma once
// The inputs of `vatic create` (create.cpp): a model read from a Hugging Face directory or from the store,
// and the checks that run on it before anything is written.
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "models/registry.h"
#include "quant/quantize.h"
#include "store/store.h"
#include "util/json.h"

namespace vatic::store_detail {

// One model to import: a directory, or the target or draft part of a stored model.
struct ModelInput {
  std::string label;  // "FROM /path", "DRAFT name:tag", for messages
  std::string config_bytes;
  json config;
  std::string arch;                           // architectures[0]
  const ModelFamily* family = nullptr;        // from the registry: everything family-specific comes from it
  std::map<std::string, std::string> extras;  // layer kind -> bytes (tokenizer, generation_config, ...)
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  std::map<std::string, size_t> where;  // tensor -> index in files
  // Inherited from a stored model (FROM name).
  bool from_store = false;
  json params = json::object();
  std::string system, template_text, renderer, parser;
  std::vector<std::string> licenses;
  json messages = json::array();

  Tensor get(const std::string& n) const { return files[where.at(n)]->get(n); }
  bool has(const std::string& n) const { return where.count(n) != 0; }
  const std::map<std::string, std::string>& metadata_of(const std::string& n) const {
    return files[where.at(n)]->metadata();
  }
};

// FROM / DRAFT as a Hugging Face directory; `role` ("FROM", "DRAFT") starts the label.
ModelInput load_directory(const std::filesystem::path& dir, const std::string& role);
// FROM / DRAFT as a stored model: its target part, or its draft part when `draft_part`.
ModelInput load_stored(const ModelStore& store, const std::string& name, bool draft_part,
                       const std::string& role);

// A weight stored quantized (MLX layout / our own blobs): its tensors and parameters.
struct PreQuant {
  std::string weight, scales, biases;
  TensorQuant q;
};

// Finds quantized weights (U32 + .scales): their names and parameters.
std::map<std::string, PreQuant> find_prequantized(const ModelInput& in);
// A tensor's shape as the config sees it (a packed quantized weight's unpacked width); nullopt when absent.
std::optional<Shape> logical_shape(const ModelInput& in, const std::map<std::string, PreQuant>& pq,
                                   const std::string& name);
// Every tensor the family expects is there with the shape its config implies; InvalidInput listing what is
// not.
void validate_tensors(const ModelInput& in, const std::map<std::string, PreQuant>& pq);
// The draft model can draft for the target (a drafter that fits it, or a model with the target's tokenizer).
void validate_draft_fit(const ModelInput& target, const ModelInput& draft);

}  // namespace vatic::store_detail
