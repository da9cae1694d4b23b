#include "server/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "server/api.h"

namespace vatic::server {

namespace {

bool is_openai_path(const std::string& path) { return path.rfind("/v1/", 0) == 0; }

thread_local bool t_close_after_response = false;
void shut_down_connection(const httplib::Request&) { t_close_after_response = true; }

// The library gives handlers no way to close their connection; after a body was abandoned half-read, the rest
// of it must not be parsed as further requests. Once the answer is written (the logger runs then, on the same
// thread), find the socket by its addresses and stop reading from it, which ends the connection. Only used on
// that error path.
void shut_down_now(const httplib::Request& req) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = std::atoi(entry.path().filename().c_str());
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    auto port_of = [](const sockaddr_storage& a) {
      if (a.ss_family == AF_INET) return static_cast<int>(ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port));
      if (a.ss_family == AF_INET6) return static_cast<int>(ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port));
      return -1;
    };
    if (port_of(local) != req.local_port || port_of(peer) != req.remote_port) continue;
    char host[INET6_ADDRSTRLEN] = {};
    if (peer.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(peer).sin_addr, host, sizeof host);
    else
      ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr, host, sizeof host);
    if (req.remote_addr != host) continue;
    // What already arrived is read and dropped, so that closing does not reset the connection before the client
    // has read the answer.
    char buf[65536];
    for (size_t drained = 0; drained < (size_t(1) << 20);) {
      ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) break;
      drained += static_cast<size_t>(n);
    }
    ::shutdown(fd, SHUT_RD);
    return;
  }
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Reads the whole body into req.body, at most kMaxBodyBytes whatever the framing. Answers 413 / 400 itself.
// A body a little over the limit is read to its end and dropped, so the client gets its 413 on an orderly
// connection; past kDrainBytes more the connection is shut down (the library would otherwise go on reading the
// rest as if it were the next request).
bool read_limited_body(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
  constexpr size_t kDrainBytes = size_t(64) << 20;
  const bool openai = is_openai_path(req.path);
  bool declared_too_big = false;
  if (req.has_header("Content-Length")) {
    const std::string& v = req.get_header_value("Content-Length");
    char* end = nullptr;
    unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end || n > kMaxBodyBytes + kDrainBytes) {
      res.set_header("Connection", "close");
      send_error(res, 413, "request body too large (the limit is 32 MiB)", openai);
      shut_down_connection(req);
      return false;
    }
    declared_too_big = n > kMaxBodyBytes;
  }
  std::string body;
  size_t total = 0;
  bool ok = reader([&](const char* data, size_t n) {
    total += n;
    if (total > kMaxBodyBytes + kDrainBytes) return false;
    if (total > kMaxBodyBytes || declared_too_big) {
      body.clear();
      body.shrink_to_fit();
      return true;
    }
    body.append(data, n);
    return true;
  });
  if (total > kMaxBodyBytes || declared_too_big || res.status == 413) {
    res.set_header("Connection", "close");
    send_error(res, 413, "request body too large (the limit is 32 MiB)", openai);
    if (!ok) shut_down_connection(req);
    return false;
  }
  if (!ok) {
    res.set_header("Connection", "close");
    send_error(res, 400, "could not read the request body", openai);
    shut_down_connection(req);
    return false;
  }
  // The library owns the request (it is not const there); handlers read the body from it as usual.
  const_cast<httplib::Request&>(req).body = std::move(body);
  return true;
}

// "host", "host:port", "[v6]:port", "[v6]" -> host, lowercased.
std::string host_of(const std::string& header) {
  std::string h = header;
  if (!h.empty() && h.front() == '[') {
    size_t close = h.find(']');
    return lower(close == std::string::npos ? h.substr(1) : h.substr(1, close - 1));
  }
  size_t colon = h.find(':');
  if (colon != std::string::npos && h.find(':', colon + 1) == std::string::npos) h = h.substr(0, colon);
  return lower(h);
}

enum class IpKind { not_ip, loopback, local, other };

IpKind classify_ip(const std::string& host) {
  in_addr a4{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1) {
    uint32_t ip = ntohl(a4.s_addr);
    uint8_t b0 = ip >> 24, b1 = (ip >> 16) & 0xff;
    if (b0 == 127) return IpKind::loopback;
    if (ip == 0 || b0 == 10 || (b0 == 172 && (b1 & 0xf0) == 16) || (b0 == 192 && b1 == 168)) return IpKind::local;
    return IpKind::other;
  }
  in6_addr a6{};
  if (::inet_pton(AF_INET6, host.c_str(), &a6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return IpKind::loopback;
    if (IN6_IS_ADDR_UNSPECIFIED(&a6) || (a6.s6_addr[0] & 0xfe) == 0xfc) return IpKind::local;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) {
      char buf[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &a6.s6_addr[12], buf, sizeof buf);
      return classify_ip(buf);
    }
    return IpKind::other;
  }
  return IpKind::not_ip;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// '*' matches any run of characters.
bool glob_match(const std::string& pattern, const std::string& text) {
  size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      p++;
      t++;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') p++;
  return p == pattern.size();
}

}  // namespace

void after_response(const httplib::Request& req) {
  if (!t_close_after_response) return;
  t_close_after_response = false;
  shut_down_now(req);
}

// ---- routes ----

void Router::remember(const std::string& method, const std::string& pattern) {
  routes_.emplace_back(method, std::regex(pattern));
}

void Router::get(const std::string& pattern, Handler h) {
  remember("GET", pattern);
  remember("HEAD", pattern);
  svr_.Get(pattern, std::move(h));
}

void Router::post(const std::string& pattern, Handler h) {
  remember("POST", pattern);
  svr_.Post(pattern, [h](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    if (read_limited_body(req, res, reader)) h(req, res);
  });
}

void Router::del(const std::string& pattern, Handler h) {
  remember("DELETE", pattern);
  svr_.Delete(pattern, [h](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    if (read_limited_body(req, res, reader)) h(req, res);
  });
}

void Router::post_streaming(const std::string& pattern, std::function<StreamingRoute()> make) {
  remember("POST", pattern);
  svr_.Post(pattern, [make](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    StreamingRoute r = make();
    if (r.precheck && !r.precheck(req, res)) {
      // Refused before reading: drop a small body so the answer arrives on an orderly connection.
      size_t total = 0;
      bool whole = reader([&](const char*, size_t n) { return (total += n) <= kMaxBodyBytes; });
      res.set_header("Connection", "close");
      if (!whole) shut_down_connection(req);
      return;
    }
    bool ok = reader([&](const char* data, size_t n) { return r.receive(req, data, n); });
    if (!ok) {
      res.set_header("Connection", "close");
      shut_down_connection(req);
    }
    r.finish(req, res, ok);
  });
}

void Router::finish() {
  // Without these, a body sent to an unknown path would be read by the library with no limit on chunked bodies.
  auto fallback = [](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    if (!read_limited_body(req, res, reader)) return;
    res.status = 404;  // the error handler turns it into 404 or 405 with a message
  };
  svr_.Post(".*", fallback);
  svr_.Put(".*", fallback);
  svr_.Patch(".*", fallback);
  svr_.Delete(".*", fallback);
}

std::vector<std::string> Router::methods_for(const std::string& path) const {
  std::vector<std::string> out;
  for (const auto& [m, re] : routes_)
    if (std::regex_match(path, re) && std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  return out;
}

// ---- hosts and origins ----

bool is_loopback_host(const std::string& host) {
  std::string h = host_of(host);
  return h == "localhost" || classify_ip(h) == IpKind::loopback;
}

AccessPolicy::AccessPolicy(const std::string& bind_host, const std::string& extra_origins) {
  loopback_bind_ = is_loopback_host(bind_host.find(':') != std::string::npos && bind_host.front() != '['
                                        ? "[" + bind_host + "]"
                                        : bind_host);
  for (const char* h : {"localhost", "127.0.0.1", "0.0.0.0"})
    for (const char* scheme : {"http", "https"}) {
      origins_.push_back(fmt::format("{}://{}", scheme, h));
      origins_.push_back(fmt::format("{}://{}:*", scheme, h));
    }
  for (const char* s : {"app://*", "file://*", "tauri://*", "vscode-webview://*", "vscode-file://*"})
    origins_.push_back(s);
  size_t start = 0;
  while (start <= extra_origins.size()) {
    size_t comma = extra_origins.find(',', start);
    std::string o = extra_origins.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!o.empty() && std::isspace(static_cast<unsigned char>(o.back()))) o.pop_back();
    while (!o.empty() && std::isspace(static_cast<unsigned char>(o.front()))) o.erase(0, 1);
    if (!o.empty()) origins_.push_back(o);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
}

bool AccessPolicy::host_allowed(const std::string& host_header) const {
  if (!loopback_bind_) return true;
  std::string h = host_of(host_header);
  if (h.empty() || h == "localhost") return true;
  IpKind k = classify_ip(h);
  if (k == IpKind::loopback || k == IpKind::local) return true;
  if (k == IpKind::other) return false;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0 && h == lower(name)) return true;
  for (const char* tld : {".localhost", ".local", ".internal"})
    if (ends_with(h, tld)) return true;
  return false;
}

bool AccessPolicy::origin_allowed(const std::string& origin) const {
  for (const auto& o : origins_)
    if (glob_match(o, origin)) return true;
  return false;
}

bool apply_access_policy(const AccessPolicy& policy, const httplib::Request& req, httplib::Response& res) {
  const bool openai = is_openai_path(req.path);
  if (!policy.host_allowed(req.get_header_value("Host"))) {
    res.set_header("Connection", "close");
    send_error(res, 403, "forbidden: this server only answers requests addressed to a local host name", openai);
    return true;
  }
  if (req.has_header("Origin")) {
    const std::string& origin = req.get_header_value("Origin");
    if (!policy.origin_allowed(origin)) {
      res.set_header("Connection", "close");
      send_error(res, 403, fmt::format("forbidden: origin {} is not allowed (see VATIC_ORIGINS)", origin), openai);
      return true;
    }
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  }
  if (req.method == "OPTIONS") {
    res.set_header("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS");
    res.set_header("Access-Control-Allow-Headers",
                   "Authorization, Content-Type, User-Agent, Accept, X-Requested-With, X-Stainless-Lang, "
                   "X-Stainless-Package-Version, X-Stainless-OS, X-Stainless-Arch, X-Stainless-Retry-Count, "
                   "X-Stainless-Runtime, X-Stainless-Runtime-Version, X-Stainless-Async, X-Stainless-Helper-Method, "
                   "X-Stainless-Poll-Helper, X-Stainless-Custom-Poll-Interval, X-Stainless-Timeout");
    res.set_header("Access-Control-Max-Age", "43200");
    res.status = 204;
    return true;
  }
  return false;
}

// ---- connection threads ----

struct ConnectionPool::State {
  size_t max_threads;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  std::vector<std::thread> threads;
  size_t idle = 0;
  bool stopping = false;
};

ConnectionPool::ConnectionPool(size_t max_threads) : s_(new State) { s_->max_threads = std::max<size_t>(1, max_threads); }

ConnectionPool::~ConnectionPool() {
  shutdown();
  delete s_;
}

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lk(s_->mu);
  if (s_->stopping) return;
  s_->jobs.push_back(std::move(fn));
  if (s_->idle < s_->jobs.size() && s_->threads.size() < s_->max_threads) {
    State* s = s_;
    s_->threads.emplace_back([s] {
      std::unique_lock<std::mutex> lk(s->mu);
      while (true) {
        s->idle++;
        s->cv.wait(lk, [&] { return s->stopping || !s->jobs.empty(); });
        s->idle--;
        if (s->jobs.empty()) return;  // stopping, nothing left
        auto job = std::move(s->jobs.front());
        s->jobs.pop_front();
        lk.unlock();
        job();
        lk.lock();
      }
    });
  }
  s_->cv.notify_one();
}

void ConnectionPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lk(s_->mu);
    s_->stopping = true;
    threads.swap(s_->threads);
    s_->cv.notify_all();
  }
  for (auto& t : threads) t.join();
}

// ---- listening socket ----

bool bind_server(httplib::Server& svr, const std::string& host, int port, std::string* error) {
  auto last_fd = std::make_shared<int>(-1);
  svr.set_socket_options([last_fd](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    *last_fd = sock;
  });
  errno = 0;
  if (!svr.bind_to_port(host, port)) {
    int e = errno;
    if (error)
      *error = e == EADDRINUSE ? "address already in use"
               : e != 0        ? std::string(std::strerror(e))
                               : "cannot resolve or bind the address";
    return false;
  }
  // The library listens with a backlog of 5; a burst of clients would then see connection resets. Listening
  // again on the bound socket only raises the backlog.
  if (*last_fd >= 0) ::listen(*last_fd, 4096);
  return true;
}

}  // namespace vatic::server
