#include "models/registry.h"

#include "formats/config_json.h"
#include "util/error.h"
#include "util/files.h"

namespace vatic {

const std::vector<const ModelFamily*>& model_families() {
  // Adding a family: its folder under models/ and one line here.
  static const std::vector<const ModelFamily*> all = {&gemma4_family(),    &glm4_moe_lite_family(),
                                                      &llama_family(),     &qwen3_family(),
                                                      &qwen3_moe_family(), &gemma3_family()};
  return all;
}

std::string supported_architecture_list() {
  std::string out;
  for (const auto* f : model_families())
    for (const auto& a : f->architectures()) out += (out.empty() ? "" : ", ") + a;
  return out;
}

const ModelFamily* find_family(const std::string& architecture) {
  for (const auto* f : model_families())
    for (const auto& a : f->architectures())
      if (a == architecture) return f;
  return nullptr;
}

std::string config_architecture(const json& config, const std::string& source) {
  if (auto name = config_architectures_entry(config, source)) return *name;
  const std::string model_type = config_model_type(config);
  for (const auto* f : model_families()) {
    const auto types = f->model_types();
    for (size_t i = 0; i < types.size(); i++)
      if (types[i] == model_type) return f->architectures().at(std::min(i, f->architectures().size() - 1));
  }
  throw InvalidInput(fmt::format(
      "unsupported model in {}: no architectures field{}; supported architectures: {}", source,
      model_type.empty() ? "" : " and model_type \"" + model_type + "\"", supported_architecture_list()));
}

const ModelFamily& family_of(const json& config, const std::string& source) {
  const std::string arch = config_architecture(config, source);
  if (const ModelFamily* f = find_family(arch)) return *f;
  throw InvalidInput(fmt::format("unsupported architecture \"{}\" in {}; supported architectures: {}", arch,
                                 source, supported_architecture_list()));
}

json read_model_config(const ModelSource& source) {
  try {
    return json::parse(read_file(source.config));
  } catch (const json::exception& e) {
    throw InvalidInput(fmt::format("{}: invalid JSON: {}", source.config.string(), e.what()));
  }
}

}  // namespace vatic
