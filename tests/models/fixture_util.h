#pragma once
// Helpers for tests that compare against the reference fixtures (tests/fixtures/models, made with transformers).
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/generator.h"
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

// Decodes `n` tokens after `prompt` on a fresh sequence (EOS ignored): greedy unless `sampling` says otherwise,
// speculative with `drafter` at `depth` (-1 = adaptive, 0 = plain); `clock` replaces the depth policy's clock.
inline std::vector<int32_t> decode(LanguageModel& lm, Drafter* drafter, const std::vector<int32_t>& prompt, int n,
                                   int depth, GenerateStats* stats = nullptr, int max_depth = 4,
                                   std::function<double()> clock = nullptr) {
  Generator gen(lm, drafter);
  if (clock) gen.set_clock(std::move(clock));
  GenerateOptions o;
  o.max_tokens = n;
  o.draft_depth = depth;
  o.max_draft_depth = max_depth;
  o.ignore_eos = true;
  auto st = lm.new_state();
  std::vector<int32_t> out;
  GenerateStats s = gen.generate(*st, prompt, o, [&](const TokenEvent& e) {
    out.push_back(e.token);
    return true;
  });
  if (stats) *stats = s;
  return out;
}

}  // namespace vatic::testing
