#pragma once
// The import pipeline of `vatic create`: tensor groups are read, quantized, hashed and written as blobs by a few
// worker threads at once, so the cores share the work (hashing, quantizing and the kernel's page-cache copies) and
// one blob's fsync overlaps the next one's work. Only the groups in flight are in memory (a quantized group's
// output; unquantized tensors are written straight from the mapped source file).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace vatic::store_detail {

// Worker threads for an import: VATIC_IMPORT_THREADS if set (1..64), else the hardware threads, at most 8.
int import_threads();

// Runs job(i) for every i in [0, weights.size()) on up to `threads` threads (the calling thread is one of them),
// heaviest weight first so that one large job does not run alone at the end. After a job throws, no new job
// starts; the first exception is rethrown once the running jobs have finished.
void run_parallel(const std::vector<uint64_t>& weights, int threads, const std::function<void(size_t)>& job);

}  // namespace vatic::store_detail
