#include "util/env.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace vatic {

int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (end == v || *end || errno == ERANGE || x < lo || x > hi) {
    std::fprintf(stderr, "warning: ignoring %s=%s (expected an integer from %d to %d)\n", name, v, lo, hi);
    return fallback;
  }
  return static_cast<int>(x);
}

}  // namespace vatic
