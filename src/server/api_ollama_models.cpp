// ollama's model-management API: /api/tags, /api/show, /api/create with its blob uploads, /api/copy,
// /api/delete, /api/ps. The routes are registered in api_ollama.cpp.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "chat/parser.h"
#include "chat/renderer.h"
#include "modelfile/modelfile.h"
#include "server/api_ollama.h"
#include "server/inference.h"
#include "store/sha256.h"

namespace vatic::server {

namespace fs = std::filesystem;

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

// `license`: a string or an array of strings.
void license_field(const ordered_json& body, Modelfile& m) {
  auto it = body.find("license");
  if (it == body.end() || it->is_null()) return;
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

// `parameters`: an object of PARAMETER values (an array gives one parameter several values; stop collects
// them).
void parameters_field(const ordered_json& body, Modelfile& m) {
  auto it = body.find("parameters");
  if (it == body.end() || it->is_null()) return;
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

// `messages`: the MESSAGE lines, {role, content} each.
void messages_field(const ordered_json& body, Modelfile& m) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_array()) throw HttpError(400, "messages must be an array");
  for (const auto& msg : *it) {
    if (!msg.is_object()) throw HttpError(400, "each message must be an object");
    auto role = opt_string(msg, "role").value_or("");
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      throw HttpError(400, "message role must be system, user, assistant or tool");
    m.messages.push_back({role, opt_string(msg, "content").value_or("")});
  }
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
  license_field(body, m);
  check_single_line(m.renderer, "renderer");
  check_single_line(m.parser, "parser");
  parameters_field(body, m);
  messages_field(body, m);
  return m;
}

// The create request's model name in its canonical form (an invalid name is the client's error).
std::string create_name(const ordered_json& body) {
  std::string name = require_model(body);
  try {
    return ModelName::parse(name).str();
  } catch (const InvalidInput& e) {
    throw HttpError(400, e.what());
  }
}

std::shared_ptr<UploadedFiles> uploaded_files(const ApiContext& ctx, const ordered_json& body,
                                              const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return nullptr;
  return std::make_shared<UploadedFiles>(ctx, *it, field);
}

// The Modelfile a create request sends as text (`modelfile`), with FROM / DRAFT naming the uploaded files
// where there are some.
Modelfile modelfile_from_text(const ApiContext& ctx, const ordered_json& body, const std::string& text,
                              const UploadedFiles* files, const UploadedFiles* draft_files) {
  // Relative paths resolve against the client's Modelfile folder only where the operator allows server
  // paths; otherwise against nothing, so probing for folders reveals nothing.
  fs::path base = ctx.create_roots.empty() ? fs::path("/nonexistent-vatic-create-base") : fs::current_path();
  if (auto p = opt_string(body, "path"); p && !p->empty() && !ctx.create_roots.empty())
    base = fs::path(*p).parent_path();
  Modelfile mf = parse_modelfile(text, base);
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
  return mf;
}

// The Modelfile of a create request: its `modelfile` text, else ollama's newer fields.
Modelfile create_modelfile(const ApiContext& ctx, const ordered_json& body, const UploadedFiles* files,
                           const UploadedFiles* draft_files) {
  if (auto text = opt_string(body, "modelfile"); text && !text->empty())
    return modelfile_from_text(ctx, body, *text, files, draft_files);
  Modelfile mf = modelfile_from_fields(ctx, body, files ? &files->dir() : nullptr,
                                       draft_files ? &draft_files->dir() : nullptr);
  // Uploaded folders live in the store and are ours; anything else must be inside the operator's folders.
  Modelfile check = mf;
  if (files) check.from = {};
  if (draft_files) check.draft = {};
  check_refs(ctx, check);
  return mf;
}

// Progress lines of a streamed create: a line when the status changes or the percentage passes a multiple
// of 5.
class CreateProgressLines {
 public:
  explicit CreateProgressLines(const Writer& write) : write_(write) {}
  void operator()(const CreateProgress& p) {
    int percent = p.total ? static_cast<int>(100.0 * double(p.completed) / double(p.total)) : 100;
    if (p.status == "success") return;  // sent by the caller once the model is stored
    if (p.status == last_status_ && percent / 5 == last_percent_ / 5) return;
    last_status_ = p.status;
    last_percent_ = percent;
    ordered_json o = {{"status", p.status}};
    if (p.total) {
      o["total"] = p.total;
      o["completed"] = p.completed;
    }
    write_(ndjson_line(o));
  }

 private:
  const Writer& write_;
  std::string last_status_;
  int last_percent_ = -1;
};

// Streams a create's progress. The uploaded folders ride along: they must outlive the create, which runs
// after the handler has returned.
void stream_create(httplib::Response& res, ApiContext& ctx, const std::string& name, const Modelfile& mf,
                   CreateOptions co, std::shared_ptr<UploadedFiles> files,
                   std::shared_ptr<UploadedFiles> draft_files) {
  stream_response(res, "application/x-ndjson",
                  [&ctx, name, mf, co, files, draft_files](const Writer& write) mutable {
                    CreateProgressLines lines(write);
                    co.progress = [&](const CreateProgress& p) { lines(p); };
                    try {
                      write(ndjson_line(ordered_json{{"status", "parsing modelfile"}}));
                      ctx.store.create(name, mf, co);
                      write(ndjson_line(ordered_json{{"status", "success"}}));
                    } catch (const std::exception& e) {
                      write(ndjson_line(ordered_json{{"error", e.what()}}));
                    }
                  });
}

// A blob upload in progress: the body goes to a temporary file in blobs/ and is hashed as it arrives; the
// file becomes the blob only when the body is whole and matches the digest in the path.
struct BlobUpload {
  std::string hex, error;
  fs::path tmp;
  int fd = -1;
  Sha256 sha;
  uint64_t size = 0;

  BlobUpload() = default;
  BlobUpload(const BlobUpload&) = delete;
  BlobUpload& operator=(const BlobUpload&) = delete;
  ~BlobUpload() {
    if (fd >= 0) ::close(fd);
    std::error_code ec;
    if (!tmp.empty()) fs::remove(tmp, ec);
  }

  // Opens the temporary file at the first call; false once anything failed.
  bool open(const ApiContext& ctx, const httplib::Request& req) {
    if (!hex.empty() || !error.empty()) return error.empty();
    try {
      hex = blob_hex(req.matches[1]);
    } catch (const HttpError& e) {
      error = e.what();
      return false;
    }
    fs::path dir = ctx.store.root() / "blobs";
    std::error_code ec;
    fs::create_directories(dir, ec);
    tmp = dir / fmt::format(".tmp-{}-upload-{}", ::getpid(), random_hex(12));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      error = "cannot store the upload";
      tmp.clear();
      return false;
    }
    return true;
  }

  bool receive(const ApiContext& ctx, const httplib::Request& req, const char* data, size_t n) {
    if (!open(ctx, req)) return false;
    sha.update(data, n);
    size += n;
    while (n > 0) {
      ssize_t w = ::write(fd, data, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        error = fmt::format("cannot store the upload: {}", std::strerror(errno));
        return false;
      }
      data += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  // 201 for a new blob, 200 for one the store already had; throws HttpError otherwise.
  void finish(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res, bool complete) {
    bool opened = open(ctx, req);
    if (!error.empty()) throw HttpError(hex.empty() ? 400 : 500, error);
    if (!complete || !opened) throw HttpError(400, "the upload was cut short");
    std::string got = sha.hex_digest();
    if (got != hex)
      throw HttpError(400, fmt::format("digest mismatch: the body hashes to sha256:{}, not sha256:{}", got, hex));
    if (::fsync(fd) != 0) throw HttpError(500, "cannot store the upload");
    ::close(fd);
    fd = -1;
    fs::path final_path = ctx.store.blob_path("sha256:" + hex);
    std::error_code ec;
    if (fs::exists(final_path, ec)) {
      res.status = 200;
      return;
    }
    fs::rename(tmp, final_path, ec);
    if (ec) throw HttpError(500, "cannot store the upload");
    tmp.clear();
    res.status = 201;
  }
};

// /api/ps's view of a loaded model: the store's facts, then the runner's own accounting (weights + KV +
// prefix cache) when it answers quickly.
ordered_json ps_entry(ApiContext& ctx, const LoadedModel& m) {
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
  return e;
}

}  // namespace

void handle_tags(ApiContext& ctx, const httplib::Request&, httplib::Response& res) {
  ordered_json models = ordered_json::array();
  for (const auto& i : ctx.store.list()) models.push_back(tag_entry(i));
  send_json(res, ordered_json{{"models", models}});
}

void handle_show(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
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
  send_json(res, out);
}

void handle_create(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  ordered_json body = parse_body(req.body);
  std::string name = create_name(body);
  std::shared_ptr<UploadedFiles> files = uploaded_files(ctx, body, "files");
  std::shared_ptr<UploadedFiles> draft_files = uploaded_files(ctx, body, "draft_files");
  for (const char* f :
       {"system", "template", "renderer", "parser", "quantize", "draft_quantize", "from", "draft"})
    (void)opt_string(body, f);  // type checks
  Modelfile mf = create_modelfile(ctx, body, files.get(), draft_files.get());
  check_chat_format_names(mf.renderer, mf.parser);
  CreateOptions co;
  co.quantize = opt_string(body, "quantize").value_or("");
  co.draft_quantize = opt_string(body, "draft_quantize").value_or("");
  bool stream = opt_bool(body, "stream").value_or(true);
  if (stream) return stream_create(res, ctx, name, mf, co, files, draft_files);
  ctx.store.create(name, mf, co);
  send_json(res, ordered_json{{"status", "success"}});
}

void handle_blob_exists(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (req.method != "HEAD")
    throw HttpError(405, fmt::format("method {} not allowed on {} (use HEAD or POST)", req.method, req.path));
  std::error_code ec;
  res.status = fs::is_regular_file(ctx.store.blob_path("sha256:" + blob_hex(req.matches[1])), ec) ? 200 : 404;
}

StreamingRoute blob_upload_route(ApiContext& ctx) {
  auto u = std::make_shared<BlobUpload>();
  StreamingRoute r;
  // A malformed digest is refused before the body is read.
  r.precheck = [](const httplib::Request& req, httplib::Response& res) {
    bool ok = true;
    guarded(res, false, [&] {
      ok = false;
      blob_hex(req.matches[1]);
      ok = true;
    });
    return ok;
  };
  r.receive = [&ctx, u](const httplib::Request& req, const char* data, size_t n) {
    return u->receive(ctx, req, data, n);
  };
  r.finish = [&ctx, u](const httplib::Request& req, httplib::Response& res, bool complete) {
    guarded(res, false, [&] { u->finish(ctx, req, res, complete); });
  };
  return r;
}

void handle_copy(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  ordered_json body = parse_body(req.body);
  auto src = opt_string(body, "source");
  auto dst = opt_string(body, "destination");
  if (!src || src->empty()) throw HttpError(400, "source is required");
  if (!dst || dst->empty()) throw HttpError(400, "destination is required");
  ModelMeta meta = model_meta(ctx.store, *src);
  ctx.store.copy(meta.name, *dst);
  res.status = 200;
}

void handle_delete(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  ordered_json body = parse_body(req.body);
  std::string name = require_model(body);
  ModelMeta meta = model_meta(ctx.store, name);
  ctx.sched.unload(meta.name);
  ctx.store.remove(meta.name);
  res.status = 200;
}

void handle_ps(ApiContext& ctx, const httplib::Request&, httplib::Response& res) {
  ordered_json models = ordered_json::array();
  for (const auto& m : ctx.sched.loaded()) models.push_back(ps_entry(ctx, m));
  send_json(res, ordered_json{{"models", models}});
}

}  // namespace vatic::server
