#pragma once
// HTTP handlers of the public API: ollama's (api_ollama.h, api_ollama*.cpp) and OpenAI's (api_openai.cpp).
#include "server/http.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/scheduler.h"
#include "server/util.h"
#include "store/store.h"

namespace vatic::server {

struct ApiContext {
  Scheduler& sched;
  ModelStore& store;
  bool debug = false;
  // Folders /api/create may read from on the server (VATIC_CREATE_PATHS); empty: none, clients upload blobs.
  std::vector<std::filesystem::path> create_roots;
};

// VATIC_CREATE_PATHS: folders separated by ':' (canonical; missing ones are dropped with a warning).
std::vector<std::filesystem::path> parse_create_roots(const std::string& text);

// Checks that a chat format name is one the server knows (or "raw" for the renderer); HttpError 400 otherwise.
void check_chat_format_names(const std::string& renderer, const std::string& parser);

// Error bodies: ollama {"error": msg}; OpenAI {"error": {"message", "type", "param", "code"}}.
void send_error(httplib::Response& res, int status, const std::string& msg, bool openai = false);
// A JSON body (application/json).
void send_json(httplib::Response& res, const ordered_json& body);
// Runs f, turning exceptions into error responses with their status.
void guarded(httplib::Response& res, bool openai, const std::function<void()>& f);

// A response streamed in pieces: `produce` gets a write function (false once the client is gone).
using Writer = std::function<bool(const std::string&)>;
void stream_response(httplib::Response& res, const char* content_type, std::function<void(const Writer&)> produce);

// ollama's `think`: bool or "low"/"medium"/"high"/"max" (on); absent = the format's default.
std::optional<bool> parse_think(const ordered_json& body);
std::optional<double> parse_keep_alive_field(const ordered_json& body);

void register_ollama_routes(Router& svr, ApiContext& ctx);
void register_openai_routes(Router& svr, ApiContext& ctx);

}  // namespace vatic::server
