#pragma once
// The server's HTTP front: how routes are registered (bodies read with a hard limit whatever their framing), which
// hosts and browser origins may talk to the server, the connection thread pool and the listening socket.
//
// cpp-httplib comes from the Debian package as a compiled library, so its CPPHTTPLIB_* limits (listen backlog,
// form-encoded body limit, thread pool) are fixed inside it; everything here works through its public hooks
// instead: content-reader routes, the pre-routing handler, socket options and the task queue.
#include <httplib.h>

#include <cstddef>
#include <functional>
#include <regex>
#include <string>
#include <vector>

namespace vatic::server {

// Largest request body of the JSON endpoints (chunked, sized or unsized; after Content-Encoding decoding).
inline constexpr size_t kMaxBodyBytes = size_t(32) << 20;

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
// A route that reads its body itself: `receive` gets each piece as it arrives (return false to stop; the
// connection is then closed) and `finish` answers once the body is complete.
struct StreamingRoute {
  // Optional: answers (and returns false) when the request is refused before its body is read.
  std::function<bool(const httplib::Request&, httplib::Response&)> precheck;
  std::function<bool(const httplib::Request&, const char*, size_t)> receive;
  std::function<void(const httplib::Request&, httplib::Response&, bool complete)> finish;
};

// Registers routes on `svr` and remembers them, so a request with a known path and another method gets 405.
class Router {
 public:
  explicit Router(httplib::Server& svr) : svr_(svr) {}
  void get(const std::string& pattern, Handler h);  // GET and HEAD
  void post(const std::string& pattern, Handler h);
  void del(const std::string& pattern, Handler h);
  // POST with a body of any size, delivered piece by piece (blob uploads).
  void post_streaming(const std::string& pattern, std::function<StreamingRoute()> make);
  // Must come last: answers every body-carrying request no route took (404/405), reading at most the limit.
  void finish();

  // The methods registered for `path` (empty when the path is unknown).
  std::vector<std::string> methods_for(const std::string& path) const;

 private:
  void remember(const std::string& method, const std::string& pattern);
  httplib::Server& svr_;
  std::vector<std::pair<std::string, std::regex>> routes_;
};

// Which clients may use the server (as ollama decides it):
//  - Host: when the server listens on a loopback address, the Host header must name this machine (localhost,
//    *.localhost, *.local, *.internal, the host name, a loopback / private / unspecified IP); a server bound to
//    another address accepts any Host.
//  - Origin (browsers): requests without one are allowed; otherwise it must match an allowed origin: http(s)
//    on localhost, 127.0.0.1 and 0.0.0.0 with any port, the app://, file://, tauri://, vscode-webview:// and
//    vscode-file:// schemes, and the comma-separated patterns of VATIC_ORIGINS ('*' matches anything).
class AccessPolicy {
 public:
  AccessPolicy(const std::string& bind_host, const std::string& extra_origins);
  bool host_allowed(const std::string& host_header) const;
  bool origin_allowed(const std::string& origin) const;
  const std::vector<std::string>& origins() const { return origins_; }

 private:
  bool loopback_bind_ = true;
  std::vector<std::string> origins_;
};

bool is_loopback_host(const std::string& host);

// Called by the logger once a response is written: ends the connection when its request body was abandoned.
void after_response(const httplib::Request& req);

// The pre-routing step: 403 for a foreign Host or Origin, CORS headers for allowed origins, 204 for a preflight.
// Returns true when it answered the request.
bool apply_access_policy(const AccessPolicy& policy, const httplib::Request& req, httplib::Response& res);

// A task queue with one thread per connection up to `max_threads` (idle threads are reused); connections beyond
// that wait for a free thread instead of being refused. Slow or idle clients therefore cannot starve the others.
class ConnectionPool : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(size_t max_threads);
  ~ConnectionPool() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  struct State;
  State* s_;
};

// Binds and listens on host:port with SO_REUSEADDR only (never SO_REUSEPORT: a second server on a busy port must
// fail) and a deep accept backlog. On failure returns false and sets *error ("address already in use", ...).
bool bind_server(httplib::Server& svr, const std::string& host, int port, std::string* error);

}  // namespace vatic::server
