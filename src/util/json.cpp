#include "util/json.h"

#include "util/error.h"

namespace vatic {

int json_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); i++) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        i++;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > limit) return deepest;
      }
    } else if (c == ']' || c == '}') {
      if (depth > 0) depth--;
    }
  }
  return deepest;
}

std::string json_error_text(const std::exception& e) {
  std::string what = e.what();
  if (what.rfind("[json.exception.", 0) == 0)
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
  if (auto p = what.find("; last read: "); p != std::string::npos) what = what.substr(0, p);
  return what;
}

namespace {

template <typename J>
J parse_limited(std::string_view text, const std::string& what, int max_depth) {
  if (json_depth(text, max_depth) > max_depth)
    throw InvalidInput(fmt::format("{}: JSON nested deeper than {} levels", what, max_depth));
  try {
    return J::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw InvalidInput(fmt::format("{}: invalid JSON: {}", what, json_error_text(e)));
  }
}

}  // namespace

json parse_json(std::string_view text, const std::string& what, int max_depth) {
  return parse_limited<json>(text, what, max_depth);
}

ordered_json parse_ordered_json(std::string_view text, const std::string& what, int max_depth) {
  return parse_limited<ordered_json>(text, what, max_depth);
}

}  // namespace vatic
