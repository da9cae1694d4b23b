#pragma once
// Request options: ollama's `options` object checked (types, ranges) and merged over the model's PARAMETERs into
// what the runner reads. Pure JSON work, so the fuzz targets can drive it directly.
#include <cstdint>

#include "util/json.h"

namespace vatic::server {

// Merges request options over the model's PARAMETERs into runner options, checking types and ranges (HttpError
// 400: an integer option the runner would wrap, such as num_predict 4294967299, is refused). Sets num_ctx.
json merge_options(const json& params, const ordered_json* request_options, int64_t* num_ctx);

}  // namespace vatic::server
