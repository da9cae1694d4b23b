// The Modelfile parser: anything it accepts formats back into a Modelfile that parses to the same thing.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "modelfile/modelfile.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  vatic::Modelfile m;
  try {
    m = vatic::parse_modelfile(text, "/nonexistent-fuzz-base");
  } catch (const vatic::InvalidInput&) {
    return 0;
  }
  std::string again = vatic::format_modelfile(m);
  vatic::Modelfile back;
  try {
    back = vatic::parse_modelfile(again, "/nonexistent-fuzz-base");
  } catch (const vatic::InvalidInput&) {
    std::abort();  // a Modelfile we wrote must parse
  }
  if (!(back == m)) std::abort();
  return 0;
}
