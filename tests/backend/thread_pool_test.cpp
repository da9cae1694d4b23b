// The CPU backend's thread pool (src/backend/cpu/parallel.h): every part of an op runs once and the op returns
// after all of them, over many consecutive ops, with workers spinning or asleep, nested ops and several callers.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "backend/cpu/parallel.h"

namespace vatic::cpu {
namespace {

// Runs `parts` parts on the pool and checks each ran exactly once before run() returned.
void expect_each_part_once(ThreadPool& pool, int64_t parts) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(parts));
  for (auto& s : seen) s.store(0, std::memory_order_relaxed);
  pool.run(parts, [&](int64_t p) { seen[static_cast<size_t>(p)].fetch_add(1, std::memory_order_relaxed); });
  for (int64_t p = 0; p < parts; p++) ASSERT_EQ(seen[static_cast<size_t>(p)].load(), 1) << "part " << p << " of " << parts;
}

TEST(ThreadPool, EveryPartOnceOverManyOps) {
  for (int threads : {1, 2, 3, 4, 8}) {
    SCOPED_TRACE(threads);
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int op = 0; op < 20000; op++) expect_each_part_once(pool, 1 + op % 11);
    expect_each_part_once(pool, 0);
    expect_each_part_once(pool, ThreadPool::kMaxParts);
  }
}

TEST(ThreadPool, PlainDataWrittenInPartsIsVisibleAfterRun) {
  ThreadPool pool(4);
  std::vector<int64_t> out(1000);
  for (int op = 0; op < 2000; op++) {
    pool.run(4, [&](int64_t p) {
      for (int64_t i = p * 250; i < (p + 1) * 250; i++) out[static_cast<size_t>(i)] = i * op;
    });
    for (int64_t i = 0; i < 1000; i += 97) ASSERT_EQ(out[static_cast<size_t>(i)], i * op);
  }
}

TEST(ThreadPool, WakesSleepingWorkers) {
  ThreadPool pool(2);
  for (int op = 0; op < 20; op++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past the spin: the worker sleeps
    // Whichever part starts first waits for the other to start on the other thread.
    std::atomic<int> started{0};
    std::atomic<bool> timed_out{false};
    pool.run(2, [&](int64_t) {
      started.fetch_add(1);
      const auto t0 = std::chrono::steady_clock::now();
      while (started.load() < 2)
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
          timed_out = true;
          return;
        }
    });
    ASSERT_FALSE(timed_out) << "op " << op << ": the worker did not wake";
  }
}

TEST(ThreadPool, WaitsForSlowWorkerParts) {
  ThreadPool pool(2);
  for (int op = 0; op < 10; op++) {
    std::atomic<int> finished{0};
    pool.run(2, [&](int64_t p) {
      if (p == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));  // past the caller's spin
      finished.fetch_add(1);
    });
    EXPECT_EQ(finished.load(), 2);
  }
}

TEST(ThreadPool, NestedOpsRunInsideTheirPart) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> seen(16);
  for (auto& s : seen) s.store(0);
  pool.run(4, [&](int64_t p) {
    pool.run(4, [&](int64_t q) { seen[static_cast<size_t>(p * 4 + q)].fetch_add(1); });
  });
  for (auto& s : seen) EXPECT_EQ(s.load(), 1);
}

TEST(ThreadPool, SeveralCallersAtOnce) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; c++)
    callers.emplace_back([&] {
      for (int op = 0; op < 3000; op++) {
        std::vector<int> seen(7, 0);  // plain ints: each part writes its own
        pool.run(7, [&](int64_t p) { seen[static_cast<size_t>(p)]++; });
        for (int v : seen) ASSERT_EQ(v, 1);
        total.fetch_add(7);
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 3 * 3000 * 7);
}

TEST(ThreadPool, ParallelForVisitsEachIndexOnce) {
  for (bool big : {false, true})
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1001}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      for (auto& s : seen) s.store(0);
      parallel_for(n, big, [&](int64_t i) { seen[static_cast<size_t>(i)].fetch_add(1); });
      for (int64_t i = 0; i < n; i++) ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << n << " " << big;
      // parallel_ranges: contiguous ranges, in order, covering [0, n), one per thread at most.
      std::vector<std::pair<int64_t, int64_t>> ranges(static_cast<size_t>(pool().threads()) + 1, {-1, -1});
      std::atomic<int> count{0};
      parallel_ranges(n, big, [&](int64_t i0, int64_t i1) {
        ranges[static_cast<size_t>(count.fetch_add(1))] = {i0, i1};
      });
      ASSERT_LE(count.load(), pool().threads());
      ranges.resize(static_cast<size_t>(count.load()));
      std::sort(ranges.begin(), ranges.end());
      int64_t at = 0;
      for (auto [i0, i1] : ranges) {
        EXPECT_EQ(i0, at);
        EXPECT_LT(i0, i1);
        at = i1;
      }
      EXPECT_EQ(at, n);
    }
}

}  // namespace
}  // namespace vatic::cpu
