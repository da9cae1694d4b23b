// config.json parsing: the depth check, detection of the architecture and the typed configurations.
#include <cstdint>
#include <string_view>

#include "formats/config_json.h"
#include "models/gemma4/gemma4_config.h"
#include "models/glm4_moe_lite/glm4_moe_lite_config.h"
#include "util/error.h"
#include "util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    vatic::json config = vatic::parse_json(text, "config.json");
    if (!config.is_object()) return 0;
    const auto arch = vatic::config_architectures_entry(config, "config.json");
    const std::string name = arch ? *arch : vatic::config_model_type(config);
    if (name == vatic::kGlm4MoeLiteArchitecture || name == vatic::kGlm4MoeLiteModelType)
      vatic::Glm4MoeLiteConfig::parse(config);
    else if (name == vatic::kGemma4Assistant || name == "gemma4_assistant")
      vatic::Gemma4AssistantConfig::parse(config);
    else
      vatic::Gemma4TextConfig::parse(config);
  } catch (const vatic::Error&) {
  } catch (const vatic::json::exception&) {
    // A typed accessor left unchecked; the loaders catch these too, but each one found is worth a look.
  }
  return 0;
}
