#pragma once
// A small JSON Schema validator for the grammar tests (the keywords the test schemas use), independent of the
// grammar compiler: it says whether a value the grammar produced really is valid.
#include <cmath>
#include <regex>
#include <string>

#include "util/json.h"

namespace vatic::schema_check {

inline bool utf8_length_ok(const std::string& s, const ordered_json& schema) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  if (schema.contains("minLength") && n < schema["minLength"].get<size_t>()) return false;
  if (schema.contains("maxLength") && n > schema["maxLength"].get<size_t>()) return false;
  return true;
}

inline bool valid(const ordered_json& v, const ordered_json& s, const ordered_json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"].get<std::string>();
    return valid(v, root.at(ordered_json::json_pointer(ref.substr(1))), root);
  }
  if (s.contains("anyOf")) {
    bool any = false;
    for (const auto& a : s["anyOf"]) any |= valid(v, a, root);
    if (!any) return false;
  }
  if (s.contains("oneOf")) {
    int n = 0;
    for (const auto& a : s["oneOf"]) n += valid(v, a, root);
    if (n != 1) return false;
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum")) {
    bool in = false;
    for (const auto& e : s["enum"]) in |= v == e;
    if (!in) return false;
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_string())
      types.push_back(s["type"].get<std::string>());
    else
      for (const auto& t : s["type"]) types.push_back(t.get<std::string>());
    bool ok = false;
    for (const auto& t : types)
      ok |= (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
            (t == "integer" && v.is_number() && std::floor(v.get<double>()) == v.get<double>()) ||
            (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
            (t == "object" && v.is_object()) || (t == "array" && v.is_array());
    if (!ok) return false;
  }
  if (v.is_string()) {
    const std::string str = v.get<std::string>();
    if (!utf8_length_ok(str, s)) return false;
    if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>())))
      return false;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
  }
  if (v.is_array()) {
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("items"))
      for (const auto& x : v)
        if (!valid(x, s["items"], root)) return false;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) return false;
    const ordered_json props = s.value("properties", ordered_json::object());
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        if (!valid(it.value(), props[it.key()], root)) return false;
      } else if (s.contains("additionalProperties") && s["additionalProperties"] == false) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace vatic::schema_check
