#include "server/util.h"

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <random>

namespace vatic::server {

double parse_duration_text(const std::string& text) {
  std::string s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(0, 1);
  if (s.empty()) throw InvalidInput("keep_alive: empty duration");
  // Whatever the spelling, a duration is finite; one longer than a century means "forever".
  auto bounded = [&](double v) {
    if (!std::isfinite(v)) throw InvalidInput(fmt::format("invalid duration \"{}\": must be finite", text));
    if (std::fabs(v) > kForeverSeconds) return -1.0;
    return v;
  };
  // A plain number is seconds (digits only: strtod would also take "nan", "inf" and hex floats).
  if (s.find_first_not_of("0123456789.+-eE") == std::string::npos) {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (end && *end == '\0') return bounded(v);
  }
  size_t i = 0;
  double sign = 1;
  if (s[i] == '-' || s[i] == '+') {
    if (s[i] == '-') sign = -1;
    i++;
  }
  if (s.substr(i) == "0") return 0;
  double total = 0;
  bool any = false;
  while (i < s.size()) {
    size_t start = i;
    while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) i++;
    if (start == i) throw InvalidInput(fmt::format("invalid duration \"{}\" (examples: \"5m\", \"1h30m\", \"30s\", 300)", text));
    double v = std::atof(s.substr(start, i - start).c_str());
    size_t ustart = i;
    while (i < s.size() && std::isalpha(static_cast<unsigned char>(s[i]))) i++;
    std::string unit = s.substr(ustart, i - ustart);
    double mult;
    if (unit == "h") mult = 3600;
    else if (unit == "m") mult = 60;
    else if (unit == "s") mult = 1;
    else if (unit == "ms") mult = 1e-3;
    else if (unit == "us" || unit == "µs") mult = 1e-6;
    else if (unit == "ns") mult = 1e-9;
    else
      throw InvalidInput(fmt::format("invalid duration \"{}\" (examples: \"5m\", \"1h30m\", \"30s\", 300)", text));
    total += v * mult;
    any = true;
  }
  if (!any) throw InvalidInput(fmt::format("invalid duration \"{}\"", text));
  return bounded(sign * total);
}

double parse_keep_alive(const ordered_json& value) {
  if (value.is_number()) {
    double v = value.get<double>();
    if (!std::isfinite(v)) throw InvalidInput("keep_alive must be finite");
    return std::fabs(v) > kForeverSeconds ? -1.0 : v;
  }
  if (value.is_string()) return parse_duration_text(value.get<std::string>());
  throw InvalidInput("keep_alive must be a duration string (\"5m\") or a number of seconds");
}

std::string rfc3339(std::chrono::system_clock::time_point t) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ns / 1000000000);
  long frac = static_cast<long>(ns % 1000000000);
  if (frac < 0) {
    frac += 1000000000;
    secs -= 1;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:09d}Z", buf, frac);
}

std::string rfc3339_now() { return rfc3339(std::chrono::system_clock::now()); }

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::chrono::system_clock::time_point to_system_time(std::filesystem::file_time_type t) {
  return std::chrono::time_point_cast<std::chrono::system_clock::duration>(
      std::chrono::system_clock::now() + (t - std::filesystem::file_time_type::clock::now()));
}

std::string human_parameters(int64_t n) {
  if (n >= 1000000000) return fmt::format("{:.1f}B", static_cast<double>(n) / 1e9);
  if (n >= 1000000) return fmt::format("{:.1f}M", static_cast<double>(n) / 1e6);
  if (n >= 1000) return fmt::format("{:.1f}K", static_cast<double>(n) / 1e3);
  return std::to_string(n);
}

int64_t to_ns(double seconds) { return static_cast<int64_t>(std::llround(seconds * 1e9)); }

ordered_json parse_body(const std::string& body) {
  if (body.empty()) throw HttpError(400, "missing request body");
  if (json_depth(body) > kMaxJsonDepth)
    throw HttpError(400, fmt::format("invalid JSON in request body: nested deeper than {} levels", kMaxJsonDepth));
  ordered_json j;
  try {
    j = ordered_json::parse(body);
  } catch (const std::exception& e) {
    throw HttpError(400, "invalid JSON in request body: " + json_error_text(e));
  }
  if (!j.is_object()) throw HttpError(400, "request body must be a JSON object");
  return j;
}

static const ordered_json* field(const ordered_json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> opt_string(const ordered_json& j, const char* key) {
  const auto* f = field(j, key);
  if (!f) return std::nullopt;
  if (!f->is_string()) throw HttpError(400, fmt::format("field \"{}\" must be a string", key));
  return f->get<std::string>();
}

std::optional<bool> opt_bool(const ordered_json& j, const char* key) {
  const auto* f = field(j, key);
  if (!f) return std::nullopt;
  if (!f->is_boolean()) throw HttpError(400, fmt::format("field \"{}\" must be a boolean", key));
  return f->get<bool>();
}

std::optional<double> opt_number(const ordered_json& j, const char* key) {
  const auto* f = field(j, key);
  if (!f) return std::nullopt;
  if (!f->is_number()) throw HttpError(400, fmt::format("field \"{}\" must be a number", key));
  return f->get<double>();
}

std::optional<int64_t> opt_int(const ordered_json& j, const char* key) {
  const auto* f = field(j, key);
  if (!f) return std::nullopt;
  if (!f->is_number()) throw HttpError(400, fmt::format("field \"{}\" must be an integer", key));
  if (f->is_number_integer() && !f->is_number_unsigned()) return f->get<int64_t>();
  if (f->is_number_unsigned()) {
    if (f->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw HttpError(400, fmt::format("field \"{}\" is out of range", key));
    return static_cast<int64_t>(f->get<uint64_t>());
  }
  double d = f->get<double>();
  if (!std::isfinite(d) || d != std::floor(d)) throw HttpError(400, fmt::format("field \"{}\" must be an integer", key));
  if (std::fabs(d) > 9.2e18) throw HttpError(400, fmt::format("field \"{}\" is out of range", key));
  return static_cast<int64_t>(d);
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  std::string s = v;
  return s != "0" && s != "false" && s != "FALSE" && s != "no";
}

std::string random_hex(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string s(n, '0');
  for (auto& c : s) c = digits[rng() & 15];
  return s;
}

std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace vatic::server
