#pragma once
// Helpers for tests that compare against the reference fixtures (tests/fixtures/models, made with transformers).
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "ops/ops.h"
#include "util/files.h"
#include "util/json.h"

namespace vatic::testing {

inline std::filesystem::path fixtures() { return VATIC_FIXTURES_DIR; }
inline std::filesystem::path model_dir(const std::string& name) { return fixtures() / "models" / name; }
inline const json& fixture_index() {
  static json j = json::parse(read_file(fixtures() / "models" / "index.json"));
  return j;
}
inline std::vector<int32_t> ints(const json& a) { return a.get<std::vector<int32_t>>(); }

// ‖a − b‖ / ‖b‖ over all elements.
inline double rel_error(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace vatic::testing
