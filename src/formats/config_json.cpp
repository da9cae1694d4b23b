#include "formats/config_json.h"

#include <fstream>
#include <sstream>

#include "util/error.h"

namespace vatic {

namespace fs = std::filesystem;

json load_config_json(const fs::path& p, fs::path* resolved) {
  std::error_code ec;
  fs::path file = fs::is_directory(p, ec) ? p / "config.json" : p;
  if (!fs::exists(file, ec)) throw NotFound(fmt::format("model config {} does not exist", file.string()));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InvalidInput(fmt::format("cannot open {}", file.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  json j;
  const std::string text = ss.str();
  if (json_depth(text) > kMaxJsonDepth)
    throw InvalidInput(
        fmt::format("invalid config {}: JSON nested deeper than {} levels", file.string(), kMaxJsonDepth));
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InvalidInput(
        fmt::format("invalid config {}: not valid JSON ({})", file.string(), json_error_text(e)));
  }
  if (!j.is_object()) throw InvalidInput(fmt::format("invalid config {}: not a JSON object", file.string()));
  if (resolved) *resolved = file;
  return j;
}

std::optional<std::string> config_architectures_entry(const json& config, const std::string& source) {
  if (!config.is_object()) throw InvalidInput(fmt::format("invalid config {}: not a JSON object", source));
  auto it = config.find("architectures");
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (!it->is_array() || it->empty() || !(*it)[0].is_string())
    throw InvalidInput(
        fmt::format("invalid config {}: field architectures must be a non-empty list of names", source));
  return (*it)[0].get<std::string>();
}

std::string config_model_type(const json& config) {
  auto mt = config.find("model_type");
  return (mt != config.end() && mt->is_string()) ? mt->get<std::string>() : "";
}

std::string family_architecture(const json& config, const std::string& source,
                                const std::vector<std::string>& architectures,
                                const std::vector<std::string>& model_types, const std::string& family) {
  std::string names;
  for (const auto& a : architectures) names += (names.empty() ? "" : ", ") + a;
  if (const auto name = config_architectures_entry(config, source)) {
    for (const auto& a : architectures)
      if (a == *name) return a;
    throw InvalidInput(fmt::format("{} describes a {} model, not {} ({})", source, *name, family, names));
  }
  const std::string model_type = config_model_type(config);
  for (size_t i = 0; i < model_types.size() && i < architectures.size(); i++)
    if (model_types[i] == model_type) return architectures[i];
  throw InvalidInput(fmt::format(
      "unsupported model in {}: no architectures field{}; expected {} ({})", source,
      model_type.empty() ? "" : fmt::format(" and model_type \"{}\"", model_type), family, names));
}

}  // namespace vatic
