// Request bodies as the API handlers take them: parse_body (depth limit, object check), the typed field readers,
// keep_alive, and option merging with its type and range checks. Everything refused must be an HttpError (a 400).
#include <cstdint>
#include <string>

#include "server/options.h"
#include "server/util.h"

using namespace vatic;
using namespace vatic::server;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    ordered_json body = parse_body(text);
    (void)opt_string(body, "model");
    (void)opt_bool(body, "stream");
    (void)opt_number(body, "temperature");
    (void)opt_int(body, "top_logprobs");
    if (auto it = body.find("keep_alive"); it != body.end()) {
      try {
        parse_keep_alive(*it);
      } catch (const InvalidInput&) {
      }
    }
    const ordered_json* opts = body.contains("options") ? &body["options"] : nullptr;
    int64_t num_ctx = 0;
    json params = {{"temperature", 0.7}, {"stop", json::array({"</s>"})}};
    json merged = merge_options(params, opts, &num_ctx);
    (void)dump(merged);
    (void)dump(body);
  } catch (const HttpError&) {
  }
  return 0;
}
