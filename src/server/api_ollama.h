#pragma once
// ollama's API, one handler per route: generation in api_ollama.cpp, model management in
// api_ollama_models.cpp. register_ollama_routes (api_ollama.cpp) maps the paths onto them.
#include "server/api.h"

namespace vatic::server {

// A route's work; register_ollama_routes runs it under guarded(), so a throw becomes an ollama error body.
using OllamaHandler = void (*)(ApiContext& ctx, const httplib::Request& req, httplib::Response& res);

// The model a request names ("model", else ollama's older "name"); HttpError 400 when there is none.
std::string require_model(const ordered_json& body);

// One object per line of an application/x-ndjson stream.
std::string ndjson_line(const ordered_json& j);

// Model management (api_ollama_models.cpp).
inline constexpr const char* kBlobPattern = R"(/api/blobs/([^/]+))";
void handle_tags(ApiContext& ctx, const httplib::Request& req, httplib::Response& res);    // GET /api/tags
void handle_show(ApiContext& ctx, const httplib::Request& req, httplib::Response& res);    // POST /api/show
void handle_create(ApiContext& ctx, const httplib::Request& req, httplib::Response& res);  // POST /api/create
void handle_blob_exists(ApiContext& ctx, const httplib::Request& req,
                        httplib::Response& res);                                         // HEAD /api/blobs/..
StreamingRoute blob_upload_route(ApiContext& ctx);                                       // POST /api/blobs/..
void handle_copy(ApiContext& ctx, const httplib::Request& req, httplib::Response& res);  // POST /api/copy
void handle_delete(ApiContext& ctx, const httplib::Request& req,
                   httplib::Response& res);                                            // DELETE /api/delete
void handle_ps(ApiContext& ctx, const httplib::Request& req, httplib::Response& res);  // GET /api/ps

}  // namespace vatic::server
