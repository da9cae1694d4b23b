// config.json parsing: the depth check, detection of the architecture and the typed configurations.
#include <cstdint>
#include <string_view>

#include "formats/model_config.h"
#include "util/error.h"
#include "util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    vatic::json config = vatic::parse_json(text, "config.json");
    if (!config.is_object()) return 0;
    switch (vatic::detect_architecture(config)) {
      case vatic::Architecture::Gemma4AssistantForCausalLM:
        vatic::Gemma4AssistantConfig::parse(config);
        break;
      case vatic::Architecture::Glm4MoeLiteForCausalLM:
        vatic::Glm4MoeLiteConfig::parse(config);
        break;
      default:
        vatic::Gemma4TextConfig::parse(config);
        break;
    }
  } catch (const vatic::Error&) {
  } catch (const vatic::json::exception&) {
    // A typed accessor left unchecked; the loaders catch these too, but each one found is worth a look.
  }
  return 0;
}
