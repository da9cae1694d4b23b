#pragma once
// `vatic serve`: the public HTTP API (ollama- and OpenAI-compatible) in front of the scheduler and the model store.
//
// Environment:
//   VATIC_HOST               host:port or http://host:port to bind (default 127.0.0.1:11435)
//   VATIC_MODELS             model store (default ~/.vatic/models)
//   VATIC_KEEP_ALIVE         how long a model stays loaded after a request (default 5m; 0 unload, <0 forever)
//   VATIC_MAX_LOADED_MODELS  models loaded at once (default 2; least recently used idle one is evicted)
//   VATIC_MAX_QUEUE          pending requests before 503 (default 64)
//   VATIC_LOAD_TIMEOUT       how long a model may take to load (default 5m)
//   VATIC_RUNNER_TIMEOUT     how long a runner may stay silent mid-request before it is killed (default 10m)
//   VATIC_DEBUG              1 = more logging
#include <cstdint>
#include <string>

namespace vatic::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 11435;
  std::string runner_exe;  // default: this executable
};

// host:port, http://host:port, host (default port), :port. Throws InvalidInput.
void parse_host(const std::string& text, std::string* host, int* port);

// Serves until SIGINT/SIGTERM; stops the runners on the way out. Returns the exit status.
int run_server(const ServerOptions& options);

}  // namespace vatic::server
