#include "backend/cpu/bandwidth.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/parallel.h"
#include "backend/cpu/simd.h"

namespace vatic::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto c = line.find(':');
      if (c != std::string::npos) return line.substr(c + 2);
    }
  return "unknown CPU";
}

// Reads [p, p + n) as four sequential streams, one over each quarter, a cache line of each in turn with a
// prefetch 2 KB ahead: several streams far apart keep more of DRAM's latency covered than one (a Zen 5 core reads
// about 20 GB/s as one stream and 35-39 GB/s as four), which is how decode reads a large matrix where
// decode_streams() is four (gemm_impl.h; a Zen 4 core read 10 GB/s this way, and decode there reads two).
// n: 64-bit words, read as such (memcpy: the array holds floats).
uint64_t read_streams(const char* p, int64_t n) {
  constexpr int S = 4, L = 8;  // streams; 64-bit words per cache line
  const int64_t per = n / S / L * L;
  auto word = [&](int64_t i) {
    uint64_t v;
    std::memcpy(&v, p + i * 8, 8);
    return v;
  };
  uint64_t acc[S][L] = {};
  for (int64_t i = 0; i < per; i += L)
    for (int s = 0; s < S; s++) {
      __builtin_prefetch(p + (s * per + i) * 8 + 2048);
      for (int j = 0; j < L; j++) acc[s][j] += word(s * per + i + j);
    }
  uint64_t total = 0;
  for (int s = 0; s < S; s++)
    for (int j = 0; j < L; j++) total += acc[s][j];
  for (int64_t i = S * per; i < n; i++) total += word(i);
  return total;
}

}  // namespace

MemoryBandwidth measure_bandwidth(size_t bytes, int reps) {
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  std::unique_ptr<float[]> a(new float[n]), b(new float[n]);
  parallel_ranges(n, true, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; i++) {
      a[i] = static_cast<float>(i & 1023) * 1e-3f;
      b[i] = 0.0f;
    }
  });
  const Kernels& k = kernels();
  MemoryBandwidth bw;
  bw.bytes = bytes;
  bw.machine = fmt::format("{}, {} kernels, {} decode streams, {} threads", cpu_model(), k.isa, decode_streams(),
                           pool().threads());
  volatile float sink = 0;
  // The array as [n / 2048, 2048] rows, times one vector, through the f32 matvec kernel.
  const int64_t rows = n / 2048;
  std::vector<float> xv(2048, 1.0f), yv(static_cast<size_t>(rows));
  GemmArgs g;
  g.x = xv.data();
  g.ldx = 2048;
  g.T = 1;
  g.w = a.get();
  g.ldw = 2048;
  g.K = 2048;
  g.y = yv.data();
  g.ldy = rows;
  for (int r = 0; r < reps; r++) {
    std::vector<float> part(static_cast<size_t>(pool().threads()), 0.0f);  // one sum per range
    std::atomic<int> ranges{0};
    auto t0 = Clock::now();
    parallel_ranges(n, true, [&](int64_t s, int64_t e) {
      part[static_cast<size_t>(ranges.fetch_add(1, std::memory_order_relaxed))] =
          k.dot_f32(a.get() + s, a.get() + s, e - s);
    });
    float total = 0;
    for (float v : part) total += v;
    double dt = seconds_since(t0);
    sink = sink + total;
    bw.read_gbs = std::max(bw.read_gbs, static_cast<double>(bytes) / dt / 1e9);
    t0 = Clock::now();
    parallel_ranges(n, true, [&](int64_t s, int64_t e) {
      std::memcpy(b.get() + s, a.get() + s, (e - s) * sizeof(float));
    });
    dt = seconds_since(t0);
    bw.copy_gbs = std::max(bw.copy_gbs, 2.0 * static_cast<double>(bytes) / dt / 1e9);
    t0 = Clock::now();
    parallel_ranges(rows, true, [&](int64_t s, int64_t e) { k.gemm_f32(g, s, e); });
    dt = seconds_since(t0);
    bw.matvec_gbs = std::max(bw.matvec_gbs, static_cast<double>(rows) * 2048 * 4 / dt / 1e9);
    const int64_t words = static_cast<int64_t>(bytes / sizeof(uint64_t));
    const char* aw = reinterpret_cast<const char*>(a.get());
    std::atomic<uint64_t> streams_sum{0};
    t0 = Clock::now();
    parallel_ranges(words, true, [&](int64_t s, int64_t e) {
      streams_sum.fetch_add(read_streams(aw + s * 8, e - s), std::memory_order_relaxed);
    });
    dt = seconds_since(t0);
    sink = sink + static_cast<float>(streams_sum.load() & 1);
    bw.streams_gbs = std::max(bw.streams_gbs, static_cast<double>(words) * sizeof(uint64_t) / dt / 1e9);
  }
  return bw;
}

}  // namespace vatic::cpu
