#include "store/import_pipeline.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

namespace vatic::store_detail {

int import_threads() {
  if (const char* e = std::getenv("VATIC_IMPORT_THREADS")) {
    int n = std::atoi(e);
    if (n >= 1 && n <= 64) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(hw, 1u, 8u));
}

void run_parallel(const std::vector<uint64_t>& weights, int threads, const std::function<void(size_t)>& job) {
  const size_t n = weights.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return weights[a] > weights[b]; });
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first;
  std::mutex mu;
  auto worker = [&] {
    for (;;) {
      if (failed.load()) return;
      size_t k = next.fetch_add(1);
      if (k >= n) return;
      try {
        job(order[k]);
      } catch (...) {
        std::lock_guard<std::mutex> l(mu);
        if (!first) first = std::current_exception();
        failed = true;
        return;
      }
    }
  };
  const size_t extra = std::min<size_t>(n, static_cast<size_t>(std::max(threads, 1))) - (n ? 1 : 0);
  std::vector<std::thread> pool;
  pool.reserve(extra);
  try {
    for (size_t i = 0; i < extra; ++i) pool.emplace_back(worker);
  } catch (...) {
    // could not start a thread: the ones started and this one do the work
  }
  worker();
  for (auto& t : pool) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace vatic::store_detail
