#pragma once
// The host's memory bandwidth, measured three ways (see MemoryBandwidth): a dot-product sweep, the f32 matvec
// kernel that reads weights in decode, and memcpy; every OpenMP thread takes a share of the arrays.
#include "backend/backend.h"

namespace vatic::cpu {

MemoryBandwidth measure_bandwidth(size_t bytes, int reps);

}  // namespace vatic::cpu
