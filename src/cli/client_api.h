#pragma once
// The CLI's side of the ollama-compatible HTTP API: where the server is (VATIC_HOST), JSON requests, NDJSON streams
// that can be cancelled from a signal handler, and the messages a user sees when the server is not there.
#include <atomic>
#include <functional>
#include <string>

#include "util/json.h"

namespace vatic::cli {

inline constexpr const char* kDefaultHost = "127.0.0.1";
inline constexpr int kDefaultPort = 11435;

struct ServerAddress {
  std::string host = kDefaultHost;
  int port = kDefaultPort;
  std::string display() const;  // "127.0.0.1:11435", "[::1]:11435"
};

// Parses VATIC_HOST: "host:port", "http://host:port", "host", ":port", "[v6]:port". Throws InvalidInput.
ServerAddress parse_server_address(const std::string& text);
// The address from $VATIC_HOST, or the default.
ServerAddress server_address_from_env();

// Set by a SIGINT handler; a stream in flight notices it within a few tens of milliseconds, closes its connection
// (which cancels the generation on the server) and returns StreamEnd::cancelled.
extern std::atomic<bool> g_interrupted;
// Installs the SIGINT handler that sets g_interrupted (without SA_RESTART, so blocking reads return EINTR).
void install_interrupt_handler();

enum class StreamEnd { completed, cancelled };

class ApiClient {
 public:
  explicit ApiClient(ServerAddress address = server_address_from_env());

  const ServerAddress& address() const { return address_; }

  // Requests whose whole answer is one JSON object. Throw Error with the server's {"error"} text, or the
  // "could not connect" message.
  json get(const std::string& path) const;
  json post(const std::string& path, const json& body) const;

  // POSTs `body` and calls on_chunk for every NDJSON line of the answer (a plain JSON answer is one chunk). A chunk
  // holding "error" throws Error with its text. Returns cancelled when g_interrupted was set or on_chunk returned
  // false.
  StreamEnd stream(const std::string& path, const json& body, const std::function<bool(const json&)>& on_chunk) const;

  std::string connect_error() const;  // the message for a server that is not running

 private:
  ServerAddress address_;
};

}  // namespace vatic::cli
