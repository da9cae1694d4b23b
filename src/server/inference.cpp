#include "server/inference.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "chat/format.h"
#include "chat/renderer.h"
#include "models/registry.h"
#include "server/util.h"
#include "store/store.h"
#include "util/files.h"

namespace vatic::server {

namespace {

double runner_timeout() {
  if (const char* e = std::getenv("VATIC_RUNNER_TIMEOUT")) {
    try {
      double v = parse_duration_text(e);
      if (v > 0) return v;
    } catch (const std::exception&) {
    }
  }
  return 600;
}

}  // namespace

ModelMeta model_meta(const ModelStore& store, const std::string& name) {
  ModelMeta m;
  try {
    m.name = ModelName::parse(name).str();
  } catch (const InvalidInput& e) {
    throw HttpError(400, e.what());
  }
  if (!store.exists(m.name)) throw HttpError(404, fmt::format("model '{}' not found", name));
  vatic::ModelInfo info;
  try {
    info = store.show(m.name);
  } catch (const NotFound&) {
    throw HttpError(404, fmt::format("model '{}' not found", name));
  }
  m.digest = info.digest;
  m.renderer = info.renderer;
  m.parser = info.parser;
  m.params = info.params.is_object() ? info.params : json::object();
  m.system = info.system;
  m.architecture = info.architecture;
  m.capabilities = info.capabilities;
  // RENDERER raw marks a plain completion model (no chat format): prompts pass through as they are.
  if (m.renderer != kRawRenderer && (m.renderer.empty() || m.parser.empty())) {
    try {
      ModelSource src = store.resolve(m.name);
      json config = json::parse(read_file(src.config));
      ChatDefaults f = family_of(config, src.config.string()).chat_defaults(config);
      if (f.renderer.empty()) throw InvalidInput("no chat format");
      if (m.renderer.empty()) m.renderer = f.renderer;
      if (m.parser.empty()) m.parser = f.parser;
    } catch (const std::exception&) {
      // No known chat format: raw prompts still work; chat requests will report it.
    }
  }
  return m;
}


std::string render_chat(const ModelMeta& meta, std::vector<chat::Message> messages, const std::vector<chat::Tool>& tools,
                        std::optional<bool> think, chat::ParserOptions* parser_options) {
  if (meta.renderer.empty() || meta.renderer == kRawRenderer)
    throw HttpError(400, fmt::format("model '{}' has no chat format (architecture {}); use /api/generate with raw: true",
                                     meta.name, meta.architecture));
  bool has_system = false;
  for (const auto& m : messages) has_system |= m.role == "system" || m.role == "developer";
  if (!has_system && !meta.system.empty()) {
    chat::Message s;
    s.role = "system";
    s.content = meta.system;
    messages.insert(messages.begin(), s);
  }
  try {
    auto renderer = chat::make_renderer(meta.renderer);
    chat::RenderOptions ro;
    ro.think = think;
    std::string prompt = renderer->render(messages, tools, ro);
    if (parser_options) {
      parser_options->think = think;
      parser_options->starts_in_thinking = renderer->prompt_opens_thinking(prompt);
      parser_options->tools = tools;
    }
    return prompt;
  } catch (const InvalidInput& e) {
    throw HttpError(400, e.what());
  }
}

void add_extension_stats(ordered_json& out, const GenResult& r) {
  out["prompt_cache"] = {{"evaluated", r.prompt_evaluated}, {"reused", r.prompt_reused}};
  if (r.stats.contains("speculative")) out["speculative"] = ordered_json::parse(r.stats["speculative"].dump());
  if (r.stats.contains("device") && r.stats["device"].is_string()) out["device"] = r.stats["device"].get<std::string>();
}

std::optional<bool> think_with_format(const ordered_json& format, std::optional<bool> think) {
  if (format.is_null()) return think;
  if (think.value_or(false))
    throw HttpError(400, "thinking together with a format (structured output) is not supported: the format applies "
                         "from the first token");
  return false;
}

ordered_json tool_choice_spec(const ModelMeta& meta, const ordered_json& tool_choice, const std::vector<chat::Tool>& tools) {
  if (tool_choice.is_null()) return nullptr;
  std::string only;
  if (tool_choice.is_string()) {
    const std::string v = tool_choice.get<std::string>();
    if (v == "auto" || v == "none") return nullptr;
    if (v != "required") throw HttpError(400, "tool_choice must be \"auto\", \"none\", \"required\" or a named function");
  } else if (tool_choice.is_object() && tool_choice.contains("function") && tool_choice["function"].is_object() &&
             tool_choice["function"].contains("name") && tool_choice["function"]["name"].is_string()) {
    only = tool_choice["function"]["name"].get<std::string>();
  } else {
    throw HttpError(400, "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if (tools.empty()) throw HttpError(400, "tool_choice requires tools");
  ordered_json list = ordered_json::array();
  for (const auto& t : tools)
    if (only.empty() || t.name == only) list.push_back({{"name", t.name}, {"parameters", t.parameters}});
  if (list.empty()) throw HttpError(400, fmt::format("tool_choice names \"{}\", which is not among the tools", only));
  const int max_calls = only.empty() ? 4 : 1;
  if (meta.renderer == "glm-4.7" && meta.parser == "glm-4.7")  // <tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call>
    return {{"open", "<tool_call>"}, {"prefix", ""}, {"close", "</tool_call>"}, {"key_open", "<arg_key>"},
            {"key_close", "</arg_key>"}, {"value_open", "<arg_value>"}, {"value_close", "</arg_value>"},
            {"max_calls", max_calls}, {"tools", list}};
  if (meta.renderer.rfind("gemma4", 0) != 0)
    throw HttpError(400, fmt::format("tool_choice \"required\" or a named function is not supported for the {} chat format",
                                     meta.renderer.empty() ? "model's" : meta.renderer));
  // Gemma 4: <|tool_call>call:NAME{...}<tool_call|>, where the arguments may be plain JSON.
  return {{"open", "<|tool_call>"}, {"prefix", "call:"}, {"close", "<tool_call|>"}, {"max_calls", max_calls},
          {"tools", list}};
}

namespace {
// Adds "format" / "tool_calls" to a runner request body, keeping the schema's property order (which sets the
// output's).
std::string with_format(std::string body, const GenRequest& req) {
  for (const auto& [name, value] : {std::pair<const char*, const ordered_json*>{"format", &req.format}, {"tool_calls", &req.tool_calls}}) {
    if (value->is_null() || body.empty() || body.back() != '}') continue;
    body.pop_back();
    body += fmt::format(",\"{}\":{}}}", name, value->dump());
  }
  return body;
}
}  // namespace

Generation::Generation(Scheduler& sched, GenRequest req) : req_(std::move(req)) {
  lease_ = sched.acquire(req_.model, req_.keep_alive, req_.num_ctx, req_.digest);
  json body = {{"prompt", req_.prompt}, {"add_special", req_.add_special}, {"options", req_.options},
               {"check_only", true}};
  httplib::Client cli("127.0.0.1", lease_->port());
  cli.set_connection_timeout(5, 0);
  const double timeout = std::min(60.0, runner_timeout());
  cli.set_read_timeout(static_cast<time_t>(std::max(1.0, timeout)), 0);
  auto res = cli.Post("/completion", with_format(dump(body), req_), "application/json");
  if (!res) {
    std::string why = res.error() == httplib::Error::Read
                          ? fmt::format("no answer from the runner within {:.0f}s", timeout)
                          : httplib::to_string(res.error());
    throw HttpError(500, lease_->fail(why));
  }
  if (res->status != 200) {
    std::string msg = res->body;
    try {
      msg = json::parse(res->body).value("error", res->body);
    } catch (const std::exception&) {
    }
    throw HttpError(res->status == 400 ? 400 : 500, msg);
  }
  prompt_tokens_ = json::parse(res->body).value("prompt_tokens", int64_t(0));
}

Generation::~Generation() = default;

double Generation::load_seconds() const { return lease_ ? lease_->load_seconds() : 0; }

GenResult Generation::run(const std::function<bool(const GenPiece&)>& on_piece) {
  GenResult result;
  result.load_s = load_seconds();
  std::unique_ptr<chat::Parser> parser;
  if (!req_.parser.empty()) {
    try {
      parser = chat::make_parser(req_.parser, req_.parser_options);
    } catch (const InvalidInput& e) {
      throw HttpError(500, e.what());
    }
  }
  json body = {{"prompt", req_.prompt},
               {"add_special", req_.add_special},
               {"options", req_.options},
               {"logprobs", req_.logprobs},
               {"top_logprobs", req_.top_logprobs}};
  bool done = false, stopped = false;
  std::string runner_error, buffer;
  int status = 0;
  auto deliver = [&](chat::ParsedChunk&& c, json lps) -> bool {
    GenPiece p;
    p.content = std::move(c.content);
    p.thinking = std::move(c.thinking);
    p.tool_calls = std::move(c.tool_calls);
    if (!p.tool_calls.empty()) result.tool_calls = true;
    p.logprobs = std::move(lps);
    if (p.empty()) return true;
    if (!on_piece(p)) {
      stopped = true;
      return false;
    }
    return true;
  };
  auto handle_line = [&](const std::string& line) -> bool {
    if (line.empty()) return true;
    json j;
    try {
      j = json::parse(line);
    } catch (const std::exception&) {
      return true;
    }
    if (j.contains("error")) {
      runner_error = j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump();
      return false;
    }
    std::string text = j.value("content", std::string());
    json lps = json::array();
    if (j.contains("logprob")) lps.push_back(j["logprob"]);
    chat::ParsedChunk c;
    if (parser) {
      if (!text.empty()) c = parser->feed(text);
    } else {
      c.content = std::move(text);
    }
    if (j.value("done", false)) {
      done = true;
      if (parser) c.append(parser->finish());
      result.done_reason = j.value("done_reason", std::string("stop"));
      result.stats = j.value("stats", json::object());
      deliver(std::move(c), std::move(lps));
      return false;
    }
    return deliver(std::move(c), std::move(lps));
  };
  httplib::Client cli("127.0.0.1", lease_->port());
  cli.set_connection_timeout(5, 0);
  double rt = runner_timeout();
  cli.set_read_timeout(static_cast<time_t>(rt), 0);
  httplib::Request hreq;
  hreq.method = "POST";
  hreq.path = "/completion";
  hreq.body = with_format(dump(body), req_);
  hreq.set_header("Content-Type", "application/json");
  std::string error_body;
  hreq.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  hreq.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, len);
      return true;
    }
    buffer.append(data, len);
    size_t p;
    while ((p = buffer.find('\n')) != std::string::npos) {
      std::string line = buffer.substr(0, p);
      buffer.erase(0, p + 1);
      if (!handle_line(line)) return false;
    }
    return true;
  };
  auto res = cli.send(hreq);
  if (stopped) {
    result.cancelled = true;
    return result;
  }
  if (!runner_error.empty()) throw HttpError(500, runner_error);
  if (done) {
    const json& s = result.stats;
    result.prompt_tokens = s.value("prompt_tokens", int64_t(0));
    result.prompt_evaluated = s.value("prompt_evaluated", int64_t(0));
    result.prompt_reused = s.value("prompt_reused", int64_t(0));
    result.generated = s.value("generated", int64_t(0));
    result.prefill_s = s.value("prefill_seconds", 0.0);
    result.decode_s = s.value("decode_seconds", 0.0);
    return result;
  }
  if (status != 0 && status != 200) {
    std::string msg = error_body;
    try {
      msg = json::parse(error_body).value("error", error_body);
    } catch (const std::exception&) {
    }
    throw HttpError(status == 400 ? 400 : 500, msg);
  }
  std::string why = res ? "the runner closed the stream early" : httplib::to_string(res.error());
  if (!res && res.error() == httplib::Error::Read) why = fmt::format("no answer from the runner within {:.0f}s", rt);
  throw HttpError(500, lease_->fail(why));
}

}  // namespace vatic::server
