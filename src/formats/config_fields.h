#pragma once
// Typed access to config.json fields with errors naming the file and the field (InvalidInput).
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/json.h"

namespace vatic {

inline const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "a list";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a number";
    default:
      return "an integer";
  }
}

// A value for an error message; containers are only named (dumping untrusted nesting could recurse deeply).
inline std::string brief(const json& v) {
  if (v.is_structured()) return "";
  std::string d = v.dump();
  if (d.size() > 80) d = d.substr(0, 77) + "...";
  return " " + d;
}

class Fields {
 public:
  Fields(const json& obj, std::string source, std::string prefix = "")
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

  std::string field(const std::string& key) const { return prefix_ + key; }
  const std::string& source() const { return source_; }

  [[noreturn]] void error(const std::string& key, const std::string& msg) const {
    throw InvalidInput(fmt::format("invalid config {}: field {}: {}", source_, field(key), msg));
  }
  [[noreturn]] void missing(const std::string& key) const {
    throw InvalidInput(fmt::format("invalid config {}: missing field {}", source_, field(key)));
  }

  // Present and not null.
  bool has(const std::string& key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && !it->is_null();
  }
  const json& at(const std::string& key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) missing(key);
    return *it;
  }

  int64_t to_int(const std::string& key, const json& v) const {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
    }
    error(key, fmt::format("expected an integer, got {}{}", type_name(v), brief(v)));
  }
  int64_t i64(const std::string& key) const { return to_int(key, at(key)); }
  int64_t i64(const std::string& key, int64_t def) const { return has(key) ? i64(key) : def; }
  std::optional<int64_t> opt_i64(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return i64(key);
  }
  // Integer in [lo, hi].
  int64_t ranged(const std::string& key, int64_t lo, int64_t hi) const {
    int64_t v = i64(key);
    if (v < lo || v > hi) error(key, fmt::format("{} is out of range [{}, {}]", v, lo, hi));
    return v;
  }
  int64_t ranged(const std::string& key, int64_t lo, int64_t hi, int64_t def) const {
    return has(key) ? ranged(key, lo, hi) : def;
  }
  int positive_int(const std::string& key) const {
    return static_cast<int>(ranged(key, 1, std::numeric_limits<int32_t>::max()));
  }
  int positive_int(const std::string& key, int def) const { return has(key) ? positive_int(key) : def; }
  int64_t positive_i64(const std::string& key) const {
    return ranged(key, 1, std::numeric_limits<int64_t>::max() / 4);
  }
  int nonneg_int(const std::string& key, int def) const {
    return static_cast<int>(ranged(key, 0, std::numeric_limits<int32_t>::max(), def));
  }

  double num(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_number()) error(key, fmt::format("expected a number, got {}{}", type_name(v), brief(v)));
    double d = v.get<double>();
    if (!std::isfinite(d)) error(key, "expected a finite number");
    return d;
  }
  double num(const std::string& key, double def) const { return has(key) ? num(key) : def; }
  double positive_num(const std::string& key, double def) const {
    double d = num(key, def);
    if (!(d > 0)) error(key, fmt::format("expected a positive number, got {}", d));
    return d;
  }

  bool boolean(const std::string& key, bool def) const {
    if (!has(key)) return def;
    const json& v = at(key);
    if (!v.is_boolean()) error(key, fmt::format("expected true or false, got {}{}", type_name(v), brief(v)));
    return v.get<bool>();
  }
  std::string str(const std::string& key, const std::string& def) const {
    if (!has(key)) return def;
    const json& v = at(key);
    if (!v.is_string()) error(key, fmt::format("expected a string, got {}{}", type_name(v), brief(v)));
    return v.get<std::string>();
  }
  // An integer or a list of integers (eos_token_id).
  std::vector<int64_t> int_list(const std::string& key) const {
    std::vector<int64_t> r;
    if (!has(key)) return r;
    const json& v = at(key);
    if (v.is_array()) {
      for (const auto& e : v) r.push_back(to_int(key, e));
    } else {
      r.push_back(to_int(key, v));
    }
    for (auto id : r)
      if (id < 0) error(key, fmt::format("token id {} is negative", id));
    return r;
  }
  const json* object(const std::string& key) const {
    if (!has(key)) return nullptr;
    const json& v = at(key);
    if (!v.is_object()) error(key, fmt::format("expected an object, got {}{}", type_name(v), brief(v)));
    return &v;
  }
  const json& obj() const { return obj_; }

 private:
  const json& obj_;
  std::string source_;
  std::string prefix_;
};

}  // namespace vatic
