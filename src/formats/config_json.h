#pragma once
// Reading a Hugging Face config.json and the fields that name its architecture. What a family makes of the
// rest lives with the family (src/models/<family>/); formats/config_fields.h gives typed access to the
// fields.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "util/json.h"

namespace vatic {

// Reads and parses DIR/config.json (or the file itself when given a file). Throws NotFound / InvalidInput.
json load_config_json(const std::filesystem::path& dir_or_file, std::filesystem::path* resolved = nullptr);

// `architectures[0]` of a config, or nothing when it has no architectures field. InvalidInput naming `source`
// when the config is not an object or the field is not a non-empty list of names.
std::optional<std::string> config_architectures_entry(const json& config, const std::string& source);
// `model_type` when it is a string, else "".
std::string config_model_type(const json& config);
// The architecture of a config that one family reads: `architectures[0]` when it is in `architectures`, else
// the architecture at the index of its `model_type` in `model_types`. InvalidInput naming `source`, what the
// config names and `family` with its architectures otherwise.
std::string family_architecture(const json& config, const std::string& source,
                                const std::vector<std::string>& architectures,
                                const std::vector<std::string>& model_types, const std::string& family);

}  // namespace vatic
