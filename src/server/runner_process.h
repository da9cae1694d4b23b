#pragma once
// A runner child process (`vatic runner ...`): spawned with its stdin, stdout and stderr on pipes. stdout carries the
// ready line; stderr is forwarded to the server's stderr and its last lines are kept for error messages; a reaper
// thread waits for the exit. Closing our end of its stdin (or our death) makes the runner exit.
#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace vatic::server {

class RunnerProcess {
 public:
  // Starts `exe args...`. `label` prefixes forwarded stderr lines. Throws Error when the spawn fails.
  static std::shared_ptr<RunnerProcess> spawn(const std::string& exe, const std::vector<std::string>& args,
                                              const std::string& label, bool forward_stderr);
  ~RunnerProcess();

  // Waits for the ready line. Returns false (with a message) when the process exits first or the timeout passes
  // (timeout <= 0: no limit); the process is killed in the timeout case.
  bool wait_ready(double timeout_s, std::string* error);
  int port() const;
  pid_t pid() const { return pid_; }

  bool exited() const;
  // Waits up to `timeout_s` for the process to exit; true when it has.
  bool wait_exit(double timeout_s);
  // "exit status 1" / "killed by signal 9"; empty while running.
  std::string exit_description() const;
  // The last error-like stderr line; with `or_last_line`, the last line when there was none. Only lines after
  // `since` (an output_mark()) count, so an error names what happened during the request, not an old log line.
  std::string last_error(bool or_last_line = true, uint64_t since = 0) const;
  // How many stderr lines the runner has written so far.
  uint64_t output_mark() const;

  // SIGTERM, then SIGKILL after `grace_s`; waits for the exit.
  void stop(double grace_s = 5.0);
  void kill_now();

 private:
  RunnerProcess() = default;
  struct Shared;
  std::shared_ptr<Shared> s_;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
};

}  // namespace vatic::server
