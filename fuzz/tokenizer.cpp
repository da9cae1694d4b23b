// tokenizer.json loading (the fast vocab/merges reader and the nlohmann path, every pipeline component), then a
// round of encoding and decoding with whatever loaded.
#include <cstdint>
#include <string_view>

#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    vatic::Tokenizer t = vatic::Tokenizer::from_json(text);
    auto ids = t.encode("Hello world! 123 <b>ünïcödé</b>\n\t  x");
    (void)t.decode(ids);
  } catch (const vatic::Error&) {
  } catch (const vatic::json::exception&) {
  }
  return 0;
}
