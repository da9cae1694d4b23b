#include "server/options.h"

#include <cmath>
#include <string>

#include "server/util.h"

namespace vatic::server {

namespace {

// Options the runner understands; the rest of ollama's options are accepted and ignored.
const char* const kNumberOptions[] = {"temperature",    "top_k",           "top_p",          "min_p",
                                      "repeat_penalty", "repeat_last_n",   "presence_penalty", "frequency_penalty",
                                      "seed",           "num_predict",     "draft_num_predict", "draft_depth"};

struct Range {
  const char* name;
  bool integer;
  double lo, hi;
};
constexpr double kI32Max = 2147483647.0, kI64Lim = 9.2e18;
// Numeric options and the values they accept. Integers must be whole numbers in range (a value the runner would
// wrap, such as 4294967299 for num_predict, is refused); reals must be finite.
const Range kRanges[] = {
    {"temperature", false, 0, 1e6},        {"top_k", true, 0, kI32Max},
    {"top_p", false, 0, 1},                {"min_p", false, 0, 1},
    {"repeat_penalty", false, 0, 1e6},     {"repeat_last_n", true, -1, kI32Max},
    {"presence_penalty", false, -1e6, 1e6}, {"frequency_penalty", false, -1e6, 1e6},
    {"seed", true, -kI64Lim, kI64Lim},     {"num_predict", true, -2, kI32Max},
    {"draft_num_predict", true, -1, 32},   {"draft_depth", true, -1, 32},
    {"num_ctx", true, 0, kI32Max},         {"typical_p", false, 0, 1},
    {"num_keep", true, -1, kI32Max},       {"num_batch", true, 0, kI32Max},
    {"num_gpu", true, -1, kI32Max},        {"main_gpu", true, 0, kI32Max},
    {"num_thread", true, 0, kI32Max},      {"tfs_z", false, -1e6, 1e6},
    {"mirostat", true, 0, 2},              {"mirostat_tau", false, -1e6, 1e6},
    {"mirostat_eta", false, -1e6, 1e6},
};

void check_range(const std::string& key, const ordered_json& v) {
  for (const auto& r : kRanges) {
    if (key != r.name) continue;
    if (!v.is_number()) throw HttpError(400, fmt::format("invalid option \"{}\": must be a number, got {}", key, dump(v)));
    bool whole = v.is_number_integer();
    double d = v.get<double>();
    if (v.is_number_float()) {
      if (!std::isfinite(d)) throw HttpError(400, fmt::format("invalid option \"{}\": must be finite", key));
      whole = d == std::floor(d);
    }
    if (r.integer && !whole)
      throw HttpError(400, fmt::format("invalid option \"{}\": must be an integer, got {}", key, dump(v)));
    bool in_range = d >= r.lo && d <= r.hi;
    if (v.is_number_unsigned()) in_range = static_cast<double>(v.get<uint64_t>()) <= r.hi;
    if (!in_range)
      throw HttpError(400, r.integer ? fmt::format("invalid option \"{}\": {} is out of range ({} to {})", key,
                                                   dump(v), static_cast<int64_t>(r.lo), static_cast<int64_t>(r.hi))
                                     : fmt::format("invalid option \"{}\": {} is out of range ({} to {})", key,
                                                   dump(v), r.lo, r.hi));
    return;
  }
}

}  // namespace

json merge_options(const json& params, const ordered_json* request, int64_t* num_ctx) {
  json out = json::object();
  for (const auto& [k, v] : params.items()) out[k] = v;
  if (request && !request->is_null()) {
    if (!request->is_object()) throw HttpError(400, "options must be a JSON object");
    for (const auto& [k, v] : request->items()) {
      if (v.is_null()) continue;
      check_range(k, v);
      if (k == "stop") {
        if (v.is_string()) {
          out["stop"] = json::array({v.get<std::string>()});
          continue;
        }
        if (!v.is_array()) throw HttpError(400, "invalid option \"stop\": must be a string or an array of strings");
        for (const auto& s : v)
          if (!s.is_string()) throw HttpError(400, "invalid option \"stop\": must be a string or an array of strings");
      }
      out[k] = json::parse(v.dump());
    }
  }
  if (num_ctx) {
    *num_ctx = 0;
    if (out.contains("num_ctx") && out["num_ctx"].is_number()) {
      double c = out["num_ctx"].get<double>();
      if (c < 0) throw HttpError(400, "invalid option \"num_ctx\": must be positive");
      *num_ctx = static_cast<int64_t>(c);
      if (*num_ctx > 0 && *num_ctx < 16) *num_ctx = 16;
    }
  }
  json runner = json::object();
  for (const char* n : kNumberOptions)
    if (out.contains(n)) runner[n] = out[n];
  if (out.contains("stop")) runner["stop"] = out["stop"];
  if (out.contains("ignore_eos") && out["ignore_eos"].is_boolean()) runner["ignore_eos"] = out["ignore_eos"];
  return runner;
}

}  // namespace vatic::server
