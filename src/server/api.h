#pragma once
// HTTP handlers of the public API: ollama's (api_ollama.cpp) and OpenAI's (api_openai.cpp).
#include <httplib.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/scheduler.h"
#include "server/util.h"
#include "store/store.h"

namespace vatic::server {

struct ApiContext {
  Scheduler& sched;
  ModelStore& store;
  bool debug = false;
};

// Error bodies: ollama {"error": msg}; OpenAI {"error": {"message", "type", "param", "code"}}.
void send_error(httplib::Response& res, int status, const std::string& msg, bool openai = false);
// Runs f, turning exceptions into error responses with their status.
void guarded(httplib::Response& res, bool openai, const std::function<void()>& f);

// A response streamed in pieces: `produce` gets a write function (false once the client is gone).
using Writer = std::function<bool(const std::string&)>;
void stream_response(httplib::Response& res, const char* content_type, std::function<void(const Writer&)> produce);

// ollama's `think`: bool or "low"/"medium"/"high"/"max" (on); absent = the format's default.
std::optional<bool> parse_think(const ordered_json& body);
std::optional<double> parse_keep_alive_field(const ordered_json& body);

void register_ollama_routes(httplib::Server& svr, ApiContext& ctx);
void register_openai_routes(httplib::Server& svr, ApiContext& ctx);

}  // namespace vatic::server
