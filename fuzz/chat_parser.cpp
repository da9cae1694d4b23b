// The chat output parsers (thinking, tool calls) on arbitrary model output, fed in arbitrary splits: no crash, and
// the same result whatever the split.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "chat/format.h"
#include "chat/parser.h"
#include "util/error.h"

namespace {

std::string flatten(const vatic::chat::ParsedChunk& c) {
  std::string s = "C" + c.content + "T" + c.thinking;
  for (const auto& t : c.tool_calls)
    s += "F" + t.name + t.arguments.dump(-1, ' ', false, vatic::ordered_json::error_handler_t::replace);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const char* names[] = {"gemma4", "glm-4.7"};
  vatic::chat::ParserOptions opts;
  opts.starts_in_thinking = data[0] & 1;
  if (data[0] & 2) opts.think = (data[0] & 4) != 0;
  const char* name = names[(data[0] >> 3) & 1];
  const size_t step = 1 + data[1] % 7;
  std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  try {
    auto whole = vatic::chat::make_parser(name, opts);
    vatic::chat::ParsedChunk a = whole->feed(text);
    a.append(whole->finish());
    auto pieces = vatic::chat::make_parser(name, opts);
    vatic::chat::ParsedChunk b;
    for (size_t i = 0; i < text.size(); i += step) b.append(pieces->feed(text.substr(i, step)));
    b.append(pieces->finish());
    if (flatten(a) != flatten(b)) std::abort();
  } catch (const vatic::InvalidInput&) {
  }
  return 0;
}
