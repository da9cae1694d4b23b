#pragma once
// Starts `vatic serve` on 127.0.0.1 and a free port with a temporary model store holding the fixture models,
// and stops it (and its runners) at the end.
#include <httplib.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "modelfile/modelfile.h"
#include "store/store.h"
#include "util/json.h"

extern char** environ;

namespace vatic::test {

namespace fs = std::filesystem;

inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// Whether `done()` becomes true within `tries` checks `every` apart (the first check at once): for state that a
// server or runner reaches a little after the request that causes it.
template <class Done>
bool eventually(Done done, int tries, std::chrono::milliseconds every = std::chrono::milliseconds(50)) {
  for (int i = 0; i < tries; i++) {
    if (done()) return true;
    if (i + 1 < tries) std::this_thread::sleep_for(every);
  }
  return false;
}

inline fs::path fixture_model(const std::string& name) { return fs::path(VATIC_FIXTURES_DIR) / "models" / name; }

// A temporary store with the fixture models created once per process.
inline fs::path shared_store() {
  static fs::path root = [] {
    char tmpl[] = "/tmp/vatic-server-test-XXXXXX";
    fs::path dir = ::mkdtemp(tmpl);
    ModelStore store(dir / "models");
    auto create = [&](const std::string& name, const std::string& from, const std::string& draft,
                      const std::string& quantize = "") {
      Modelfile m;
      m.from.text = from;
      m.from.path = fixture_model(from);
      if (!draft.empty()) {
        m.draft.text = draft;
        m.draft.path = fixture_model(draft);
      }
      CreateOptions o;
      o.quantize = quantize;
      store.create(name, m, o);
    };
    create("tiny", "gemma4-e2b-tiny", "gemma4-e2b-tiny-assistant");
    create("dense", "gemma4-dense-tiny", "gemma4-dense-tiny-assistant");
    create("plain", "gemma4-dense-tiny", "");
    create("glm", "glm4-moe-lite-tiny", "", "int8");
    create("llama", "../families/llama3-tiny", "../families/llama-untied-bias-tiny");
    create("qwen-moe", "../families/qwen3-moe-tiny", "../families/qwen3-tiny", "int8");
    create("gemma3", "../families/gemma3-tiny", "", "int4");
    static struct Cleanup {
      fs::path dir;
      ~Cleanup() {
        std::error_code ec;
        fs::remove_all(dir, ec);
      }
    } cleanup{dir};
    return dir / "models";
  }();
  return root;
}

using Env = std::map<std::string, std::string>;

class ServerProcess {
 public:
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  explicit ServerProcess(Env env = {}, fs::path store = shared_store()) {
    // A server may refuse a body before reading all of it; the client must see the answer, not die of SIGPIPE.
    ::signal(SIGPIPE, SIG_IGN);
    port_ = free_port();
    char tmpl[] = "/tmp/vatic-server-log-XXXXXX";
    log_dir_ = ::mkdtemp(tmpl);
    log_ = log_dir_ / "server.log";
    env["VATIC_HOST"] = "127.0.0.1:" + std::to_string(port_);
    env["VATIC_MODELS"] = store.string();
    std::vector<std::string> envs;
    for (char** e = environ; *e; e++) {
      std::string kv = *e;
      if (env.count(kv.substr(0, kv.find('=')))) continue;
      envs.push_back(kv);
    }
    for (auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : envs) envp.push_back(s.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    std::string exe = VATIC_BINARY;
    char* argv[] = {exe.data(), const_cast<char*>("serve"), nullptr};
    int rc = ::posix_spawn(&pid_, exe.c_str(), &fa, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error("cannot start " + exe);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      httplib::Client c("127.0.0.1", port_);
      c.set_connection_timeout(0, 200000);
      if (auto r = c.Get("/"); r && r->status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw std::runtime_error("server did not start: " + log());
  }
  ~ServerProcess() {
    stop();
    std::error_code ec;
    fs::remove_all(log_dir_, ec);
  }

  // SIGTERM; returns the exit status (or -1 when it had to be killed).
  int stop() {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 200; i++) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        return status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    status_ = -1;
    return status_;
  }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  httplib::Client client(int read_timeout_s = 60) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(read_timeout_s, 0);
    c.set_write_timeout(10, 0);
    return c;
  }
  std::string log() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  int port_ = 0;
  pid_t pid_ = -1;
  int status_ = 0;
  fs::path log_dir_, log_;
};

inline std::vector<json> ndjson(const std::string& body) {
  std::vector<json> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

}  // namespace vatic::test
