#pragma once
// Errors that cross a boundary (file formats, API, CLI) carry a message a user can act on.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace vatic {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Thrown for malformed user input (bad files, bad requests): maps to HTTP 400 / CLI exit 1.
class InvalidInput : public Error {
 public:
  using Error::Error;
};

// Thrown when a named thing does not exist: maps to HTTP 404.
class NotFound : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

#define VATIC_CHECK(cond, ...)                                       \
  do {                                                               \
    if (!(cond)) throw ::vatic::Error(::fmt::format(__VA_ARGS__));   \
  } while (0)

}  // namespace vatic
