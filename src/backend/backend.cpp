#include "backend/backend.h"

#include <chrono>
#include <limits>
#include <map>

#include <fmt/format.h>

namespace vatic {

std::vector<std::pair<std::string, double>> profile_table(const std::vector<std::pair<std::string, double>>& samples) {
  std::map<std::string, std::pair<double, int>> by_name;
  for (const auto& [name, seconds] : samples) {
    auto& e = by_name[name];
    e.first += seconds;
    e.second++;
  }
  std::vector<std::pair<std::string, double>> r;
  for (const auto& [name, v] : by_name) r.push_back({fmt::format("{} ×{}", name, v.second), v.first});
  return r;
}

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

void Backend::masked_logits(const Tensor& y, const Linear& table, const Tensor& groups, const Tensor& clusters,
                            const Tensor& logits) {
  const int64_t K = table.in_features(), V = table.out_features(), C = groups.dim(0), per = groups.dim(1);
  const int64_t k = clusters.numel();
  VATIC_CHECK(y.dtype() == DType::F32 && y.numel() == K && y.is_contiguous() && groups.ndim() == 2 &&
                  groups.dtype() == DType::I32 && C * per == V && clusters.dtype() == DType::I32 &&
                  logits.dtype() == DType::F32 && logits.numel() == V && logits.is_contiguous(),
              "masked_logits: y {} table [{}, {}] groups {} clusters {} logits {}", y.describe(), V, K,
              groups.describe(), clusters.describe(), logits.describe());
  Tensor ids = empty({k, per}, DType::I32);
  gather_rows(groups, clusters.reshape({k}), ids);
  Tensor flat = ids.reshape({k * per});
  Tensor rows = empty({k * per, K}, DType::F32);
  embedding(table, flat, 1.0f, rows);
  Tensor sel = empty({1, k * per}, DType::F32);
  Linear w;
  w.weight = rows;
  w.computed = true;
  matmul(y.reshape({1, K}), w, sel, false);
  fill(logits, -std::numeric_limits<float>::infinity());
  scatter(sel.reshape({k * per}), flat, logits);
}

}  // namespace vatic
