#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <limits>
#include <thread>

#include "server/api.h"
#include "util/env.h"

namespace vatic::server {

void parse_host(const std::string& text, std::string* host, int* port) {
  std::string s = text;
  for (const char* scheme : {"http://", "https://"})
    if (s.rfind(scheme, 0) == 0) s = s.substr(std::strlen(scheme));
  while (!s.empty() && s.back() == '/') s.pop_back();
  if (s.empty()) return;
  size_t colon = s.rfind(':');
  if (s.front() == '[') {  // [::1]:port
    size_t close = s.find(']');
    if (close == std::string::npos) throw InvalidInput(fmt::format("VATIC_HOST: bad address \"{}\"", text));
    *host = s.substr(1, close - 1);
    colon = s.find(':', close);
  } else if (colon != std::string::npos) {
    *host = s.substr(0, colon);
  } else {
    *host = s;
  }
  if (host->empty()) *host = "127.0.0.1";
  if (colon != std::string::npos) {
    std::string p = s.substr(colon + 1);
    char* end = nullptr;
    long v = std::strtol(p.c_str(), &end, 10);
    if (p.empty() || *end || v < 0 || v > 65535)
      throw InvalidInput(fmt::format("VATIC_HOST: bad port in \"{}\"", text));
    *port = static_cast<int>(v);
  }
}

namespace {

thread_local Clock::time_point g_request_start;

double env_duration(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  try {
    return parse_duration_text(v);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: ignoring %s=%s: %s\n", name, v, e.what());
    return fallback;
  }
}

}  // namespace

int run_server(const ServerOptions& options) {
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  SchedulerOptions so;
  so.runner_exe = options.runner_exe;
  if (so.runner_exe.empty()) {
    if (const char* e = std::getenv("VATIC_RUNNER_EXE"); e && *e)
      so.runner_exe = e;
    else
      so.runner_exe = std::filesystem::read_symlink("/proc/self/exe").string();
  }
  so.max_loaded = std::max(1, env_int("VATIC_MAX_LOADED_MODELS", 2));
  so.max_queue = std::max(1, env_int("VATIC_MAX_QUEUE", 64));
  so.default_keep_alive = env_duration("VATIC_KEEP_ALIVE", 300);
  so.load_timeout = env_duration("VATIC_LOAD_TIMEOUT", 300);
  so.debug = env_flag("VATIC_DEBUG");

  ModelStore store(ModelStore::default_root());
  Scheduler sched(so);
  ApiContext ctx{sched, store, so.debug, {}};
  if (const char* p = std::getenv("VATIC_CREATE_PATHS"); p && *p) ctx.create_roots = parse_create_roots(p);

  httplib::Server svr;
  AccessPolicy access(options.host, std::getenv("VATIC_ORIGINS") ? std::getenv("VATIC_ORIGINS") : "");
  // One thread per connection (up to a generous cap), so idle or slow clients never hold every thread; the body
  // limit is enforced by the routes themselves (whatever the framing), so the library's own check is left wide
  // open for blob uploads.
  const size_t max_connections = static_cast<size_t>(std::max(256, 4 * so.max_queue + 64));
  svr.new_task_queue = [max_connections] { return new ConnectionPool(max_connections); };
  svr.set_payload_max_length(std::numeric_limits<size_t>::max());
  svr.set_read_timeout(30, 0);
  svr.set_write_timeout(30, 0);
  svr.set_keep_alive_timeout(5);
  svr.set_pre_routing_handler([&access](const httplib::Request& req, httplib::Response& res) {
    g_request_start = Clock::now();
    // Bodies are JSON whatever the Content-Type says: form and multipart parsing (and their own limits) never run.
    auto ct = req.get_header_value("Content-Type");
    if (ct.rfind("multipart/", 0) == 0 || ct.rfind("application/x-www-form-urlencoded", 0) == 0)
    {
      auto& r = const_cast<httplib::Request&>(req);
      r.headers.erase("Content-Type");
      r.set_header("Content-Type", "application/octet-stream");
    }
    return apply_access_policy(access, req, res) ? httplib::Server::HandlerResponse::Handled
                                                 : httplib::Server::HandlerResponse::Unhandled;
  });
  const bool debug = so.debug;
  svr.set_logger([debug](const httplib::Request& req, const httplib::Response& res) {
    after_response(req);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - g_request_start).count();
    std::fprintf(stderr, "%s | %3d | %10.2fms | %-15s | %-6s %s\n", rfc3339_now().substr(0, 19).c_str(), res.status, ms,
                 req.remote_addr.c_str(), req.method.c_str(), req.path.c_str());
    if (debug && !req.body.empty() && req.body.size() < 4096) std::fprintf(stderr, "  request: %s\n", req.body.c_str());
  });
  Router router(svr);
  svr.set_error_handler([&router](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    bool openai = req.path.rfind("/v1/", 0) == 0;
    if (res.status == 413) {
      send_error(res, 413, "request body too large (the limit is 32 MiB)", openai);
    } else if (res.status == 404 || res.status == 400 || res.status == 405) {
      auto methods = router.methods_for(req.path);
      if (!methods.empty() && std::find(methods.begin(), methods.end(), req.method) == methods.end()) {
        std::string allow;
        for (const auto& m : methods) allow += (allow.empty() ? "" : ", ") + m;
        res.set_header("Allow", allow);
        send_error(res, 405, fmt::format("method {} not allowed on {} (use {})", req.method, req.path, allow), openai);
      } else if (res.status == 400) {
        send_error(res, 400, fmt::format("{} {}: malformed request", req.method, req.path), openai);
      } else {
        send_error(res, 404, fmt::format("{} {}: no such endpoint", req.method, req.path), openai);
      }
    } else {
      send_error(res, res.status, fmt::format("HTTP {}", res.status), openai);
    }
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg = e.what();
    } catch (...) {
    }
    send_error(res, 500, msg, false);
  });
  register_ollama_routes(router, ctx);
  register_openai_routes(router, ctx);
  router.finish();

  std::string bind_error;
  if (!bind_server(svr, options.host, options.port, &bind_error)) {
    std::fprintf(stderr, "Error: listen tcp %s:%d: bind: %s\n", options.host.c_str(), options.port, bind_error.c_str());
    return 1;
  }
  // Blobs of creates that were killed before writing their manifest, and stale temp files.
  try {
    if (size_t n = store.garbage_collect(); n > 0)
      std::fprintf(stderr, "vatic: removed %zu unreferenced file(s) from the model store\n", n);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: could not clean the model store: %s\n", e.what());
  }
  std::thread signals([&] {
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "vatic: received %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    svr.stop();
  });
  signals.detach();
  std::fprintf(stderr, "vatic: listening on %s:%d (models in %s, keep_alive %gs, max loaded %d, max queue %d)\n",
               options.host.c_str(), options.port, store.root().c_str(), so.default_keep_alive, so.max_loaded,
               so.max_queue);
  svr.listen_after_bind();
  sched.shutdown();
  std::fprintf(stderr, "vatic: stopped\n");
  return 0;
}

}  // namespace vatic::server
