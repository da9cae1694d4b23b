#pragma once
// Small helpers shared by the server's API handlers.
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "util/error.h"
#include "util/json.h"

namespace vatic::server {

using Clock = std::chrono::steady_clock;

// An error with the HTTP status it maps to.
class HttpError : public Error {
 public:
  HttpError(int status, const std::string& msg) : Error(msg), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

inline constexpr const char* kBusyMessage = "server busy, please try again. maximum pending requests exceeded";

// keep_alive: a Go-style duration ("5m", "1h30m", "30s", "500ms", "-1m"), a number of seconds (as a number or a
// string), 0 = unload when idle, negative = forever. Returns seconds (negative = forever). Throws InvalidInput.
double parse_keep_alive(const ordered_json& value);
inline constexpr double kForeverSeconds = 100.0 * 365 * 24 * 3600;  // longer durations mean "forever"
double parse_duration_text(const std::string& text);  // same rules, for environment variables

// RFC 3339 with nanoseconds, UTC: 2024-05-01T12:00:00.123456789Z.
std::string rfc3339_now();
std::string rfc3339(std::chrono::system_clock::time_point t);
int64_t unix_now();
// A file time (e.g. a model's modification time) on the system clock.
std::chrono::system_clock::time_point to_system_time(std::filesystem::file_time_type t);

// "2.3M", "1.2B" (ollama's parameter_size).
std::string human_parameters(int64_t n);

int64_t to_ns(double seconds);

// Parses a request body as a JSON object; throws HttpError 400 with a clear message.
ordered_json parse_body(const std::string& body);

// Reads an optional field with a type check (HttpError 400 naming the field when the type is wrong).
std::optional<std::string> opt_string(const ordered_json& j, const char* key);
std::optional<bool> opt_bool(const ordered_json& j, const char* key);
std::optional<double> opt_number(const ordered_json& j, const char* key);
std::optional<int64_t> opt_int(const ordered_json& j, const char* key);

bool env_flag(const char* name);
std::string random_hex(size_t n);

std::string dump(const ordered_json& j);
std::string dump(const json& j);

}  // namespace vatic::server
