#pragma once
// Helpers for the CLI tests: a fake ollama-API server (httplib, random port on 127.0.0.1) that records what it was
// sent, and running the built vatic binary as a subprocess (pipes, or a pseudo-terminal).
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "util/json.h"

extern char** environ;

namespace vatic::test {

struct Recorded {
  std::string method, path;
  json body;
};

// NDJSON chunks a handler streams back, one line each, `delay` apart.
struct Stream {
  std::vector<json> chunks;
  std::chrono::milliseconds delay{0};
};

class FakeServer {
 public:
  using Handler = std::function<void(const json& body, httplib::Response& res)>;

  FakeServer() {
    auto record = [this](const httplib::Request& req) {
      std::lock_guard<std::mutex> lock(mu_);
      Recorded r{req.method, req.path, json::parse(req.body, nullptr, false)};
      requests_.push_back(r);
      return r;
    };
    auto dispatch = [this, record](const httplib::Request& req, httplib::Response& res) {
      Recorded r = record(req);
      Handler h;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = handlers_.find(req.path);
        if (it != handlers_.end()) h = it->second;
      }
      if (!h) {
        res.status = 404;
        res.set_content(R"({"error":"no handler"})", "application/json");
        return;
      }
      h(r.body, res);
    };
    server_.Get(".*", dispatch);
    server_.Post(".*", dispatch);
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) {
      std::fprintf(stderr, "fake server: could not bind a port on 127.0.0.1\n");
      std::abort();
    }
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // httplib's stop() does nothing until the accept loop has started: a destructor that ran first would wait for
    // the thread for ever.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_.is_running()) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "fake server: the accept loop did not start within 10 s\n");
        std::abort();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~FakeServer() {
    stopping_.store(true);
    server_.stop();
    thread_.join();
  }

  int port() const { return port_; }
  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }

  void on(const std::string& path, Handler h) {
    std::lock_guard<std::mutex> lock(mu_);
    handlers_[path] = std::move(h);
  }
  void on_json(const std::string& path, json answer, int status = 200) {
    on(path, [answer, status](const json&, httplib::Response& res) {
      res.status = status;
      res.set_content(answer.dump(), "application/json");
    });
  }
  void on_stream(const std::string& path, Stream s) {
    on(path, [this, s](const json&, httplib::Response& res) {
      res.set_chunked_content_provider("application/x-ndjson", [this, s](size_t, httplib::DataSink& sink) {
        for (const auto& c : s.chunks) {
          if (s.delay.count()) {
            for (auto waited = std::chrono::milliseconds(0); waited < s.delay; waited += std::chrono::milliseconds(10)) {
              if (stopping_.load()) break;
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
          }
          std::string line = c.dump() + "\n";
          if (stopping_.load() || !sink.is_writable() || !sink.write(line.data(), line.size())) {
            disconnected_.store(true);
            return false;
          }
        }
        sink.done();
        return true;
      });
    });
  }

  std::vector<Recorded> requests(const std::string& path = "") {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Recorded> out;
    for (const auto& r : requests_)
      if (path.empty() || r.path == path) out.push_back(r);
    return out;
  }
  bool client_disconnected() const { return disconnected_.load(); }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::map<std::string, Handler> handlers_;
  std::vector<Recorded> requests_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> disconnected_{false};
};

struct ProcessResult {
  int exit_code = -1;  // 128+N when killed by signal N
  std::string out, err;
  bool timed_out = false;
};

inline std::vector<std::string> make_env(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos && overrides.count(kv.substr(0, eq))) continue;
    env.push_back(kv);
  }
  for (const auto& [k, v] : overrides) env.push_back(k + "=" + v);
  return env;
}

// execve's arguments for the vatic binary, built before fork(). The test process has other threads (the fake
// server's), so its child may only make async-signal-safe calls until it execs: a lock another thread held at the
// fork stays held in the child, and AddressSanitizer's allocator, for one, takes no care of fork, so a malloc there
// can wait for ever.
class VaticExec {
 public:
  VaticExec(const std::vector<std::string>& args, const std::map<std::string, std::string>& env_overrides)
      : args_(args), env_(make_env(env_overrides)) {
    args_.insert(args_.begin(), VATIC_BINARY);
    for (auto& a : args_) argv_.push_back(a.data());
    argv_.push_back(nullptr);
    for (auto& e : env_) envp_.push_back(e.data());
    envp_.push_back(nullptr);
  }
  VaticExec(const VaticExec&) = delete;
  VaticExec& operator=(const VaticExec&) = delete;

  // In the child, between fork() and exec.
  [[noreturn]] void exec() const {
    ::execve(argv_[0], argv_.data(), envp_.data());
    static const char msg[] = "execve of the vatic binary failed\n";
    ssize_t w = ::write(2, msg, sizeof msg - 1);
    (void)w;
    ::_exit(127);
  }

 private:
  std::vector<std::string> args_, env_;
  std::vector<char*> argv_, envp_;
};

inline int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Runs vatic with pipes for stdin, stdout and stderr. `on_started(pid)` runs in the parent once the child exists.
inline ProcessResult run_vatic(const std::vector<std::string>& args, const std::string& input,
                               const std::map<std::string, std::string>& env_overrides,
                               std::chrono::seconds timeout = std::chrono::seconds(30),
                               const std::function<void(pid_t, const std::string& out)>& on_output = nullptr) {
  int in[2], out[2], err[2];
  if (::pipe(in) || ::pipe(out) || ::pipe(err)) std::abort();
  const VaticExec vatic(args, env_overrides);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) ::close(fd);
    vatic.exec();
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  ::signal(SIGPIPE, SIG_IGN);
  if (!input.empty()) {
    ssize_t w = ::write(in[1], input.data(), input.size());
    (void)w;
  }
  ::close(in[1]);
  ProcessResult r;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    int n = ::poll(fds, 2, 50);
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    if (n <= 0) continue;
    char buf[4096];
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t k = ::read(fds[i].fd, buf, sizeof buf);
      if (k <= 0) {
        (i == 0 ? out_open : err_open) = false;
        continue;
      }
      (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(k));
      if (i == 0 && on_output) on_output(pid, r.out);
    }
  }
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  // The child may close its output before it exits: wait for the exit within the same deadline.
  while (!r.timed_out && ::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      ::kill(pid, SIGKILL);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (r.timed_out) ::waitpid(pid, &status, 0);
  r.exit_code = decode_status(status);
  return r;
}

// vatic on a pseudo-terminal (stdin, stdout and stderr), driven by a script of (wait for text, then send) steps.
class PtyProcess {
 public:
  PtyProcess(const std::vector<std::string>& args, const std::map<std::string, std::string>& env_overrides) {
    const VaticExec vatic(args, env_overrides);
    struct winsize ws {};
    ws.ws_col = 100;
    ws.ws_row = 40;
    pid_ = ::forkpty(&master_, nullptr, nullptr, &ws);
    if (pid_ == 0) vatic.exec();
  }
  ~PtyProcess() {
    if (pid_ > 0 && exit_code_ < 0) {
      ::kill(pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
    if (master_ >= 0) ::close(master_);
  }

  // Reads until `text` appears in the output after `from` (returns its end offset) or the timeout passes (-1).
  long wait_for(const std::string& text, size_t from = 0, std::chrono::seconds timeout = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      auto p = output_.find(text, from);
      if (p != std::string::npos) return static_cast<long>(p + text.size());
      if (std::chrono::steady_clock::now() > deadline || !pump(50)) return -1;
    }
  }
  void send(const std::string& s) {
    ssize_t w = ::write(master_, s.data(), s.size());
    (void)w;
  }
  int wait_exit(std::chrono::seconds timeout = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pump(20);
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        exit_code_ = decode_status(st);
        while (pump(20)) {
        }
        return exit_code_;
      }
    }
    return -1;
  }
  const std::string& output() const { return output_; }

 private:
  bool pump(int ms) {
    pollfd fd{master_, POLLIN, 0};
    int n = ::poll(&fd, 1, ms);
    if (n <= 0) return n == 0;
    char buf[4096];
    ssize_t k = ::read(master_, buf, sizeof buf);
    if (k <= 0) return false;
    output_.append(buf, static_cast<size_t>(k));
    return true;
  }

  pid_t pid_ = -1;
  int master_ = -1;
  int exit_code_ = -1;
  std::string output_;
};

}  // namespace vatic::test
