#include "backend/backend.h"

#include <chrono>

namespace vatic {

MemoryBandwidth Backend::measure_bandwidth(size_t bytes, int reps) {
  using Clock = std::chrono::steady_clock;
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  Tensor a = empty({n}, DType::F32), b = empty({n}, DType::F32);
  fill(a, 1.0f);
  copy(a, b);
  synchronize();
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    const auto t0 = Clock::now();
    copy(a, b);
    synchronize();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  MemoryBandwidth bw;
  bw.bytes = bytes;
  bw.copy_gbs = 2.0 * static_cast<double>(bytes) / best / 1e9;
  bw.read_gbs = bw.matvec_gbs = bw.streams_gbs = bw.copy_gbs;
  bw.machine = description();
  return bw;
}

}  // namespace vatic
