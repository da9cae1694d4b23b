// ollama's native API: the route table, the helpers every handler shares, and generation (/api/generate,
// /api/chat, /api/version). Model management is in api_ollama_models.cpp.
#include "chat/types.h"
#include "server/api_ollama.h"
#include "server/inference.h"

#ifndef VATIC_VERSION
#define VATIC_VERSION "0.1.0"
#endif

namespace vatic::server {

void send_error(httplib::Response& res, int status, const std::string& msg, bool openai) {
  res.status = status;
  ordered_json body;
  if (openai) {
    const char* type = status == 400 || status == 404 || status == 413 ? "invalid_request_error"
                       : status == 503                                 ? "server_busy"
                       : status == 501                                 ? "not_implemented"
                                                                       : "api_error";
    ordered_json err = {{"message", msg}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
    if (status == 404) err["code"] = "model_not_found";
    body = {{"error", err}};
  } else {
    body = {{"error", msg}};
  }
  send_json(res, body);
}

void send_json(httplib::Response& res, const ordered_json& body) {
  res.set_content(dump(body), "application/json");
}

void guarded(httplib::Response& res, bool openai, const std::function<void()>& f) {
  try {
    f();
  } catch (const HttpError& e) {
    send_error(res, e.status(), e.what(), openai);
  } catch (const InvalidInput& e) {
    send_error(res, 400, e.what(), openai);
  } catch (const NotFound& e) {
    send_error(res, 404, e.what(), openai);
  } catch (const json::exception& e) {
    send_error(res, 400, e.what(), openai);
  } catch (const std::exception& e) {
    send_error(res, 500, e.what(), openai);
  }
}

void stream_response(httplib::Response& res, const char* content_type, std::function<void(const Writer&)> produce) {
  auto p = std::make_shared<std::function<void(const Writer&)>>(std::move(produce));
  res.set_chunked_content_provider(content_type, [p](size_t, httplib::DataSink& sink) {
    bool ok = true;
    (*p)([&](const std::string& s) {
      if (ok) ok = sink.write(s.data(), s.size());
      return ok;
    });
    sink.done();
    return true;
  });
}

std::optional<bool> parse_think(const ordered_json& body) {
  auto it = body.find("think");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_string()) {
    std::string v = it->get<std::string>();
    if (v == "low" || v == "medium" || v == "high" || v == "max" || v == "true") return true;
    if (v == "none" || v == "false") return false;
    throw HttpError(400, fmt::format("invalid think value \"{}\" (use true, false, \"low\", \"medium\" or \"high\")", v));
  }
  throw HttpError(400, "think must be a boolean or \"low\", \"medium\", \"high\"");
}

std::optional<double> parse_keep_alive_field(const ordered_json& body) {
  auto it = body.find("keep_alive");
  if (it == body.end() || it->is_null()) return std::nullopt;
  try {
    return parse_keep_alive(*it);
  } catch (const InvalidInput& e) {
    throw HttpError(400, e.what());
  }
}

std::string require_model(const ordered_json& body) {
  auto m = opt_string(body, "model");
  if (!m || m->empty()) m = opt_string(body, "name");
  if (!m || m->empty()) throw HttpError(400, "model is required");
  return *m;
}

std::string ndjson_line(const ordered_json& j) { return dump(j) + "\n"; }

namespace {

void refuse_unsupported(const ordered_json& body) {
  if (auto it = body.find("images"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) throw HttpError(400, "field \"images\" must be an array of base64 strings");
    if (!it->empty()) throw HttpError(400, "images are not supported: vatic models are text-only");
  }
  if (auto s = opt_string(body, "suffix"); s && !s->empty()) throw HttpError(400, "suffix (fill-in-the-middle) is not supported");
  if (auto s = opt_string(body, "template"); s && !s->empty())
    throw HttpError(400, "custom templates are not supported: prompts are rendered by the model's renderer");
}

// ollama's logprob shape from the runner's.
ordered_json ollama_logprob(const json& lp) {
  auto bytes_of = [](const std::string& s) {
    ordered_json b = ordered_json::array();
    for (unsigned char c : s) b.push_back(static_cast<int>(c));
    return b;
  };
  std::string tok = lp.value("token", std::string());
  ordered_json o = {{"token", tok}, {"logprob", lp.value("logprob", 0.0)}, {"bytes", bytes_of(tok)}};
  if (lp.contains("top_logprobs") && !lp["top_logprobs"].empty()) {
    ordered_json top = ordered_json::array();
    for (const auto& t : lp["top_logprobs"]) {
      std::string tt = t.value("token", std::string());
      top.push_back({{"token", tt}, {"logprob", t.value("logprob", 0.0)}, {"bytes", bytes_of(tt)}});
    }
    o["top_logprobs"] = top;
  }
  return o;
}

void add_metrics(ordered_json& out, const GenResult& r, Clock::time_point t0) {
  out["total_duration"] = to_ns(std::chrono::duration<double>(Clock::now() - t0).count());
  out["load_duration"] = to_ns(r.load_s);
  // As ollama: the prompt tokens the model evaluated; those the prefix cache supplied are in prompt_cache.reused.
  out["prompt_eval_count"] = r.prompt_evaluated;
  out["prompt_eval_duration"] = to_ns(r.prefill_s);
  out["eval_count"] = r.generated;
  out["eval_duration"] = to_ns(r.decode_s);
  add_extension_stats(out, r);
}

struct InferenceCall {
  bool chat = false;
  std::string model;
  ModelMeta meta;
  GenRequest g;
  bool stream = true;
  bool empty = false;  // load / unload request
  std::optional<double> keep_alive;
};

ordered_json chunk_base(const InferenceCall& c) {
  return {{"model", c.model}, {"created_at", rfc3339_now()}};
}

// The reply of a final chunk (or of a load / unload): an empty assistant message for chat, an empty response
// for generate.
void add_empty_reply(ordered_json& out, const InferenceCall& c) {
  if (c.chat)
    out["message"] = {{"role", "assistant"}, {"content", ""}};
  else
    out["response"] = "";
}

// The reply part of a chunk or of the whole answer: chat puts it in a message, generate at the top level
// (where ollama has no tool calls).
void add_reply(ordered_json& out, const InferenceCall& c, const std::string& content,
               const std::string& thinking, const ordered_json& calls) {
  if (c.chat) {
    ordered_json msg = {{"role", "assistant"}, {"content", content}};
    if (!thinking.empty()) msg["thinking"] = thinking;
    if (!calls.empty()) msg["tool_calls"] = calls;
    out["message"] = msg;
  } else {
    out["response"] = content;
    if (!thinking.empty()) out["thinking"] = thinking;
  }
}

// A request with nothing to generate loads the model (or unloads it with keep_alive 0), as ollama does.
void respond_load(ApiContext& ctx, InferenceCall& c, httplib::Response& res, Clock::time_point t0) {
  ordered_json out = chunk_base(c);
  std::string reason = "load";
  double load_s = 0;
  if (c.keep_alive && *c.keep_alive == 0) {
    ctx.sched.unload(c.meta.name);
    reason = "unload";
  } else {
    auto lease = ctx.sched.acquire(c.meta.name, c.keep_alive, c.g.num_ctx, c.meta.digest);
    load_s = lease->load_seconds();
  }
  add_empty_reply(out, c);
  out["done"] = true;
  out["done_reason"] = reason;
  if (reason == "load") {
    out["total_duration"] = to_ns(std::chrono::duration<double>(Clock::now() - t0).count());
    out["load_duration"] = to_ns(load_s);
  }
  send_json(res, out);
}

ordered_json piece_chunk(const InferenceCall& c, const GenPiece& p) {
  ordered_json o = chunk_base(c);
  ordered_json calls = ordered_json::array();
  for (const auto& tc : p.tool_calls) calls.push_back(tc.to_json());
  add_reply(o, c, p.content, p.thinking, calls);
  o["done"] = false;
  if (!p.logprobs.empty()) {
    ordered_json l = ordered_json::array();
    for (const auto& lp : p.logprobs) l.push_back(ollama_logprob(lp));
    o["logprobs"] = l;
  }
  return o;
}

// One line per piece, then a final chunk with the metrics; nothing more once the client is gone (the
// generation stops when a write fails).
void stream_inference(httplib::Response& res, std::shared_ptr<Generation> gen, InferenceCall c,
                      Clock::time_point t0) {
  stream_response(res, "application/x-ndjson", [gen, c, t0](const Writer& write) {
    try {
      GenResult r = gen->run([&](const GenPiece& p) { return write(ndjson_line(piece_chunk(c, p))); });
      if (r.cancelled) return;
      ordered_json fin = chunk_base(c);
      add_empty_reply(fin, c);
      fin["done"] = true;
      fin["done_reason"] = r.done_reason;
      add_metrics(fin, r, t0);
      write(ndjson_line(fin));
    } catch (const std::exception& e) {
      write(ndjson_line(ordered_json{{"error", e.what()}}));
    }
  });
}

void respond_inference(httplib::Response& res, Generation& gen, const InferenceCall& c,
                       Clock::time_point t0) {
  std::string content, thinking;
  ordered_json calls = ordered_json::array(), lps = ordered_json::array();
  GenResult r = gen.run([&](const GenPiece& p) {
    content += p.content;
    thinking += p.thinking;
    for (const auto& tc : p.tool_calls) calls.push_back(tc.to_json());
    for (const auto& lp : p.logprobs) lps.push_back(ollama_logprob(lp));
    return true;
  });
  ordered_json out = chunk_base(c);
  add_reply(out, c, content, thinking, calls);
  out["done"] = true;
  out["done_reason"] = r.done_reason;
  add_metrics(out, r, t0);
  if (!lps.empty()) out["logprobs"] = lps;
  send_json(res, out);
}

void run_inference(ApiContext& ctx, InferenceCall c, httplib::Response& res, Clock::time_point t0) {
  if (c.empty) return respond_load(ctx, c, res, t0);
  auto gen = std::make_shared<Generation>(ctx.sched, c.g);
  if (c.stream) return stream_inference(res, gen, std::move(c), t0);
  respond_inference(res, *gen, c, t0);
}

// format: "json" or a JSON schema (the runner refuses what it cannot honour, naming the keyword).
void parse_format(const ordered_json& body, GenRequest& g) {
  auto it = body.find("format");
  if (it == body.end() || it->is_null()) return;
  if (it->is_string()) {
    const std::string f = it->get<std::string>();
    if (f == "json") g.format = "json";
    else if (!f.empty()) throw HttpError(400, fmt::format("invalid format \"{}\": use \"json\" or a JSON schema object", f));
  } else if (it->is_object()) {
    g.format = *it;
  } else {
    throw HttpError(400, "format must be \"json\" or a JSON schema object");
  }
}

// Fields common to generate and chat.
InferenceCall common_fields(ApiContext& ctx, const ordered_json& body, bool chat) {
  InferenceCall c;
  c.chat = chat;
  c.model = require_model(body);
  c.meta = model_meta(ctx.store, c.model);
  refuse_unsupported(body);
  c.stream = opt_bool(body, "stream").value_or(true);
  c.keep_alive = parse_keep_alive_field(body);
  c.g.model = c.meta.name;
  c.g.digest = c.meta.digest;
  c.g.keep_alive = c.keep_alive;
  const ordered_json* opts = body.contains("options") ? &body["options"] : nullptr;
  c.g.options = merge_options(c.meta.params, opts, &c.g.num_ctx);
  c.g.logprobs = opt_bool(body, "logprobs").value_or(false);
  auto top = opt_int(body, "top_logprobs").value_or(0);
  if (top < 0 || top > 20) throw HttpError(400, "top_logprobs must be between 0 and 20");
  c.g.top_logprobs = static_cast<int>(top);
  parse_format(body, c.g);
  if (c.g.top_logprobs > 0) c.g.logprobs = true;
  return c;
}

std::vector<chat::Message> parse_messages(const ordered_json& body) {
  std::vector<chat::Message> msgs;
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return msgs;
  if (!it->is_array()) throw HttpError(400, "messages must be an array");
  for (const auto& m : *it) {
    if (!m.is_object()) throw HttpError(400, "each message must be an object");
    if (auto im = m.find("images"); im != m.end() && !im->is_null()) {
      if (!im->is_array()) throw HttpError(400, "message images must be an array of base64 strings");
      if (!im->empty()) throw HttpError(400, "images are not supported: vatic models are text-only");
    }
    msgs.push_back(chat::Message::from_json(m));
  }
  return msgs;
}

std::vector<chat::Tool> parse_tools(const ordered_json& body) {
  std::vector<chat::Tool> tools;
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) throw HttpError(400, "tools must be an array");
    for (const auto& t : *it) tools.push_back(chat::Tool::from_json(t));
  }
  return tools;
}

// GET / (ollama's clients probe it).
void handle_root(const httplib::Request&, httplib::Response& res) {
  res.set_content("vatic is running", "text/plain");
}

// GET /api/version
void handle_version(const httplib::Request&, httplib::Response& res) {
  send_json(res, ordered_json{{"version", VATIC_VERSION}});
}

// POST /api/generate
void handle_generate(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto t0 = Clock::now();
  ordered_json body = parse_body(req.body);
  InferenceCall c = common_fields(ctx, body, false);
  std::string prompt = opt_string(body, "prompt").value_or("");
  bool raw = opt_bool(body, "raw").value_or(false);
  std::optional<bool> think = think_with_format(c.g.format, parse_think(body));
  c.empty = prompt.empty();
  if (!c.empty) {
    if (raw || c.meta.renderer == kRawRenderer) {
      c.g.prompt = prompt;
      c.g.add_special = true;
    } else {
      std::vector<chat::Message> msgs;
      ModelMeta meta = c.meta;
      if (auto sys = opt_string(body, "system")) meta.system = *sys;
      chat::Message u;
      u.role = "user";
      u.content = prompt;
      msgs.push_back(u);
      c.g.prompt = render_chat(meta, msgs, {}, think, &c.g.parser_options);
      c.g.parser = meta.parser;
    }
  }
  run_inference(ctx, std::move(c), res, t0);
}

// POST /api/chat
void handle_chat(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto t0 = Clock::now();
  ordered_json body = parse_body(req.body);
  InferenceCall c = common_fields(ctx, body, true);
  std::vector<chat::Message> msgs = parse_messages(body);
  std::vector<chat::Tool> tools = parse_tools(body);
  std::optional<bool> think = think_with_format(c.g.format, parse_think(body));
  c.empty = msgs.empty();
  if (!c.empty) {
    c.g.prompt = render_chat(c.meta, msgs, tools, think, &c.g.parser_options);
    c.g.parser = c.meta.parser;
  }
  run_inference(ctx, std::move(c), res, t0);
}

Handler guarded_route(ApiContext& ctx, OllamaHandler h) {
  return [&ctx, h](const httplib::Request& req, httplib::Response& res) {
    guarded(res, false, [&] { h(ctx, req, res); });
  };
}

Handler not_implemented(const std::string& what) {
  return [what](const httplib::Request&, httplib::Response& res) { send_error(res, 501, what, false); };
}

}  // namespace

void register_ollama_routes(Router& svr, ApiContext& ctx) {
  svr.get("/", handle_root);
  svr.get("/api/version", handle_version);

  // Generation (this file).
  svr.post("/api/generate", guarded_route(ctx, handle_generate));
  svr.post("/api/chat", guarded_route(ctx, handle_chat));

  // Model management (api_ollama_models.cpp).
  svr.get("/api/tags", guarded_route(ctx, handle_tags));
  svr.post("/api/show", guarded_route(ctx, handle_show));
  svr.post("/api/create", guarded_route(ctx, handle_create));
  // Blobs: files a client uploads before /api/create names them in `files` (ollama's way of creating from a
  // client's local files). GET answers only HEAD: whether the blob is there.
  svr.get(kBlobPattern, guarded_route(ctx, handle_blob_exists));
  svr.post_streaming(kBlobPattern, [&ctx]() { return blob_upload_route(ctx); });
  svr.post("/api/copy", guarded_route(ctx, handle_copy));
  svr.del("/api/delete", guarded_route(ctx, handle_delete));
  svr.get("/api/ps", guarded_route(ctx, handle_ps));

  svr.post("/api/embed", not_implemented("embeddings are not supported yet"));
  svr.post("/api/embeddings", not_implemented("embeddings are not supported yet"));
  svr.post("/api/pull", not_implemented("pulling from a registry is not supported: create models from local "
                                        "safetensors directories with /api/create"));
  svr.post("/api/push", not_implemented("pushing to a registry is not supported"));
}

}  // namespace vatic::server
