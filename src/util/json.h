#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace vatic {
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Deepest nesting of arrays and objects accepted in JSON from outside (request bodies, config.json,
// tokenizer.json, Modelfile values). Real documents stay below 20; a deeper one is refused before parsing, so
// neither parsing nor anything recursive afterwards (dump, copies, comparisons) can exhaust the stack.
inline constexpr int kMaxJsonDepth = 128;

// The nesting depth of `text` (0 for a scalar), scanning at most until it passes `limit`. Strings are skipped;
// malformed text is left to the parser.
int json_depth(std::string_view text, int limit = kMaxJsonDepth);

// Parse with the depth limit. Throws InvalidInput "WHAT: ..." (for a parse error, nesting too deep); the message
// gives the position but never quotes the text.
json parse_json(std::string_view text, const std::string& what, int max_depth = kMaxJsonDepth);
ordered_json parse_ordered_json(std::string_view text, const std::string& what, int max_depth = kMaxJsonDepth);

// nlohmann's parse error without its "[json.exception...]" prefix and without the "last read: '...'" excerpt of
// the input (which would echo file contents back to a client).
std::string json_error_text(const std::exception& e);

}  // namespace vatic
