#include "cli/client_api.h"

#include <csignal>
#include <cstdlib>
#include <thread>

#include <httplib.h>

#include "util/error.h"

namespace vatic::cli {

std::atomic<bool> g_interrupted{false};

namespace {

void on_sigint(int) { g_interrupted.store(true); }

std::string error_text(int status, const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const auto& e = j["error"];
    return e.is_string() ? e.get<std::string>() : e.dump();
  }
  std::string trimmed = body.size() > 500 ? body.substr(0, 500) + "..." : body;
  while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == '\r')) trimmed.pop_back();
  return trimmed.empty() ? fmt::format("server answered HTTP {}", status)
                         : fmt::format("server answered HTTP {}: {}", status, trimmed);
}

std::unique_ptr<httplib::Client> make_client(const ServerAddress& a) {
  auto c = std::make_unique<httplib::Client>(a.host, a.port);
  c->set_connection_timeout(5, 0);
  // Loading a model or a long prefill can keep the first chunk away for minutes.
  c->set_read_timeout(24 * 3600, 0);
  c->set_write_timeout(60, 0);
  c->set_keep_alive(false);
  return c;
}

[[noreturn]] void throw_transport(const ApiClient& client, httplib::Error e) {
  if (e == httplib::Error::Connection) throw Error(client.connect_error());
  throw Error(fmt::format("lost the connection to the vatic server at {} ({})", client.address().display(),
                          httplib::to_string(e)));
}

}  // namespace

std::string ServerAddress::display() const {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

ServerAddress parse_server_address(const std::string& text) {
  ServerAddress a;
  std::string s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (s.empty()) return a;
  if (auto p = s.find("://"); p != std::string::npos) {
    std::string scheme = s.substr(0, p);
    if (scheme != "http")
      throw InvalidInput(fmt::format("VATIC_HOST '{}': only http:// is supported", text));
    s = s.substr(p + 3);
  }
  if (auto slash = s.find('/'); slash != std::string::npos) s = s.substr(0, slash);
  std::string port;
  if (!s.empty() && s[0] == '[') {
    auto close = s.find(']');
    if (close == std::string::npos) throw InvalidInput(fmt::format("VATIC_HOST '{}': unterminated '['", text));
    a.host = s.substr(1, close - 1);
    if (close + 1 < s.size()) {
      if (s[close + 1] != ':') throw InvalidInput(fmt::format("VATIC_HOST '{}': expected ':port' after ']'", text));
      port = s.substr(close + 2);
    }
  } else if (auto colon = s.rfind(':'); colon != std::string::npos) {
    if (s.find(':') != colon) {
      a.host = s;  // a bare IPv6 address
    } else {
      if (colon > 0) a.host = s.substr(0, colon);
      port = s.substr(colon + 1);
    }
  } else {
    a.host = s;
  }
  if (!port.empty()) {
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535)
      throw InvalidInput(fmt::format("VATIC_HOST '{}': '{}' is not a port number", text, port));
    a.port = static_cast<int>(p);
  }
  if (a.host.empty()) a.host = kDefaultHost;
  return a;
}

ServerAddress server_address_from_env() {
  const char* env = std::getenv("VATIC_HOST");
  return env ? parse_server_address(env) : ServerAddress{};
}

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read at the prompt returns so the loop can see the flag
  sigaction(SIGINT, &sa, nullptr);
}

ApiClient::ApiClient(ServerAddress address) : address_(std::move(address)) {}

std::string ApiClient::connect_error() const {
  return fmt::format("could not connect to vatic server at {} \u2014 start it with 'vatic serve' (or set VATIC_HOST)",
                     address_.display());
}

json ApiClient::get(const std::string& path) const {
  auto c = make_client(address_);
  auto res = c->Get(path.c_str());
  if (!res) throw_transport(*this, res.error());
  if (res->status != 200) throw Error(error_text(res->status, res->body));
  auto j = json::parse(res->body, nullptr, false);
  if (j.is_discarded()) throw Error(fmt::format("the server's answer to {} is not JSON", path));
  return j;
}

json ApiClient::post(const std::string& path, const json& body) const {
  auto c = make_client(address_);
  auto res = c->Post(path.c_str(), body.dump(), "application/json");
  if (!res) throw_transport(*this, res.error());
  if (res->status != 200) throw Error(error_text(res->status, res->body));
  auto j = json::parse(res->body, nullptr, false);
  if (j.is_discarded()) throw Error(fmt::format("the server's answer to {} is not JSON", path));
  return j;
}

StreamEnd ApiClient::stream(const std::string& path, const json& body,
                            const std::function<bool(const json&)>& on_chunk) const {
  auto c = make_client(address_);
  int status = 0;
  std::string pending;     // an NDJSON line not yet complete
  std::string error_body;  // the body of a non-200 answer
  bool stopped_by_caller = false;
  std::string stream_error;

  auto handle_line = [&](std::string_view line) -> bool {
    while (!line.empty() && (line.back() == '\r' || std::isspace(static_cast<unsigned char>(line.back()))))
      line.remove_suffix(1);
    if (line.empty()) return true;
    auto j = json::parse(line, nullptr, false);
    if (j.is_discarded()) return true;  // like ollama's clients: skip what is not a JSON line
    if (j.is_object() && j.contains("error")) {
      stream_error = j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump();
      return false;
    }
    if (!on_chunk(j)) {
      stopped_by_caller = true;
      return false;
    }
    return true;
  };

  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.headers.emplace("Content-Type", "application/json");
  req.headers.emplace("Accept", "application/x-ndjson");
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) -> bool {
    if (g_interrupted.load()) return false;
    if (status != 200) {
      error_body.append(data, n);
      return true;
    }
    pending.append(data, n);
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      if (!handle_line(std::string_view(pending).substr(start, nl - start))) return false;
    }
    pending.erase(0, start);
    return true;
  };

  // Ctrl-C may arrive while the server is silent (loading, prefill): close the socket from another thread so the
  // blocked read returns at once. Closing the connection is what cancels the request on the server.
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done.load()) {
      if (g_interrupted.load()) {
        c->stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool ok = c->send(req, res, err);
  done.store(true);
  watcher.join();

  if (!stream_error.empty()) throw Error(stream_error);
  if (stopped_by_caller || g_interrupted.load()) return StreamEnd::cancelled;
  if (!ok) throw_transport(*this, err);
  if (res.status != 200) throw Error(error_text(res.status, error_body.empty() ? res.body : error_body));
  if (!pending.empty()) {
    std::string last = std::move(pending);
    pending.clear();
    if (!handle_line(last)) {
      if (!stream_error.empty()) throw Error(stream_error);
      return StreamEnd::cancelled;
    }
  }
  return StreamEnd::completed;
}

}  // namespace vatic::cli
