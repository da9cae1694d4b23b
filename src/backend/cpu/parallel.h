#pragma once
// How the CPU backend splits work across threads: one pool of workers for the process, started on first use.
//
// An op is cut into `parts` pieces (one per thread for the functions below, the same split whatever thread runs a
// piece, so results do not depend on the threads). The calling thread and the workers take pieces from one shared
// counter until none is left, then the caller waits for the pieces the workers took. A worker that comes late
// (asleep, or preempted on a busy machine) finds nothing left, the caller having taken its piece too: a slow
// thread holds an op up only with a piece it has started.
//
// Between ops the workers spin for a short while (the next matmul of a decode step comes within microseconds),
// then sleep on a condition variable, so a busy machine's cores are not held by idle spinners. One op costs one
// atomic store to start (plus a notify when a worker sleeps) and one counter to finish: no team is formed or
// dissolved per op, as libgomp did with futex calls around every parallel region.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace vatic::cpu {

class ThreadPool {
 public:
  // Pieces of one op at most (the count travels in 16 bits of the pool's state word).
  static constexpr int64_t kMaxParts = 0xFFFF;

  explicit ThreadPool(int threads);  // `threads` in all: the caller and threads - 1 workers
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(part) once for each part in [0, parts) (parts <= kMaxParts), on this thread and the workers; returns when
  // all have returned. Runs the parts here, in order, when the pool has no workers, when called from inside a
  // part (nested), or while another thread's op holds the pool. fn must not throw (a throw ends the process).
  template <typename F>
  void run(int64_t parts, F&& fn) {
    run_erased(parts, [](void* f, int64_t part) noexcept { (*static_cast<std::remove_reference_t<F>*>(f))(part); },
               const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using Call = void (*)(void*, int64_t);
  // The state word: the op's number (32 bits), its part count and the next part to take (16 bits each).
  static uint64_t pack(uint32_t op, int64_t parts, int64_t next) {
    return uint64_t{op} << 32 | static_cast<uint64_t>(parts) << 16 | static_cast<uint64_t>(next);
  }
  static uint32_t op_of(uint64_t s) { return static_cast<uint32_t>(s >> 32); }
  static int64_t parts_of(uint64_t s) { return static_cast<int64_t>((s >> 16) & 0xFFFF); }
  static int64_t next_of(uint64_t s) { return static_cast<int64_t>(s & 0xFFFF); }

  void run_erased(int64_t parts, Call call, void* ctx);
  int64_t take(uint64_t& s, uint32_t op);  // the next part of op `op`, or -1 when it has none left
  void finish_part(int64_t parts);
  uint64_t wait_for_op(uint32_t seen);     // the state once an op other than `seen` is published
  void worker();

  std::vector<std::thread> workers_;
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> done_{0};           // parts of the current op finished
  std::atomic<int> sleepers_{0};           // workers asleep (or about to be) on work_cv_
  std::atomic<bool> caller_asleep_{false};
  std::atomic<bool> busy_{false};          // a caller holds the pool
  std::atomic<bool> stop_{false};
  Call call_ = nullptr;                    // the current op; written before its state is published
  void* ctx_ = nullptr;
  uint32_t op_ = 0;                        // the last op's number (the caller that holds busy_ writes it)
  std::mutex m_;
  std::condition_variable work_cv_, done_cv_;
};

// The backend's pool: OMP_NUM_THREADS threads when set (the variable that set the OpenMP team before), else one
// per CPU this process may run on.
ThreadPool& pool();

// Whether work worth splitting (`big`) has more than one thread to go to.
inline bool use_threads(bool big) { return big && pool().threads() > 1; }

// body(i0, i1) on one contiguous range of [0, n) per thread (the first n % threads ranges one longer, as OpenMP's
// static schedule split them) when use_threads(big), else body(0, n) here.
template <typename F>
void parallel_ranges(int64_t n, bool big, F&& body) {
  const int64_t parts = use_threads(big) ? std::min<int64_t>(n, pool().threads()) : 1;
  if (parts <= 1) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  const int64_t q = n / parts, r = n % parts;
  pool().run(parts, [&](int64_t p) {
    const int64_t i0 = p * q + std::min(p, r);
    body(i0, i0 + q + (p < r ? 1 : 0));
  });
}

// body(i) for i in [0, n), split as parallel_ranges.
template <typename F>
void parallel_for(int64_t n, bool big, F&& body) {
  parallel_ranges(n, big, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) body(i);
  });
}

}  // namespace vatic::cpu
