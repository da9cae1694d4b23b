#include "server/runner_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>

#include "util/error.h"
#include "util/json.h"

extern char** environ;

namespace vatic::server {

struct RunnerProcess::Shared {
  std::mutex mu;
  std::condition_variable cv;
  int port = 0;
  bool ready = false;
  bool exited = false;
  int status = 0;
  uint64_t count = 0;                               // stderr lines so far
  std::deque<std::pair<uint64_t, std::string>> lines;   // last stderr lines, numbered from 1
  std::deque<std::pair<uint64_t, std::string>> errors;  // last error-like stderr lines
};

namespace {

bool is_error_line(const std::string& l) {
  static const char* prefixes[] = {"error:", "Error:", "panic:", "fatal", "terminate called", "what():",
                                   "Segmentation", "Aborted", "out of memory", "std::bad_alloc"};
  for (const char* p : prefixes)
    if (l.find(p) != std::string::npos) return true;
  return false;
}

void read_lines(int fd, const std::function<void(std::string)>& on_line) {
  std::string buf;
  char chunk[4096];
  while (true) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
    size_t p;
    while ((p = buf.find('\n')) != std::string::npos) {
      on_line(buf.substr(0, p));
      buf.erase(0, p + 1);
    }
  }
  if (!buf.empty()) on_line(buf);
  ::close(fd);
}

}  // namespace

std::shared_ptr<RunnerProcess> RunnerProcess::spawn(const std::string& exe, const std::vector<std::string>& args,
                                                    const std::string& label, bool forward_stderr) {
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) fail("cannot create a pipe: {}", std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) fail("cannot create a pipe: {}", std::strerror(errno));
  if (::pipe2(err, O_CLOEXEC) != 0) fail("cannot create a pipe: {}", std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, err[1], STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The child starts with default signal handling and nothing blocked, whatever our threads have.
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  // Own process group: a Ctrl-C on the terminal reaches the server, which then stops its runners in order.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, exe.c_str(), &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    fail("cannot start the runner {}: {}", exe, std::strerror(rc));
  }
  auto p = std::shared_ptr<RunnerProcess>(new RunnerProcess());
  p->pid_ = pid;
  p->stdin_fd_ = in[1];
  p->s_ = std::make_shared<Shared>();
  auto s = p->s_;
  std::thread([s, fd = out[0]] {
    read_lines(fd, [&](std::string line) {
      try {
        auto j = json::parse(line);
        if (j.is_object() && j.value("status", "") == "ready") {
          std::lock_guard<std::mutex> lk(s->mu);
          s->port = j.value("port", 0);
          s->ready = true;
          s->cv.notify_all();
        }
      } catch (const std::exception&) {
      }
    });
  }).detach();
  std::thread([s, fd = err[0], label, forward_stderr] {
    read_lines(fd, [&](std::string line) {
      if (forward_stderr) std::fprintf(stderr, "[%s] %s\n", label.c_str(), line.c_str());
      if (line.empty()) return;
      std::lock_guard<std::mutex> lk(s->mu);
      const uint64_t n = ++s->count;
      s->lines.emplace_back(n, line);
      if (s->lines.size() > 8) s->lines.pop_front();
      if (is_error_line(line)) {
        s->errors.emplace_back(n, line);
        if (s->errors.size() > 4) s->errors.pop_front();
      }
    });
  }).detach();
  std::thread([s, pid] {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::lock_guard<std::mutex> lk(s->mu);
    s->exited = true;
    s->status = status;
    s->cv.notify_all();
  }).detach();
  return p;
}

RunnerProcess::~RunnerProcess() {
  if (!exited()) stop(2.0);
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
}

bool RunnerProcess::wait_ready(double timeout_s, std::string* error) {
  std::unique_lock<std::mutex> lk(s_->mu);
  auto pred = [&] { return s_->ready || s_->exited; };
  if (timeout_s > 0) {
    if (!s_->cv.wait_for(lk, std::chrono::duration<double>(timeout_s), pred)) {
      lk.unlock();
      kill_now();
      if (error) *error = fmt::format("timed out after {:.0f}s waiting for the model to load", timeout_s);
      return false;
    }
  } else {
    s_->cv.wait(lk, pred);
  }
  if (s_->ready && !s_->exited) return true;
  lk.unlock();
  // Let the stderr reader catch up with the last lines before reporting.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (error) {
    std::string last = last_error();
    *error = last.empty() ? fmt::format("runner exited while loading ({})", exit_description())
                          : fmt::format("{} ({})", last, exit_description());
  }
  return false;
}

int RunnerProcess::port() const {
  std::lock_guard<std::mutex> lk(s_->mu);
  return s_->port;
}

bool RunnerProcess::exited() const {
  std::lock_guard<std::mutex> lk(s_->mu);
  return s_->exited;
}

bool RunnerProcess::wait_exit(double timeout_s) {
  std::unique_lock<std::mutex> lk(s_->mu);
  return s_->cv.wait_for(lk, std::chrono::duration<double>(timeout_s), [&] { return s_->exited; });
}

std::string RunnerProcess::exit_description() const {
  std::lock_guard<std::mutex> lk(s_->mu);
  if (!s_->exited) return "";
  if (WIFEXITED(s_->status)) return fmt::format("exit status {}", WEXITSTATUS(s_->status));
  if (WIFSIGNALED(s_->status)) {
    int sig = WTERMSIG(s_->status);
    const char* name = sigabbrev_np(sig);
    return fmt::format("killed by signal {}{}{}", sig, name ? " SIG" : "", name ? name : "");
  }
  return "exited";
}

std::string RunnerProcess::last_error(bool or_last_line, uint64_t since) const {
  std::lock_guard<std::mutex> lk(s_->mu);
  if (!s_->errors.empty() && s_->errors.back().first > since) return s_->errors.back().second;
  if (or_last_line && !s_->lines.empty() && s_->lines.back().first > since) return s_->lines.back().second;
  return "";
}

uint64_t RunnerProcess::output_mark() const {
  std::lock_guard<std::mutex> lk(s_->mu);
  return s_->count;
}

void RunnerProcess::stop(double grace_s) {
  if (exited()) return;
  ::kill(pid_, SIGTERM);
  if (wait_exit(grace_s)) return;
  kill_now();
}

void RunnerProcess::kill_now() {
  if (exited()) return;
  ::kill(pid_, SIGKILL);
  wait_exit(10.0);
}

}  // namespace vatic::server
