#pragma once
#include <nlohmann/json.hpp>

namespace vatic {
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;
}  // namespace vatic
