#include "runtime/executor.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace vatic {

Executor::Executor(std::function<void()> on_stop_cleanup, std::string name)
    : name_(std::move(name)), cleanup_(std::move(on_stop_cleanup)) {
  std::promise<void> started;
  auto ready = started.get_future();
  thread_ = std::thread([this, &started] {
    native_tid_.store(static_cast<pid_t>(::syscall(SYS_gettid)));
    ::pthread_setname_np(::pthread_self(), name_.substr(0, 15).c_str());
    started.set_value();
    loop();
  });
  thread_id_ = thread_.get_id();
  ready.wait();
}

Executor::~Executor() {
  if (on_executor_thread()) {
    // Destroyed from one of its own jobs: the thread cannot join itself.
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.detach();
    return;
  }
  stop();
}

void Executor::enqueue(std::shared_ptr<detail::JobBase> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) throw ExecutorStopped(fmt::format("executor {} is stopped", name_));
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void Executor::loop() {
  for (;;) {
    std::shared_ptr<detail::JobBase> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job->run_if_queued();
  }
  if (cleanup_) {
    try {
      cleanup_();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(mu_);
      cleanup_error_ = e.what();
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      cleanup_error_ = "unknown exception";
    }
  }
}

void Executor::stop() {
  std::deque<std::shared_ptr<detail::JobBase>> dropped;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!stopping_) {
      stopping_ = true;
      dropped.swap(queue_);
    }
  }
  cv_.notify_all();
  for (auto& j : dropped)
    j->cancel_with(std::make_exception_ptr(ExecutorStopped(fmt::format("executor {} stopped before the job started",
                                                                       name_))));
  if (on_executor_thread()) return;  // called from a job: the thread finishes after it; the destructor joins
  std::lock_guard<std::mutex> lk(join_mu_);
  if (thread_.joinable()) thread_.join();
}

bool Executor::stopping() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stopping_;
}

size_t Executor::pending() const {
  std::lock_guard<std::mutex> lk(mu_);
  return queue_.size();
}

std::string Executor::cleanup_error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cleanup_error_;
}

}  // namespace vatic
