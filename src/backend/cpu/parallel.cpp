#include "backend/cpu/parallel.h"

#include <sched.h>

#include <chrono>
#include <cstdlib>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace vatic::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// How long an idle worker spins before it sleeps: a decode step's ops follow each other within a few microseconds;
// a longer gap is the end of a step or of a request. Waking from a sleep costs some 10-50 µs.
constexpr auto kWorkerSpin = std::chrono::microseconds(50);
// How long the caller spins for the parts the workers took: it has nothing else to do, and a part is at most a
// thread's share of one op (longer when the worker was preempted: then the caller sleeps and frees its core).
constexpr auto kCallerSpin = std::chrono::microseconds(200);

inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Calls done() until it returns true or `budget` has passed; whether it returned true.
template <typename F>
bool spin_until(Clock::duration budget, F&& done) {
  const auto start = Clock::now();
  for (int i = 1;; i++) {
    if (done()) return true;
    pause();
    if (i % 64 == 0 && Clock::now() - start > budget) return false;
  }
}

int default_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && *env) {
    const int n = std::atoi(env);  // a list ("4,2") gives its first number, as the outermost OpenMP level took
    if (n > 0) return std::min(n, 256);
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; i++) workers_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  state_.store(pack(op_ + 1, 0, 0), std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> lock(m_);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& pool() {
  static ThreadPool p(default_threads());
  return p;
}

void ThreadPool::run_erased(int64_t parts, Call call, void* ctx) {
  if (parts > kMaxParts) std::abort();  // a caller's mistake: the count would not fit the state word
  if (workers_.empty() || parts <= 1 || busy_.exchange(true, std::memory_order_acquire)) {
    for (int64_t p = 0; p < parts; p++) call(ctx, p);
    return;
  }
  call_ = call;
  ctx_ = ctx;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t op = ++op_;
  uint64_t s = pack(op, parts, 0);
  // seq_cst with the load of sleepers_ (and a worker's increment of sleepers_ before it reads state_): either the
  // worker sees this op before it sleeps or we see the worker asleep and wake it.
  state_.store(s, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(m_); }  // a worker between its check and its wait holds m_ until it waits
    work_cv_.notify_all();
  }
  for (int64_t p; (p = take(s, op)) >= 0;) {
    call(ctx, p);
    done_.fetch_add(1, std::memory_order_relaxed);
  }
  // The parts the workers took: their stores happen before their increments of done_ (release), read here (acquire).
  if (!spin_until(kCallerSpin, [&] { return done_.load(std::memory_order_acquire) == parts; })) {
    std::unique_lock<std::mutex> lock(m_);
    caller_asleep_.store(true, std::memory_order_seq_cst);
    while (done_.load(std::memory_order_seq_cst) != parts) done_cv_.wait(lock);
    caller_asleep_.store(false, std::memory_order_relaxed);
  }
  busy_.store(false, std::memory_order_release);
}

int64_t ThreadPool::take(uint64_t& s, uint32_t op) {
  for (;;) {
    if (op_of(s) != op || next_of(s) >= parts_of(s)) return -1;
    // acquire: the op's call_ and ctx_, written before its state was published (each take continues the release
    // sequence of that store).
    if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire, std::memory_order_relaxed))
      return next_of(s);
  }
}

void ThreadPool::finish_part(int64_t parts) {
  if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == parts &&
      caller_asleep_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> lock(m_);
    done_cv_.notify_one();
  }
}

uint64_t ThreadPool::wait_for_op(uint32_t seen) {
  uint64_t s = 0;
  if (spin_until(kWorkerSpin, [&] { return op_of(s = state_.load(std::memory_order_acquire)) != seen; })) return s;
  std::unique_lock<std::mutex> lock(m_);
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  while (op_of(s = state_.load(std::memory_order_seq_cst)) == seen) work_cv_.wait(lock);
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
  return s;
}

void ThreadPool::worker() {
  uint32_t seen = 0;
  for (;;) {
    uint64_t s = wait_for_op(seen);
    if (stop_.load(std::memory_order_acquire)) return;
    seen = op_of(s);
    for (int64_t p; (p = take(s, seen)) >= 0;) {
      call_(ctx_, p);
      finish_part(parts_of(s));
    }
  }
}

}  // namespace vatic::cpu
