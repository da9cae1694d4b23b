#include "runtime/executor.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace vatic {
namespace {

using namespace std::chrono_literals;

pid_t gettid_now() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

// A gate a job can block on until the test opens it.
struct Gate {
  std::promise<void> p;
  std::shared_future<void> f = p.get_future().share();
  void open() { p.set_value(); }
  void wait() const { f.wait(); }
};

TEST(Executor, RunReturnsValuesAndRunsOnTheExecutorThread) {
  Executor ex;
  EXPECT_FALSE(ex.on_executor_thread());
  EXPECT_NE(ex.thread_id(), std::this_thread::get_id());
  EXPECT_GT(ex.native_tid(), 0);
  EXPECT_NE(ex.native_tid(), gettid_now());
  EXPECT_EQ(ex.run([] { return 41 + 1; }), 42);
  EXPECT_EQ(ex.run([] { return std::string("hi"); }), "hi");
  bool ran = false;
  ex.run([&] { ran = true; });
  EXPECT_TRUE(ran);
  EXPECT_TRUE(ex.run([&] { return ex.on_executor_thread(); }));
  // Move-only results and captures.
  auto up = ex.run([p = std::make_unique<int>(7)]() mutable { return std::move(p); });
  EXPECT_EQ(*up, 7);
}

TEST(Executor, AllWorkRunsOnOneOsThread) {
  Executor ex;
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::set<pid_t> tids;
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; c++) {
    clients.emplace_back([&] {
      for (int i = 0; i < 50; i++) {
        auto [id, tid] = ex.run([] { return std::make_pair(std::this_thread::get_id(), gettid_now()); });
        std::lock_guard<std::mutex> lk(mu);
        ids.insert(id);
        tids.insert(tid);
      }
    });
  }
  for (auto& t : clients) t.join();
  ASSERT_EQ(ids.size(), 1u);
  ASSERT_EQ(tids.size(), 1u);
  EXPECT_EQ(*ids.begin(), ex.thread_id());
  EXPECT_EQ(*tids.begin(), ex.native_tid());
}

TEST(Executor, FifoOrderingAndOneAtATime) {
  Executor ex;
  Gate gate, blocker_started;
  auto blocker = ex.submit([&] {
    blocker_started.open();
    gate.wait();
  });
  blocker_started.wait();
  std::vector<int> order;
  std::atomic<int> concurrent{0}, max_concurrent{0};
  std::vector<Ticket<void>> tickets;
  for (int i = 0; i < 100; i++) {
    tickets.push_back(ex.submit([&, i] {
      int now = ++concurrent;
      max_concurrent = std::max(max_concurrent.load(), now);
      order.push_back(i);
      --concurrent;
    }));
  }
  EXPECT_EQ(ex.pending(), 100u);
  gate.open();
  for (auto& t : tickets) t.get();
  blocker.get();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; i++) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_EQ(max_concurrent.load(), 1);
}

struct CustomError : std::runtime_error {
  explicit CustomError(int c) : std::runtime_error("custom failure " + std::to_string(c)), code(c) {}
  int code;
};

TEST(Executor, ExceptionsReachTheCallerIntact) {
  Executor ex;
  try {
    ex.run([]() -> int { throw InvalidInput("tensor x is missing from /m/model.safetensors"); });
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_STREQ(e.what(), "tensor x is missing from /m/model.safetensors");
  }
  try {
    ex.run([] { throw CustomError(17); });
    FAIL();
  } catch (const CustomError& e) {
    EXPECT_EQ(e.code, 17);
    EXPECT_STREQ(e.what(), "custom failure 17");
  }
  auto t = ex.submit([] { throw std::out_of_range("index 9 of 3"); });
  EXPECT_THROW(
      {
        try {
          t.get();
        } catch (const std::out_of_range& e) {
          EXPECT_STREQ(e.what(), "index 9 of 3");
          throw;
        }
      },
      std::out_of_range);
  // The executor keeps working after a failed job.
  EXPECT_EQ(ex.run([] { return 5; }), 5);
}

TEST(Executor, CancelBeforeStartNeverRuns) {
  Executor ex;
  Gate gate;
  auto blocker = ex.submit([&] { gate.wait(); });
  std::atomic<bool> ran{false};
  auto victim = ex.submit([&] { ran = true; return 1; });
  auto after = ex.submit([] { return 2; });
  EXPECT_FALSE(victim.started());
  EXPECT_TRUE(victim.cancel());
  EXPECT_TRUE(victim.cancelled());
  EXPECT_FALSE(victim.cancel());  // second cancel is a no-op
  gate.open();
  EXPECT_EQ(after.get(), 2);
  try {
    victim.get();
    FAIL();
  } catch (const ExecutorCancelled& e) {
    EXPECT_NE(std::string(e.what()).find("cancelled"), std::string::npos);
  }
  EXPECT_FALSE(ran.load());
  blocker.get();
}

TEST(Executor, CancelAfterStartIsRefusedAndTheJobCompletes) {
  Executor ex;
  Gate started, release;
  auto t = ex.submit([&] {
    started.open();
    release.wait();
    return 9;
  });
  started.wait();
  EXPECT_TRUE(t.started());
  EXPECT_FALSE(t.cancel());
  release.open();
  EXPECT_EQ(t.get(), 9);
  EXPECT_FALSE(t.cancel());
}

TEST(Executor, RunFromTheExecutorThreadRunsInline) {
  Executor ex;
  int v = ex.run([&] {
    // Nested run would deadlock if it queued behind the running job.
    int inner = ex.run([&] { return ex.on_executor_thread() ? 3 : -1; });
    return inner + ex.run([] { return 4; });
  });
  EXPECT_EQ(v, 7);
}

TEST(Executor, StopWaitsForTheRunningJobThenCleansUpOnceOnTheExecutorThread) {
  std::atomic<int> cleanups{0};
  std::atomic<bool> job_done{false};
  std::atomic<bool> cleanup_after_job{false};
  std::thread::id cleanup_thread;
  Executor* exp = nullptr;
  Executor ex([&] {
    cleanups++;
    cleanup_after_job = job_done.load();
    cleanup_thread = std::this_thread::get_id();
  });
  exp = &ex;
  Gate started;
  auto running = ex.submit([&] {
    started.open();
    std::this_thread::sleep_for(100ms);
    job_done = true;
    return 1;
  });
  std::atomic<bool> queued_ran{false};
  auto queued = ex.submit([&] { queued_ran = true; });
  started.wait();

  // Several threads stop at once; all return only after the thread finished.
  std::vector<std::thread> stoppers;
  std::atomic<int> returned_before_cleanup{0};
  for (int i = 0; i < 6; i++) {
    stoppers.emplace_back([&] {
      exp->stop();
      if (cleanups.load() != 1) returned_before_cleanup++;
    });
  }
  for (auto& t : stoppers) t.join();
  ex.stop();  // idempotent

  EXPECT_EQ(running.get(), 1);
  EXPECT_EQ(cleanups.load(), 1);
  EXPECT_TRUE(cleanup_after_job.load());
  EXPECT_EQ(cleanup_thread, ex.thread_id());
  EXPECT_EQ(returned_before_cleanup.load(), 0);
  EXPECT_FALSE(queued_ran.load());
  EXPECT_THROW(queued.get(), ExecutorStopped);
  EXPECT_TRUE(ex.stopping());
  // run/submit after stop throw.
  EXPECT_THROW(ex.run([] { return 1; }), ExecutorStopped);
  EXPECT_THROW(ex.submit([] {}), ExecutorStopped);
}

TEST(Executor, DestructorStopsAndCleansUp) {
  std::atomic<int> cleanups{0};
  pid_t cleanup_tid = 0, worker_tid = 0;
  {
    Executor ex([&] {
      cleanups++;
      cleanup_tid = gettid_now();
    });
    worker_tid = ex.native_tid();
    ex.run([] {});
  }
  EXPECT_EQ(cleanups.load(), 1);
  EXPECT_EQ(cleanup_tid, worker_tid);
  {
    Executor ex;  // no cleanup callback, never used
  }
}

TEST(Executor, CleanupExceptionIsCapturedNotFatal) {
  Executor ex([] { throw std::runtime_error("device busy"); });
  ex.stop();
  EXPECT_EQ(ex.cleanup_error(), "device busy");
}

TEST(Executor, StopFromInsideAJob) {
  std::atomic<int> cleanups{0};
  auto ex = std::make_unique<Executor>([&] { cleanups++; });
  std::atomic<bool> second_ran{false};
  Gate gate;
  auto first = ex->submit([&] {
    gate.wait();
    ex->stop();  // must not deadlock (cannot join itself)
    return ex->stopping();
  });
  auto second = ex->submit([&] { second_ran = true; });
  gate.open();
  EXPECT_TRUE(first.get());
  EXPECT_THROW(second.get(), ExecutorStopped);
  ex.reset();  // joins
  EXPECT_EQ(cleanups.load(), 1);
  EXPECT_FALSE(second_ran.load());
}

TEST(Executor, ManySubmittersStress) {
  Executor ex;
  std::atomic<long> sum{0};
  long plain = 0;  // only touched on the executor thread
  std::vector<std::thread> ts;
  for (int c = 0; c < 8; c++) {
    ts.emplace_back([&, c] {
      std::vector<Ticket<void>> mine;
      for (int i = 0; i < 200; i++) {
        auto t = ex.submit([&, i] { plain += i; sum += i; });
        if ((i + c) % 7 == 0 && t.cancel()) {
          EXPECT_THROW(t.get(), ExecutorCancelled);
          continue;
        }
        mine.push_back(std::move(t));
      }
      for (auto& t : mine) t.get();
    });
  }
  for (auto& t : ts) t.join();
  long check = ex.run([&] { return plain; });
  EXPECT_EQ(check, sum.load());
}

}  // namespace
}  // namespace vatic
