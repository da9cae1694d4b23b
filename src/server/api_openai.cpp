// OpenAI-compatible API: /v1/chat/completions, /v1/completions, /v1/models.
#include "chat/types.h"
#include "server/api.h"
#include "server/inference.h"

namespace vatic::server {

namespace {

struct OpenAICall {
  ModelMeta meta;
  GenRequest g;
  bool stream = false;
  bool include_usage = false;
  std::string id;
  int64_t created = 0;
};

// Maps OpenAI sampling fields onto runner options (over the model's PARAMETERs).
void openai_options(const ordered_json& body, OpenAICall& c) {
  ordered_json o = ordered_json::object();
  if (auto v = opt_number(body, "temperature")) o["temperature"] = *v;
  if (auto v = opt_number(body, "top_p")) o["top_p"] = *v;
  if (auto v = opt_number(body, "frequency_penalty")) o["frequency_penalty"] = *v;
  if (auto v = opt_number(body, "presence_penalty")) o["presence_penalty"] = *v;
  if (auto v = opt_int(body, "seed")) o["seed"] = *v;
  if (auto v = opt_int(body, "max_completion_tokens")) o["num_predict"] = *v;
  else if (auto v2 = opt_int(body, "max_tokens")) o["num_predict"] = *v2;
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) o["stop"] = *it;
  // ollama extension: "options" with native names.
  if (auto it = body.find("options"); it != body.end() && it->is_object())
    for (const auto& [k, v] : it->items()) o[k] = v;
  if (auto v = opt_int(body, "n"); v && *v != 1) throw HttpError(400, "n must be 1");
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) throw HttpError(400, "response_format must be an object");
    std::string type = it->value("type", std::string("text"));
    if (type == "json_object") {
      c.g.format = "json";
    } else if (type == "json_schema") {
      auto js = it->find("json_schema");
      if (js == it->end() || !js->is_object() || !js->contains("schema") || !(*js)["schema"].is_object())
        throw HttpError(400, "response_format json_schema needs json_schema.schema (a JSON schema object)");
      c.g.format = (*js)["schema"];  // strict or not, the output follows the schema exactly
    } else if (type != "text") {
      throw HttpError(400, "unknown response_format type \"" + type + "\" (text, json_object, json_schema)");
    }
  }
  c.g.options = merge_options(c.meta.params, &o, &c.g.num_ctx);
  c.g.keep_alive = parse_keep_alive_field(body);
}

void common(ApiContext& ctx, const ordered_json& body, OpenAICall& c, const char* prefix) {
  auto model = opt_string(body, "model");
  if (!model || model->empty()) throw HttpError(400, "model is required");
  c.meta = model_meta(ctx.store, *model);
  c.g.model = c.meta.name;
  c.g.digest = c.meta.digest;
  c.stream = opt_bool(body, "stream").value_or(false);
  if (auto it = body.find("stream_options"); it != body.end() && it->is_object())
    c.include_usage = it->value("include_usage", false);
  c.id = std::string(prefix) + random_hex(24);
  c.created = unix_now();
  openai_options(body, c);
}

std::string finish_reason(const GenResult& r) {
  if (r.tool_calls) return "tool_calls";
  return r.done_reason == "length" ? "length" : "stop";
}

ordered_json usage(const GenResult& r) {
  ordered_json u = {{"prompt_tokens", r.prompt_tokens},
                    {"completion_tokens", r.generated},
                    {"total_tokens", r.prompt_tokens + r.generated}};
  u["prompt_tokens_details"] = {{"cached_tokens", r.prompt_reused}};
  return u;
}

// The legacy completions shape: parallel arrays of tokens, their logprobs, {token: logprob} alternatives and the
// tokens' offsets in the text (from `offset`, the text already sent).
ordered_json completion_logprobs(const json& runner_lps, size_t offset) {
  ordered_json tokens = ordered_json::array(), token_lps = ordered_json::array(), tops = ordered_json::array(),
               offsets = ordered_json::array();
  for (const auto& lp : runner_lps) {
    std::string tok = lp.value("token", std::string());
    tokens.push_back(tok);
    token_lps.push_back(lp.value("logprob", 0.0));
    ordered_json top = ordered_json::object();
    if (lp.contains("top_logprobs"))
      for (const auto& t : lp["top_logprobs"]) top[t.value("token", std::string())] = t.value("logprob", 0.0);
    tops.push_back(top);
    offsets.push_back(offset);
    offset += tok.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

ordered_json openai_logprobs(const json& runner_lps) {
  auto bytes_of = [](const std::string& s) {
    ordered_json b = ordered_json::array();
    for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
    return b;
  };
  ordered_json content = ordered_json::array();
  for (const auto& lp : runner_lps) {
    std::string tok = lp.value("token", std::string());
    ordered_json top = ordered_json::array();
    if (lp.contains("top_logprobs"))
      for (const auto& t : lp["top_logprobs"]) {
        std::string tt = t.value("token", std::string());
        top.push_back({{"token", tt}, {"logprob", t.value("logprob", 0.0)}, {"bytes", bytes_of(tt)}});
      }
    content.push_back({{"token", tok}, {"logprob", lp.value("logprob", 0.0)}, {"bytes", bytes_of(tok)}, {"top_logprobs", top}});
  }
  return content;
}

ordered_json tool_calls_json(const std::vector<chat::ToolCall>& calls, size_t first_index) {
  ordered_json out = ordered_json::array();
  size_t i = first_index;
  for (const auto& tc : calls) {
    std::string id = tc.id.empty() ? "call_" + random_hex(16) : tc.id;
    out.push_back({{"index", i++},
                   {"id", id},
                   {"type", "function"},
                   {"function", {{"name", tc.name}, {"arguments", tc.arguments.dump()}}}});
  }
  return out;
}

std::string sse(const ordered_json& j) { return "data: " + dump(j) + "\n\n"; }

void add_vatic_stats(ordered_json& out, const GenResult& r) {
  ordered_json ext;
  add_extension_stats(ext, r);
  out["vatic"] = ext;
}

// The fields every object of a response carries (`object` names its kind).
ordered_json response_base(const OpenAICall& c, const char* object) {
  return ordered_json{{"id", c.id},
                      {"object", object},
                      {"created", c.created},
                      {"model", c.meta.name},
                      {"system_fingerprint", "fp_vatic"}};
}

// A server-sent-events stream. `produce` returns false when the stream ends early (the client cancelled or is
// gone); otherwise "data: [DONE]" closes it, also after an error event.
void stream_events(httplib::Response& res, std::function<bool(const Writer&)> produce) {
  stream_response(res, "text/event-stream", [produce = std::move(produce)](const Writer& write) {
    try {
      if (!produce(write)) return;
    } catch (const std::exception& e) {
      write(sse(ordered_json{
          {"error", {{"message", e.what()}, {"type", "api_error"}, {"param", nullptr}, {"code", nullptr}}}}));
    }
    write("data: [DONE]\n\n");
  });
}

// The last events of a stream: the final chunk (with vatic's stats), then the usage chunk when the client
// asked for it (stream_options.include_usage). False once the client is gone.
bool write_stream_end(const Writer& write, const OpenAICall& c, const GenResult& r, ordered_json fin,
                      const char* object) {
  add_vatic_stats(fin, r);
  if (!write(sse(fin))) return false;
  if (c.include_usage) {
    ordered_json u = response_base(c, object);
    u["choices"] = ordered_json::array();
    u["usage"] = usage(r);
    if (!write(sse(u))) return false;
  }
  return true;
}

// Chat messages; only text content parts (vatic models are text-only).
std::vector<chat::Message> chat_messages(const ordered_json& body) {
  std::vector<chat::Message> msgs;
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty())
    throw HttpError(400, "messages must be a non-empty array");
  for (const auto& m : *it) {
    if (!m.is_object()) throw HttpError(400, "each message must be an object");
    if (auto ct = m.find("content"); ct != m.end() && ct->is_array())
      for (const auto& part : *ct)
        if (part.is_object() && part.value("type", std::string("text")) != "text")
          throw HttpError(400, "only text content parts are supported (vatic models are text-only)");
    msgs.push_back(chat::Message::from_json(m));
  }
  return msgs;
}

std::vector<chat::Tool> chat_tools(const ordered_json& body) {
  std::vector<chat::Tool> tools;
  if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
    if (!t->is_array()) throw HttpError(400, "tools must be an array");
    for (const auto& x : *t) tools.push_back(chat::Tool::from_json(x));
  }
  return tools;
}

// reasoning_effort (or the newer reasoning.effort) as thinking on / off; absent = the format's default.
std::optional<bool> reasoning_think(const ordered_json& body) {
  std::optional<std::string> effort = opt_string(body, "reasoning_effort");
  if (auto r = body.find("reasoning"); !effort && r != body.end() && r->is_object())
    effort = opt_string(*r, "effort");
  if (!effort) return std::nullopt;
  if (*effort == "none") return false;
  if (*effort == "low" || *effort == "medium" || *effort == "high" || *effort == "max" ||
      *effort == "minimal")
    return true;
  throw HttpError(400, "invalid reasoning_effort \"" + *effort + "\" (none, low, medium, high)");
}

// A chat completion request: the model's call with its prompt rendered.
OpenAICall chat_call(ApiContext& ctx, const ordered_json& body) {
  OpenAICall c;
  common(ctx, body, c, "chatcmpl-");
  std::vector<chat::Message> msgs = chat_messages(body);
  std::vector<chat::Tool> tools = chat_tools(body);
  std::optional<bool> think = reasoning_think(body);
  c.g.logprobs = opt_bool(body, "logprobs").value_or(false);
  auto top = opt_int(body, "top_logprobs").value_or(0);
  if (top < 0 || top > 20) throw HttpError(400, "top_logprobs must be between 0 and 20");
  c.g.top_logprobs = c.g.logprobs ? static_cast<int>(top) : 0;
  think = think_with_format(c.g.format, think);
  if (auto tc = body.find("tool_choice"); tc != body.end()) {
    c.g.tool_calls = tool_choice_spec(c.meta, *tc, tools);
    if (!c.g.tool_calls.is_null() && !c.g.format.is_null())
      throw HttpError(400, "response_format and a required tool call cannot be combined");
    if (!c.g.tool_calls.is_null()) think = think_with_format(c.g.tool_calls, think);
  }
  c.g.prompt = render_chat(c.meta, msgs, tools, think, &c.g.parser_options);
  c.g.parser = c.meta.parser;
  return c;
}

void stream_chat(httplib::Response& res, std::shared_ptr<Generation> gen, const OpenAICall& c) {
  stream_events(res, [gen, c](const Writer& write) {
    size_t tool_index = 0;
    bool first = true;
    GenResult r = gen->run([&](const GenPiece& p) {
      ordered_json delta = ordered_json::object();
      if (first) delta["role"] = "assistant";
      first = false;
      delta["content"] = p.content;
      if (!p.thinking.empty()) {
        delta["reasoning"] = p.thinking;
        delta["reasoning_content"] = p.thinking;
      }
      if (!p.tool_calls.empty()) {
        delta["tool_calls"] = tool_calls_json(p.tool_calls, tool_index);
        tool_index += p.tool_calls.size();
      }
      ordered_json choice = {
          {"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
      if (!p.logprobs.empty()) choice["logprobs"] = {{"content", openai_logprobs(p.logprobs)}};
      ordered_json chunk = response_base(c, "chat.completion.chunk");
      chunk["choices"] = ordered_json::array({choice});
      return write(sse(chunk));
    });
    if (r.cancelled) return false;
    ordered_json fin = response_base(c, "chat.completion.chunk");
    ordered_json delta = ordered_json::object();
    if (first) delta["role"] = "assistant";
    delta["content"] = "";
    fin["choices"] = ordered_json::array(
        {{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish_reason(r)}}});
    return write_stream_end(write, c, r, std::move(fin), "chat.completion.chunk");
  });
}

void respond_chat(httplib::Response& res, Generation& gen, const OpenAICall& c) {
  std::string content, thinking;
  std::vector<chat::ToolCall> calls;
  json lps = json::array();
  GenResult r = gen.run([&](const GenPiece& p) {
    content += p.content;
    thinking += p.thinking;
    calls.insert(calls.end(), p.tool_calls.begin(), p.tool_calls.end());
    for (const auto& lp : p.logprobs) lps.push_back(lp);
    return true;
  });
  ordered_json msg = {{"role", "assistant"}, {"content", content}};
  if (!thinking.empty()) {
    msg["reasoning"] = thinking;
    msg["reasoning_content"] = thinking;
  }
  if (!calls.empty()) msg["tool_calls"] = tool_calls_json(calls, 0);
  ordered_json choice = {
      {"index", 0}, {"message", msg}, {"logprobs", nullptr}, {"finish_reason", finish_reason(r)}};
  if (c.g.logprobs) choice["logprobs"] = {{"content", openai_logprobs(lps)}};
  ordered_json out = response_base(c, "chat.completion");
  out["choices"] = ordered_json::array({choice});
  out["usage"] = usage(r);
  add_vatic_stats(out, r);
  send_json(res, out);
}

// POST /v1/chat/completions
void handle_chat_completions(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  ordered_json body = parse_body(req.body);
  OpenAICall c = chat_call(ctx, body);
  auto gen = std::make_shared<Generation>(ctx.sched, c.g);
  if (c.stream) return stream_chat(res, gen, c);
  respond_chat(res, *gen, c);
}

// The legacy completions prompt: one string (or an array of exactly one).
std::string completion_prompt(const ordered_json& body) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) throw HttpError(400, "prompt is required");
  std::string prompt;
  if (it->is_string())
    prompt = it->get<std::string>();
  else if (it->is_array() && it->size() == 1 && (*it)[0].is_string())
    prompt = (*it)[0].get<std::string>();
  else
    throw HttpError(400, "prompt must be a string (arrays of prompts and token arrays are not supported)");
  if (prompt.empty()) throw HttpError(400, "prompt must not be empty");
  return prompt;
}

// A legacy completion request: the model's call with its prompt.
OpenAICall completion_call(ApiContext& ctx, const ordered_json& body) {
  OpenAICall c;
  common(ctx, body, c, "cmpl-");
  std::string prompt = completion_prompt(body);
  if (auto s = opt_string(body, "suffix"); s && !s->empty()) throw HttpError(400, "suffix is not supported");
  // The legacy API's logprobs: a number of alternatives per token (0-5 in OpenAI's; up to 20 here).
  if (auto lp = opt_int(body, "logprobs")) {
    if (*lp < 0 || *lp > 20) throw HttpError(400, "logprobs must be between 0 and 20");
    c.g.logprobs = true;
    c.g.top_logprobs = static_cast<int>(*lp);
  }
  // As ollama does: the prompt goes through the model's chat format as one user turn.
  chat::Message u;
  u.role = "user";
  u.content = prompt;
  if (!c.meta.renderer.empty() && c.meta.renderer != kRawRenderer) {
    c.g.prompt = render_chat(c.meta, {u}, {}, false, &c.g.parser_options);
    c.g.parser = c.meta.parser;
  } else {
    c.g.prompt = prompt;
    c.g.add_special = true;
  }
  return c;
}

void stream_completion(httplib::Response& res, std::shared_ptr<Generation> gen, const OpenAICall& c) {
  stream_events(res, [gen, c](const Writer& write) {
    size_t offset = 0;
    GenResult r = gen->run([&](const GenPiece& p) {
      if (p.content.empty() && p.logprobs.empty()) return true;
      ordered_json chunk = response_base(c, "text_completion");
      ordered_json lps = nullptr;
      if (c.g.logprobs) lps = completion_logprobs(p.logprobs, offset);
      offset += p.content.size();
      chunk["choices"] = ordered_json::array(
          {{{"text", p.content}, {"index", 0}, {"logprobs", lps}, {"finish_reason", nullptr}}});
      return write(sse(chunk));
    });
    if (r.cancelled) return false;
    ordered_json fin = response_base(c, "text_completion");
    fin["choices"] = ordered_json::array(
        {{{"text", ""}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason(r)}}});
    return write_stream_end(write, c, r, std::move(fin), "text_completion");
  });
}

void respond_completion(httplib::Response& res, Generation& gen, const OpenAICall& c) {
  std::string text;
  json all_lps = json::array();
  GenResult r = gen.run([&](const GenPiece& p) {
    text += p.content;
    for (const auto& lp : p.logprobs) all_lps.push_back(lp);
    return true;
  });
  ordered_json out = response_base(c, "text_completion");
  ordered_json lps = nullptr;
  if (c.g.logprobs) lps = completion_logprobs(all_lps, 0);
  out["choices"] = ordered_json::array(
      {{{"text", text}, {"index", 0}, {"logprobs", lps}, {"finish_reason", finish_reason(r)}}});
  out["usage"] = usage(r);
  add_vatic_stats(out, r);
  send_json(res, out);
}

// POST /v1/completions
void handle_completions(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  ordered_json body = parse_body(req.body);
  OpenAICall c = completion_call(ctx, body);
  auto gen = std::make_shared<Generation>(ctx.sched, c.g);
  if (c.stream) return stream_completion(res, gen, c);
  respond_completion(res, *gen, c);
}

ordered_json model_entry(const vatic::ModelInfo& i) {
  return ordered_json{{"id", i.name},
                      {"object", "model"},
                      {"created", std::chrono::duration_cast<std::chrono::seconds>(
                                      to_system_time(i.modified).time_since_epoch())
                                      .count()},
                      {"owned_by", "library"}};
}

// GET /v1/models
void handle_models(ApiContext& ctx, const httplib::Request&, httplib::Response& res) {
  ordered_json data = ordered_json::array();
  for (const auto& i : ctx.store.list()) data.push_back(model_entry(i));
  send_json(res, ordered_json{{"object", "list"}, {"data", data}});
}

// GET /v1/models/{model}
void handle_model(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  std::string name = req.matches[1];
  ModelMeta meta = model_meta(ctx.store, name);
  send_json(res, model_entry(ctx.store.show(meta.name)));
}

// Runs a handler so that its exceptions become OpenAI error bodies.
Handler openai_route(ApiContext& ctx, void (*h)(ApiContext&, const httplib::Request&, httplib::Response&)) {
  return [&ctx, h](const httplib::Request& req, httplib::Response& res) {
    guarded(res, true, [&] { h(ctx, req, res); });
  };
}

}  // namespace

void register_openai_routes(Router& svr, ApiContext& ctx) {
  svr.post("/v1/chat/completions", openai_route(ctx, handle_chat_completions));
  svr.post("/v1/completions", openai_route(ctx, handle_completions));
  svr.get("/v1/models", openai_route(ctx, handle_models));
  svr.get(R"(/v1/models/(.+))", openai_route(ctx, handle_model));
  svr.post("/v1/embeddings", [](const httplib::Request&, httplib::Response& res) {
    send_error(res, 501, "embeddings are not supported yet", true);
  });
}

}  // namespace vatic::server
