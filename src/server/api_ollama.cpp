// ollama's native API: /api/generate, /api/chat, model management, /api/ps, /api/version.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "chat/format.h"
#include "chat/parser.h"
#include "chat/renderer.h"
#include "chat/types.h"
#include "modelfile/modelfile.h"
#include "server/api.h"
#include "server/inference.h"
#include "store/sha256.h"

#ifndef VATIC_VERSION
#define VATIC_VERSION "0.1.0"
#endif

namespace vatic::server {

namespace fs = std::filesystem;

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

std::vector<fs::path> parse_create_roots(const std::string& text) {
  std::vector<fs::path> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t colon = text.find(':', start);
    std::string item = text.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (!item.empty()) {
      std::error_code ec;
      fs::path canon = fs::canonical(item, ec);
      if (ec || !fs::is_directory(canon, ec))
        std::fprintf(stderr, "warning: VATIC_CREATE_PATHS: ignoring %s (not a folder)\n", item.c_str());
      else
        out.push_back(canon);
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

void check_chat_format_names(const std::string& renderer, const std::string& parser) {
  try {
    if (!renderer.empty() && renderer != kRawRenderer) chat::make_renderer(renderer);
    if (!parser.empty()) chat::make_parser(parser);
  } catch (const InvalidInput& e) {
    throw HttpError(400, e.what());
  }
}

namespace {

std::string require_model(const ordered_json& body) {
  auto m = opt_string(body, "model");
  if (!m || m->empty()) m = opt_string(body, "name");
  if (!m || m->empty()) throw HttpError(400, "model is required");
  return *m;
}

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

ordered_json chunk_base(const InferenceCall& c) { return {{"model", c.model}, {"created_at", rfc3339_now()}}; }

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
  if (c.chat)
    out["message"] = {{"role", "assistant"}, {"content", ""}};
  else
    out["response"] = "";
  out["done"] = true;
  out["done_reason"] = reason;
  if (reason == "load") {
    out["total_duration"] = to_ns(std::chrono::duration<double>(Clock::now() - t0).count());
    out["load_duration"] = to_ns(load_s);
  }
  res.set_content(dump(out), "application/json");
}

void run_inference(ApiContext& ctx, InferenceCall c, httplib::Response& res, Clock::time_point t0) {
  if (c.empty) return respond_load(ctx, c, res, t0);
  auto gen = std::make_shared<Generation>(ctx.sched, c.g);
  auto piece_json = [c](const GenPiece& p) {
    ordered_json o = chunk_base(c);
    if (c.chat) {
      ordered_json msg = {{"role", "assistant"}, {"content", p.content}};
      if (!p.thinking.empty()) msg["thinking"] = p.thinking;
      if (!p.tool_calls.empty()) {
        ordered_json calls = ordered_json::array();
        for (const auto& tc : p.tool_calls) calls.push_back(tc.to_json());
        msg["tool_calls"] = calls;
      }
      o["message"] = msg;
    } else {
      o["response"] = p.content;
      if (!p.thinking.empty()) o["thinking"] = p.thinking;
    }
    o["done"] = false;
    if (!p.logprobs.empty()) {
      ordered_json l = ordered_json::array();
      for (const auto& lp : p.logprobs) l.push_back(ollama_logprob(lp));
      o["logprobs"] = l;
    }
    return o;
  };
  if (c.stream) {
    stream_response(res, "application/x-ndjson", [gen, c, t0, piece_json](const Writer& write) {
      try {
        GenResult r = gen->run([&](const GenPiece& p) { return write(dump(piece_json(p)) + "\n"); });
        if (r.cancelled) return;
        ordered_json fin = chunk_base(c);
        if (c.chat)
          fin["message"] = {{"role", "assistant"}, {"content", ""}};
        else
          fin["response"] = "";
        fin["done"] = true;
        fin["done_reason"] = r.done_reason;
        add_metrics(fin, r, t0);
        write(dump(fin) + "\n");
      } catch (const std::exception& e) {
        write(dump(ordered_json{{"error", e.what()}}) + "\n");
      }
    });
    return;
  }
  std::string content, thinking;
  ordered_json calls = ordered_json::array(), lps = ordered_json::array();
  GenResult r = gen->run([&](const GenPiece& p) {
    content += p.content;
    thinking += p.thinking;
    for (const auto& tc : p.tool_calls) calls.push_back(tc.to_json());
    for (const auto& lp : p.logprobs) lps.push_back(ollama_logprob(lp));
    return true;
  });
  ordered_json out = chunk_base(c);
  if (c.chat) {
    ordered_json msg = {{"role", "assistant"}, {"content", content}};
    if (!thinking.empty()) msg["thinking"] = thinking;
    if (!calls.empty()) msg["tool_calls"] = calls;
    out["message"] = msg;
  } else {
    out["response"] = content;
    if (!thinking.empty()) out["thinking"] = thinking;
  }
  out["done"] = true;
  out["done_reason"] = r.done_reason;
  add_metrics(out, r, t0);
  if (!lps.empty()) out["logprobs"] = lps;
  res.set_content(dump(out), "application/json");
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
  // format: "json" or a JSON schema (the runner refuses what it cannot honour, naming the keyword).
  if (auto it = body.find("format"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      const std::string f = it->get<std::string>();
      if (f == "json") c.g.format = "json";
      else if (!f.empty()) throw HttpError(400, fmt::format("invalid format \"{}\": use \"json\" or a JSON schema object", f));
    } else if (it->is_object()) {
      c.g.format = *it;
    } else {
      throw HttpError(400, "format must be \"json\" or a JSON schema object");
    }
  }
  if (c.g.top_logprobs > 0) c.g.logprobs = true;
  return c;
}

ordered_json model_details(const vatic::ModelInfo& i) {
  std::string family = i.architecture;
  return {{"parent_model", ""},
          {"format", "safetensors"},
          {"family", family},
          {"families", ordered_json::array({family})},
          {"parameter_size", human_parameters(i.parameter_count)},
          {"quantization_level", i.quantization}};
}

ordered_json tag_entry(const vatic::ModelInfo& i) {
  return {{"name", i.name},
          {"model", i.name},
          {"modified_at", rfc3339(to_system_time(i.modified))},
          {"size", i.size},
          {"digest", i.digest},
          {"details", model_details(i)}};
}

std::string parameters_text(const json& params) {
  std::string out;
  for (const auto& [k, v] : params.items()) {
    if (v.is_array()) {
      for (const auto& s : v) out += fmt::format("{:<30} {}\n", k, s.dump());
    } else {
      out += fmt::format("{:<30} {}\n", k, v.is_string() ? v.get<std::string>() : v.dump());
    }
  }
  return out;
}

// Whether `p` lies inside one of the folders the operator opened to /api/create (symlinks resolved).
bool inside_create_roots(const ApiContext& ctx, const fs::path& p) {
  if (ctx.create_roots.empty()) return false;
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(p, ec);
  if (ec) return false;
  for (const auto& root : ctx.create_roots) {
    auto rel = canon.lexically_relative(root);
    if (!rel.empty() && *rel.begin() != "..") return true;
  }
  return false;
}

[[noreturn]] void refuse_server_path(const std::string& text) {
  // The same answer whether the path exists or not, and nothing read from it.
  throw HttpError(403, fmt::format("creating from server paths is not allowed (\"{}\"): upload the files with POST "
                                   "/api/blobs/sha256:<digest> and name them in `files`, or ask the operator to "
                                   "allow the folder with VATIC_CREATE_PATHS",
                                   text));
}

// A model name, or a server path when it looks like one (/, ., ~) or is a folder inside an allowed root.
ModelRef api_ref(const ApiContext& ctx, const std::string& text, const fs::path& base) {
  ModelRef r;
  r.text = text;
  std::string p = text;
  if (!p.empty() && p[0] == '~') {
    const char* home = std::getenv("HOME");
    p = std::string(home ? home : "") + p.substr(1);
  }
  fs::path abs = fs::path(p).is_absolute() ? fs::path(p) : base / p;
  abs = abs.lexically_normal();
  bool explicit_path = !p.empty() && (p[0] == '/' || p[0] == '.' || text[0] == '~');
  std::error_code ec;
  if (explicit_path || (inside_create_roots(ctx, abs) && fs::is_directory(abs, ec))) {
    if (!inside_create_roots(ctx, abs)) refuse_server_path(text);
    r.path = abs;
  }
  return r;
}

// Checks the FROM / DRAFT of a Modelfile sent through the API against the operator's folders.
void check_refs(const ApiContext& ctx, const Modelfile& m) {
  for (const ModelRef* r : {&m.from, &m.draft})
    if (r->is_path() && !inside_create_roots(ctx, r->path)) refuse_server_path(r->text);
}

std::string blob_hex(const std::string& digest) {
  std::string hex;
  if (digest.rfind("sha256:", 0) == 0 || digest.rfind("sha256-", 0) == 0) hex = digest.substr(7);
  if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw HttpError(400, fmt::format("invalid digest \"{}\" (expected sha256:<64 lowercase hex digits>)", digest));
  return hex;
}

// A temporary folder of symlinks to uploaded blobs, laid out as the files of a Hugging Face directory.
class UploadedFiles {
 public:
  UploadedFiles(const ApiContext& ctx, const ordered_json& files, const char* field) {
    if (!files.is_object() || files.empty())
      throw HttpError(400, fmt::format("{} must be an object mapping file names to blob digests", field));
    dir_ = ctx.store.root() / fmt::format(".tmp-{}-files-{}", ::getpid(), random_hex(12));
    fs::create_directories(dir_);
    for (const auto& [name, digest] : files.items()) {
      if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
          name.find('\0') != std::string::npos)
        throw HttpError(400, fmt::format("{}: invalid file name \"{}\" (plain file names only)", field, name));
      if (!digest.is_string()) throw HttpError(400, fmt::format("{}: the digest of \"{}\" must be a string", field, name));
      fs::path blob = ctx.store.blob_path("sha256:" + blob_hex(digest.get<std::string>()));
      std::error_code ec;
      if (!fs::is_regular_file(blob, ec))
        throw HttpError(400, fmt::format("{}: blob {} for \"{}\" not found; upload it first with POST /api/blobs/{}",
                                         field, digest.get<std::string>(), name, digest.get<std::string>()));
      fs::create_symlink(blob, dir_ / name);
    }
  }
  ~UploadedFiles() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  UploadedFiles(const UploadedFiles&) = delete;
  UploadedFiles& operator=(const UploadedFiles&) = delete;
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

// A single-line Modelfile value (names, roles): a newline would start another Modelfile command.
void check_single_line(const std::string& v, const char* field) {
  if (v.find_first_of("\r\n") != std::string::npos) throw HttpError(400, fmt::format("{} must be a single line", field));
}

// /api/create without a Modelfile: ollama's newer fields.
Modelfile modelfile_from_fields(const ApiContext& ctx, const ordered_json& body, const fs::path* from_dir,
                                const fs::path* draft_dir) {
  Modelfile m;
  auto from = opt_string(body, "from");
  if (from_dir && (!from || from->empty())) {
    m.from.text = "uploaded files";
    m.from.path = *from_dir;
  } else if (!from || from->empty()) {
    throw HttpError(400, "from is required (a model name, or upload files with /api/blobs and name them in `files`), "
                         "or send a `modelfile`");
  } else {
    check_single_line(*from, "from");
    m.from = api_ref(ctx, *from, fs::current_path());
  }
  if (draft_dir) {
    m.draft.text = "uploaded draft files";
    m.draft.path = *draft_dir;
  } else if (auto d = opt_string(body, "draft"); d && !d->empty()) {
    check_single_line(*d, "draft");
    m.draft = api_ref(ctx, *d, fs::current_path());
  }
  if (auto s = opt_string(body, "system")) m.system = *s;
  if (auto s = opt_string(body, "template")) m.template_text = *s;
  if (auto s = opt_string(body, "renderer")) m.renderer = *s;
  if (auto s = opt_string(body, "parser")) m.parser = *s;
  if (auto it = body.find("license"); it != body.end() && !it->is_null()) {
    if (it->is_string())
      m.licenses.push_back(it->get<std::string>());
    else if (it->is_array())
      for (const auto& l : *it) {
        if (!l.is_string()) throw HttpError(400, "license must be a string or an array of strings");
        m.licenses.push_back(l.get<std::string>());
      }
    else
      throw HttpError(400, "license must be a string or an array of strings");
  }
  check_single_line(m.renderer, "renderer");
  check_single_line(m.parser, "parser");
  if (auto it = body.find("parameters"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) throw HttpError(400, "parameters must be an object");
    for (const auto& [k, v] : it->items()) {
      check_single_line(k, "parameter names");
      auto one = [&](const ordered_json& x) {
        std::string text = x.is_string() ? x.get<std::string>() : x.dump();
        json parsed = parse_parameter_value(k, text);
        if (k == "stop") {
          if (!m.params.contains("stop")) m.params["stop"] = json::array();
          if (parsed.is_array())
            for (auto& s : parsed) m.params["stop"].push_back(s);
          else
            m.params["stop"].push_back(parsed);
        } else {
          m.params[k] = parsed;
        }
      };
      if (v.is_array())
        for (const auto& x : v) one(x);
      else
        one(v);
    }
  }
  if (auto it = body.find("messages"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) throw HttpError(400, "messages must be an array");
    for (const auto& msg : *it) {
      if (!msg.is_object()) throw HttpError(400, "each message must be an object");
      auto role = opt_string(msg, "role").value_or("");
      if (role != "system" && role != "user" && role != "assistant" && role != "tool")
        throw HttpError(400, "message role must be system, user, assistant or tool");
      m.messages.push_back({role, opt_string(msg, "content").value_or("")});
    }
  }
  return m;
}

}  // namespace

void register_ollama_routes(Router& svr, ApiContext& ctx) {
  svr.get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content("vatic is running", "text/plain"); });
  svr.get("/api/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(ordered_json{{"version", VATIC_VERSION}}), "application/json");
  });

  svr.post("/api/generate", [&ctx](const httplib::Request& req, httplib::Response& res) {
    auto t0 = Clock::now();
    guarded(res, false, [&] {
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
    });
  });

  svr.post("/api/chat", [&ctx](const httplib::Request& req, httplib::Response& res) {
    auto t0 = Clock::now();
    guarded(res, false, [&] {
      ordered_json body = parse_body(req.body);
      InferenceCall c = common_fields(ctx, body, true);
      std::vector<chat::Message> msgs;
      std::vector<chat::Tool> tools;
      if (auto it = body.find("messages"); it != body.end() && !it->is_null()) {
        if (!it->is_array()) throw HttpError(400, "messages must be an array");
        for (const auto& m : *it) {
          if (!m.is_object()) throw HttpError(400, "each message must be an object");
          if (auto im = m.find("images"); im != m.end() && !im->is_null()) {
            if (!im->is_array()) throw HttpError(400, "message images must be an array of base64 strings");
            if (!im->empty()) throw HttpError(400, "images are not supported: vatic models are text-only");
          }
          msgs.push_back(chat::Message::from_json(m));
        }
      }
      if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
        if (!it->is_array()) throw HttpError(400, "tools must be an array");
        for (const auto& t : *it) tools.push_back(chat::Tool::from_json(t));
      }
      std::optional<bool> think = think_with_format(c.g.format, parse_think(body));
      c.empty = msgs.empty();
      if (!c.empty) {
        c.g.prompt = render_chat(c.meta, msgs, tools, think, &c.g.parser_options);
        c.g.parser = c.meta.parser;
      }
      run_inference(ctx, std::move(c), res, t0);
    });
  });

  auto tags = [&ctx](const httplib::Request&, httplib::Response& res) {
    guarded(res, false, [&] {
      ordered_json models = ordered_json::array();
      for (const auto& i : ctx.store.list()) models.push_back(tag_entry(i));
      res.set_content(dump(ordered_json{{"models", models}}), "application/json");
    });
  };
  svr.get("/api/tags", tags);

  svr.post("/api/show", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res, false, [&] {
      ordered_json body = parse_body(req.body);
      std::string name = require_model(body);
      ModelMeta meta = model_meta(ctx.store, name);
      vatic::ModelInfo i = ctx.store.show(meta.name);
      ordered_json out;
      try {
        out["modelfile"] = format_modelfile(ctx.store.modelfile(meta.name));
      } catch (const std::exception&) {
        out["modelfile"] = "";
      }
      out["parameters"] = parameters_text(i.params);
      out["template"] = i.template_text;
      out["system"] = i.system;
      std::string license;
      for (const auto& l : i.licenses) license += (license.empty() ? "" : "\n") + l;
      out["license"] = license;
      out["details"] = model_details(i);
      std::string a = i.architecture;
      out["model_info"] = {{"general.architecture", a},
                           {"general.parameter_count", i.parameter_count},
                           {a + ".context_length", i.context_length},
                           {a + ".embedding_length", i.embedding_length}};
      out["capabilities"] = i.capabilities;
      out["renderer"] = meta.renderer == kRawRenderer ? "" : meta.renderer;
      out["parser"] = meta.parser;
      out["modified_at"] = rfc3339(to_system_time(i.modified));
      if (i.draft.present)
        out["draft"] = {{"architecture", i.draft.architecture},
                        {"parameter_count", i.draft.parameter_count},
                        {"parameter_size", human_parameters(i.draft.parameter_count)},
                        {"quantization_level", i.draft.quantization}};
      res.set_content(dump(out), "application/json");
    });
  });

  svr.post("/api/create", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res, false, [&] {
      ordered_json body = parse_body(req.body);
      std::string name = require_model(body);
      try {
        name = ModelName::parse(name).str();
      } catch (const InvalidInput& e) {
        throw HttpError(400, e.what());
      }
      std::shared_ptr<UploadedFiles> files, draft_files;
      if (auto it = body.find("files"); it != body.end() && !it->is_null())
        files = std::make_shared<UploadedFiles>(ctx, *it, "files");
      if (auto it = body.find("draft_files"); it != body.end() && !it->is_null())
        draft_files = std::make_shared<UploadedFiles>(ctx, *it, "draft_files");
      for (const char* f : {"system", "template", "renderer", "parser", "quantize", "draft_quantize", "from", "draft"})
        (void)opt_string(body, f);  // type checks
      Modelfile mf;
      if (auto text = opt_string(body, "modelfile"); text && !text->empty()) {
        // Relative paths resolve against the client's Modelfile folder only where the operator allows server
        // paths; otherwise against nothing, so probing for folders reveals nothing.
        fs::path base = ctx.create_roots.empty() ? fs::path("/nonexistent-vatic-create-base") : fs::current_path();
        if (auto p = opt_string(body, "path"); p && !p->empty() && !ctx.create_roots.empty())
          base = fs::path(*p).parent_path();
        mf = parse_modelfile(*text, base);
        // With uploaded files, a path in FROM / DRAFT names them (ollama's CLI sends "FROM ." with `files`).
        if (files && (mf.from.is_path() || mf.from.empty())) {
          mf.from.text = "uploaded files";
          mf.from.path.clear();
        }
        if (draft_files) {
          mf.draft.text = "uploaded draft files";
          mf.draft.path.clear();
        }
        check_refs(ctx, mf);
        if (files && !mf.from.is_path() && mf.from.text == "uploaded files") mf.from.path = files->dir();
        if (draft_files) mf.draft.path = draft_files->dir();
      } else {
        mf = modelfile_from_fields(ctx, body, files ? &files->dir() : nullptr,
                                   draft_files ? &draft_files->dir() : nullptr);
        // Uploaded folders live in the store and are ours; anything else must be inside the operator's folders.
        Modelfile check = mf;
        if (files) check.from = {};
        if (draft_files) check.draft = {};
        check_refs(ctx, check);
      }
      check_chat_format_names(mf.renderer, mf.parser);
      CreateOptions co;
      co.quantize = opt_string(body, "quantize").value_or("");
      co.draft_quantize = opt_string(body, "draft_quantize").value_or("");
      bool stream = opt_bool(body, "stream").value_or(true);
      if (!stream) {
        ctx.store.create(name, mf, co);
        res.set_content(dump(ordered_json{{"status", "success"}}), "application/json");
        return;
      }
      stream_response(res, "application/x-ndjson", [&ctx, name, mf, co, files, draft_files](const Writer& write) mutable {
        std::string last_status;
        int last_percent = -1;
        co.progress = [&](const CreateProgress& p) {
          int percent = p.total ? static_cast<int>(100.0 * double(p.completed) / double(p.total)) : 100;
          if (p.status == "success") return;  // sent below
          if (p.status == last_status && percent / 5 == last_percent / 5) return;
          last_status = p.status;
          last_percent = percent;
          ordered_json o = {{"status", p.status}};
          if (p.total) {
            o["total"] = p.total;
            o["completed"] = p.completed;
          }
          write(dump(o) + "\n");
        };
        try {
          write(dump(ordered_json{{"status", "parsing modelfile"}}) + "\n");
          ctx.store.create(name, mf, co);
          write(dump(ordered_json{{"status", "success"}}) + "\n");
        } catch (const std::exception& e) {
          write(dump(ordered_json{{"error", e.what()}}) + "\n");
        }
      });
    });
  });

  // Blobs: files a client uploads before /api/create names them in `files` (ollama's way of creating from a
  // client's local files). The body is hashed as it arrives and kept only when it matches the digest.
  const std::string blob_pattern = R"(/api/blobs/([^/]+))";
  svr.get(blob_pattern, [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res, false, [&] {
      if (req.method != "HEAD") throw HttpError(405, fmt::format("method {} not allowed on {} (use HEAD or POST)",
                                                                 req.method, req.path));
      std::error_code ec;
      res.status = fs::is_regular_file(ctx.store.blob_path("sha256:" + blob_hex(req.matches[1])), ec) ? 200 : 404;
    });
  });
  svr.post_streaming(blob_pattern, [&ctx]() {
    struct Upload {
      std::string hex, error;
      fs::path tmp;
      int fd = -1;
      Sha256 sha;
      uint64_t size = 0;
      ~Upload() {
        if (fd >= 0) ::close(fd);
        std::error_code ec;
        if (!tmp.empty()) fs::remove(tmp, ec);
      }
    };
    auto u = std::make_shared<Upload>();
    auto open = [&ctx, u](const httplib::Request& req) {
      if (!u->hex.empty() || !u->error.empty()) return u->error.empty();
      try {
        u->hex = blob_hex(req.matches[1]);
      } catch (const HttpError& e) {
        u->error = e.what();
        return false;
      }
      fs::path dir = ctx.store.root() / "blobs";
      std::error_code ec;
      fs::create_directories(dir, ec);
      u->tmp = dir / fmt::format(".tmp-{}-upload-{}", ::getpid(), random_hex(12));
      u->fd = ::open(u->tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (u->fd < 0) {
        u->error = "cannot store the upload";
        u->tmp.clear();
        return false;
      }
      return true;
    };
    StreamingRoute r;
    r.precheck = [](const httplib::Request& req, httplib::Response& res) {
      bool ok = true;
      guarded(res, false, [&] {
        ok = false;
        blob_hex(req.matches[1]);
        ok = true;
      });
      return ok;
    };
    r.receive = [u, open](const httplib::Request& req, const char* data, size_t n) {
      if (!open(req)) return false;
      u->sha.update(data, n);
      u->size += n;
      while (n > 0) {
        ssize_t w = ::write(u->fd, data, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          u->error = fmt::format("cannot store the upload: {}", std::strerror(errno));
          return false;
        }
        data += w;
        n -= static_cast<size_t>(w);
      }
      return true;
    };
    r.finish = [&ctx, u, open](const httplib::Request& req, httplib::Response& res, bool complete) {
      guarded(res, false, [&] {
        bool opened = open(req);
        if (!u->error.empty()) throw HttpError(u->hex.empty() ? 400 : 500, u->error);
        if (!complete || !opened) throw HttpError(400, "the upload was cut short");
        std::string got = u->sha.hex_digest();
        if (got != u->hex)
          throw HttpError(400, fmt::format("digest mismatch: the body hashes to sha256:{}, not sha256:{}", got, u->hex));
        if (::fsync(u->fd) != 0) throw HttpError(500, "cannot store the upload");
        ::close(u->fd);
        u->fd = -1;
        fs::path final_path = ctx.store.blob_path("sha256:" + u->hex);
        std::error_code ec;
        if (fs::exists(final_path, ec)) {
          res.status = 200;
          return;
        }
        fs::rename(u->tmp, final_path, ec);
        if (ec) throw HttpError(500, "cannot store the upload");
        u->tmp.clear();
        res.status = 201;
      });
    };
    return r;
  });

  svr.post("/api/copy", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res, false, [&] {
      ordered_json body = parse_body(req.body);
      auto src = opt_string(body, "source");
      auto dst = opt_string(body, "destination");
      if (!src || src->empty()) throw HttpError(400, "source is required");
      if (!dst || dst->empty()) throw HttpError(400, "destination is required");
      ModelMeta meta = model_meta(ctx.store, *src);
      ctx.store.copy(meta.name, *dst);
      res.status = 200;
    });
  });

  svr.del("/api/delete", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res, false, [&] {
      ordered_json body = parse_body(req.body);
      std::string name = require_model(body);
      ModelMeta meta = model_meta(ctx.store, name);
      ctx.sched.unload(meta.name);
      ctx.store.remove(meta.name);
      res.status = 200;
    });
  });

  svr.get("/api/ps", [&ctx](const httplib::Request&, httplib::Response& res) {
    guarded(res, false, [&] {
      ordered_json models = ordered_json::array();
      for (const auto& m : ctx.sched.loaded()) {
        ordered_json e = {{"name", m.name}, {"model", m.name}};
        uint64_t size = 0;
        ordered_json details = ordered_json::object();
        std::string digest;
        try {
          vatic::ModelInfo i = ctx.store.show(m.name);
          size = i.size;
          details = model_details(i);
          digest = i.digest;
        } catch (const std::exception&) {
        }
        // The runner's own accounting (weights + KV + prefix cache) when it answers quickly.
        int64_t ctx_len = m.num_ctx;
        bool on_gpu = false;
        ordered_json runner = {{"pid", m.pid}, {"port", m.port}};
        httplib::Client cli("127.0.0.1", m.port);
        cli.set_connection_timeout(0, 300000);
        cli.set_read_timeout(1, 0);
        if (auto r = cli.Get("/status"); r && r->status == 200) {
          try {
            json st = json::parse(r->body);
            size = st.value("memory_bytes", size);
            on_gpu = st.value("device", std::string("cpu")) != "cpu";
            runner["device"] = st.value("device", std::string("cpu"));
            if (st.contains("device_name")) runner["device_name"] = st["device_name"];
            ctx_len = st.value("context_length", ctx_len);
            runner["memory"] = ordered_json::parse(st["memory"].dump());
            runner["requests"] = st.value("requests", 0);
            runner["cancelled"] = st.value("cancelled", 0);
            runner["last"] = ordered_json::parse(st["last"].dump());
          } catch (const std::exception&) {
          }
        }
        e["size"] = size;
        e["digest"] = digest;
        e["details"] = details;
        e["expires_at"] = rfc3339(m.expires_at);
        e["size_vram"] = on_gpu ? size : 0;  // the weights, caches and prefix cache all live on the device
        e["context_length"] = ctx_len;
        e["runner"] = runner;
        models.push_back(e);
      }
      res.set_content(dump(ordered_json{{"models", models}}), "application/json");
    });
  });

  auto not_implemented = [](const std::string& what) {
    return [what](const httplib::Request&, httplib::Response& res) { send_error(res, 501, what, false); };
  };
  svr.post("/api/embed", not_implemented("embeddings are not supported yet"));
  svr.post("/api/embeddings", not_implemented("embeddings are not supported yet"));
  svr.post("/api/pull", not_implemented("pulling from a registry is not supported: create models from local "
                                        "safetensors directories with /api/create"));
  svr.post("/api/push", not_implemented("pushing to a registry is not supported"));
}

}  // namespace vatic::server
