#pragma once
// Which runner serves which model: loads on first use, keeps a model loaded for its keep_alive after the last
// request (0 = unload when idle, negative = forever), at most max_loaded models at once (least recently used idle
// one evicted first), a bounded number of pending requests (over it: HttpError 503), and requests to one runner
// one at a time (a Lease holds the runner for its request).
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/runner_process.h"
#include "util/json.h"

namespace vatic::server {

struct SchedulerOptions {
  std::string runner_exe;           // the vatic binary (runners are `vatic runner ...`)
  int max_loaded = 2;               // VATIC_MAX_LOADED_MODELS
  int max_queue = 64;               // VATIC_MAX_QUEUE
  double default_keep_alive = 300;  // VATIC_KEEP_ALIVE, seconds; < 0 forever
  double load_timeout = 300;        // VATIC_LOAD_TIMEOUT, seconds; <= 0 no limit
  bool debug = false;
};

struct LoadedModel {
  std::string name;
  pid_t pid = 0;
  int port = 0;
  int64_t num_ctx = 0;
  bool busy = false;
  bool forever = false;
  std::chrono::system_clock::time_point expires_at;
};

class Scheduler {
  struct Slot;

 public:
  explicit Scheduler(SchedulerOptions options);
  ~Scheduler();

  // A runner held for one request. Destroying it releases the runner (and starts the keep-alive timer).
  class Lease {
   public:
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    int port() const;
    pid_t pid() const;
    const std::string& model() const;
    double load_seconds() const { return load_seconds_; }
    // The runner failed (connection lost, bad answer, timeout): the message says why, with the runner's last
    // stderr line; the runner is killed if still alive and the next request starts a fresh one.
    std::string fail(const std::string& what);

   private:
    friend class Scheduler;
    Lease(Scheduler* s, std::shared_ptr<Slot> slot) : sched_(s), slot_(std::move(slot)) {}
    Scheduler* sched_;
    std::shared_ptr<Slot> slot_;
    double load_seconds_ = 0;
    uint64_t output_mark_ = 0;  // the runner's stderr line count when the request got it
  };

  // Waits for (loading if needed) the model's runner. keep_alive: seconds, nullopt = the default.
  // num_ctx: context to load with (0 = default); an idle runner with another context is reloaded.
  // Throws HttpError 503 when too many requests are pending, 500 when loading fails.
  // digest: the model's manifest digest when known; a runner loaded from another version of the model (deleted and
  // created again) is replaced. A request queued behind one whose runner died goes to a fresh runner.
  std::unique_ptr<Lease> acquire(const std::string& model, std::optional<double> keep_alive, int64_t num_ctx,
                                 const std::string& digest = "");

  // Unloads the model now if loaded (waits for its request to finish). Returns whether it was loaded.
  bool unload(const std::string& model);
  std::vector<LoadedModel> loaded() const;
  void shutdown();

 private:
  struct Slot {
    std::string name;
    std::shared_ptr<RunnerProcess> proc;
    bool loading = true, failed = false, dead = false;
    std::string error;
    int64_t num_ctx = 0;
    std::string digest;
    int refs = 0;  // requests holding or waiting for the runner
    std::mutex run_mu;
    double keep_alive = 300;
    std::chrono::steady_clock::time_point last_used;
  };
  std::unique_ptr<Lease> acquire_once(const std::string& model, std::optional<double> keep_alive, int64_t num_ctx,
                                      const std::string& digest);
  void release(const std::shared_ptr<Slot>& slot);
  void reap();
  void stop_slot(const std::shared_ptr<Slot>& slot);  // outside mu_

  SchedulerOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Slot>> slots_;
  int pending_ = 0;
  bool stopping_ = false;
  std::thread reaper_;
};

}  // namespace vatic::server
