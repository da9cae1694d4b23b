#pragma once
#include <climits>

namespace vatic {

// An integer setting from the environment: `fallback` when `name` is unset or empty. A value that is not a whole
// decimal integer in [lo, hi] is ignored with a warning on stderr naming the variable, and `fallback` returned.
int env_int(const char* name, int fallback, int lo = 0, int hi = INT_MAX);

}  // namespace vatic
