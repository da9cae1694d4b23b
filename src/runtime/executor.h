#pragma once
// The compute thread. One Executor per engine owns one OS thread that runs every tensor operation (load, forward,
// cache edits, memory reads, teardown): accelerator runtimes keep per-thread state (streams, command encoders,
// caches), so all of it has to happen on the same thread. Other threads submit work and wait for it.
//
// * run(f): runs f on the executor thread and returns its result; an exception thrown by f is rethrown in the
//   caller as the same exception object (std::exception_ptr). Called from the executor thread itself, f runs inline.
// * submit(f): enqueues f and returns a Ticket; Ticket::cancel() before the job starts means it never runs and its
//   waiter gets ExecutorCancelled. Jobs run one at a time, in submission order.
// * stop(): refuses new work, cancels queued jobs (waiters get ExecutorStopped), waits for the running job, runs the
//   cleanup callback exactly once on the executor thread, and joins. Idempotent and safe to call from several
//   threads at once (all return after the thread has finished); the destructor calls it.
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "util/error.h"

namespace vatic {

// The waiter of a job cancelled before it started.
class ExecutorCancelled : public Error {
 public:
  using Error::Error;
};

// Work submitted to (or still queued on) an executor that is stopping or stopped.
class ExecutorStopped : public Error {
 public:
  using Error::Error;
};

namespace detail {

struct JobBase {
  enum State : int { kQueued = 0, kRunning = 1, kDone = 2, kCancelled = 3 };
  std::atomic<int> state{kQueued};
  virtual ~JobBase() = default;
  // Worker side: claims and runs the job unless it was cancelled.
  void run_if_queued() {
    int expected = kQueued;
    if (!state.compare_exchange_strong(expected, kRunning)) return;
    execute();
    state.store(kDone);
  }
  // Any side: cancels a job that has not started. Returns false when it already started (or ended).
  bool cancel_with(std::exception_ptr e) {
    int expected = kQueued;
    if (!state.compare_exchange_strong(expected, kCancelled)) return false;
    fail_with(std::move(e));
    return true;
  }

 protected:
  virtual void execute() = 0;
  virtual void fail_with(std::exception_ptr e) = 0;
};

template <typename R, typename F>
struct Job : JobBase {
  explicit Job(F&& f) : fn(std::move(f)) {}
  explicit Job(const F& f) : fn(f) {}
  std::optional<F> fn;  // the callable may be move-only
  std::promise<R> promise;

 protected:
  void execute() override {
    try {
      if constexpr (std::is_void_v<R>) {
        (*fn)();
        promise.set_value();
      } else {
        promise.set_value((*fn)());
      }
    } catch (...) {
      promise.set_exception(std::current_exception());
    }
    fn.reset();  // release captures on the executor thread
  }
  void fail_with(std::exception_ptr e) override { promise.set_exception(std::move(e)); }
};

}  // namespace detail

// A handle on submitted work. Movable, not copyable; get() may be called once.
template <typename R>
class Ticket {
 public:
  Ticket() = default;
  // Cancels the job if it has not started yet: it will never run, and get() throws ExecutorCancelled.
  // Returns false when the job already started or finished (then it runs to completion).
  bool cancel() {
    if (!job_) return false;
    return job_->cancel_with(std::make_exception_ptr(ExecutorCancelled("job cancelled before it started")));
  }
  // Waits for the job and returns its result, or rethrows its exception. Calling this from the executor thread for
  // a job that has not run yet would wait forever; use Executor::run there.
  R get() { return future_.get(); }
  void wait() const { future_.wait(); }
  template <typename Rep, typename Period>
  bool wait_for(const std::chrono::duration<Rep, Period>& d) const {
    return future_.wait_for(d) == std::future_status::ready;
  }
  bool valid() const { return future_.valid(); }
  bool started() const { return job_ && job_->state.load() != detail::JobBase::kQueued; }
  bool cancelled() const { return job_ && job_->state.load() == detail::JobBase::kCancelled; }

 private:
  friend class Executor;
  Ticket(std::shared_ptr<detail::JobBase> job, std::future<R> f) : job_(std::move(job)), future_(std::move(f)) {}
  std::shared_ptr<detail::JobBase> job_;
  std::future<R> future_;
};

class Executor {
 public:
  // `on_stop_cleanup` runs once on the executor thread when it stops, after the last job (free device memory,
  // clear caches). An exception it throws is caught and reported by cleanup_error().
  explicit Executor(std::function<void()> on_stop_cleanup = {}, std::string name = "vatic-compute");
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  template <typename F>
  using result_t = std::invoke_result_t<std::decay_t<F>&>;

  // Runs f on the executor thread and waits. Throws ExecutorStopped after stop().
  template <typename F>
  result_t<F> run(F&& f) {
    if (on_executor_thread()) return f();
    return submit(std::forward<F>(f)).get();
  }

  // Enqueues f. Throws ExecutorStopped after stop().
  template <typename F>
  Ticket<result_t<F>> submit(F&& f) {
    using R = result_t<F>;
    auto job = std::make_shared<detail::Job<R, std::decay_t<F>>>(std::forward<F>(f));
    std::future<R> fut = job->promise.get_future();
    enqueue(job);
    return Ticket<R>(std::move(job), std::move(fut));
  }

  void stop();
  bool stopping() const;
  // Jobs waiting to start (cancelled ones included until the thread skips them).
  size_t pending() const;

  std::thread::id thread_id() const { return thread_id_; }
  pid_t native_tid() const { return native_tid_.load(); }  // the kernel thread id (gettid) of the executor thread
  bool on_executor_thread() const { return std::this_thread::get_id() == thread_id_; }
  const std::string& name() const { return name_; }
  // The message of an exception thrown by the cleanup callback, empty if none.
  std::string cleanup_error() const;

 private:
  void enqueue(std::shared_ptr<detail::JobBase> job);
  void loop();

  std::string name_;
  std::function<void()> cleanup_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<detail::JobBase>> queue_;
  bool stopping_ = false;
  std::string cleanup_error_;
  std::mutex join_mu_;
  std::thread thread_;
  std::thread::id thread_id_;
  std::atomic<pid_t> native_tid_{0};
};

}  // namespace vatic
