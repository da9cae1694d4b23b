#include "runner/runner.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include <httplib.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "grammar/json_schema.h"
#include "models/registry.h"
#include "runner/model_resolve.h"
#include "runner/stop_strings.h"
#include "util/error.h"
#include "util/json.h"

namespace vatic::runner {
namespace {

std::string dump_line(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

void send_error(httplib::Response& res, int status, const std::string& msg) {
  res.status = status;
  res.set_content(json{{"error", msg}}.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

template <typename T>
T get_number(const json& o, const char* key, T fallback) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return fallback;
  if (!it->is_number() && !it->is_boolean())
    throw InvalidInput(fmt::format("option \"{}\" must be a number, got {}", key, it->dump()));
  if constexpr (std::is_integral_v<T>) {
    if (it->is_number_float()) {
      double d = it->get<double>();
      if (d != static_cast<double>(static_cast<int64_t>(d)))
        throw InvalidInput(fmt::format("option \"{}\" must be an integer, got {}", key, it->dump()));
      return static_cast<T>(d);
    }
  }
  return it->get<T>();
}

struct Completion {
  std::vector<int32_t> prompt;
  GenerateOptions gen;
  std::vector<std::string> stops;
};

class Runner {
 public:
  Runner(const RunnerOptions& o, std::unique_ptr<Engine> engine) : opts_(o), engine_(std::move(engine)) {
    if (const Tokenizer* t = engine_->tokenizer()) {
      // Marker tokens that end a turn in the family's chat format (besides the model's own eos ids).
      if (const ModelFamily* f = find_family(engine_->info().architecture))
        for (const auto& m : f->turn_end_tokens())
          if (auto id = t->token_to_id(m)) stop_ids_.push_back(*id);
    }
  }

  void install(httplib::Server& svr) {
    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    svr.Get("/status", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(status().dump(), "application/json");
    });
    svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      guard(res, [&] {
        json b = parse(req.body);
        std::string text = b.value("content", std::string());
        bool special = b.value("add_special", true);
        res.set_content(json{{"tokens", engine_->tokenize(text, special)}}.dump(), "application/json");
      });
    });
    svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      guard(res, [&] {
        json b = parse(req.body);
        auto ids = b.value("tokens", std::vector<int32_t>());
        res.set_content(json{{"content", engine_->detokenize(ids)}}.dump(-1, ' ', false, json::error_handler_t::replace),
                        "application/json");
      });
    });
    svr.Post("/completion", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res); });
    svr.Post("/shutdown", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"stopping"})", "application/json");
      ::kill(::getpid(), SIGTERM);
    });
  }

  json status() const {
    json mem = engine_->status();
    size_t total = mem.value("weights_bytes", size_t(0)) + mem.value("kv_bytes", size_t(0)) +
                   mem.value("prefix_cache_bytes", size_t(0));
    std::lock_guard<std::mutex> lk(mu_);
    return {{"status", "ready"},
            {"model", opts_.model.empty() ? opts_.model_dir : opts_.model},
            {"pid", ::getpid()},
            {"context_length", engine_->context_length()},
            {"device", engine_->device().str()},
            {"device_name", backend_for(engine_->device()).description()},
            {"drafter", engine_->has_drafter()},
            {"memory", mem},
            {"memory_bytes", total},
            {"requests", requests_},
            {"cancelled", cancelled_},
            {"last", last_}};
  }

 private:
  static json parse(const std::string& body) {
    try {
      return json::parse(body);
    } catch (const json::exception& e) {
      throw InvalidInput(fmt::format("invalid JSON: {}", e.what()));
    }
  }

  template <typename F>
  static void guard(httplib::Response& res, F&& f) {
    try {
      f();
    } catch (const InvalidInput& e) {
      send_error(res, 400, e.what());
    } catch (const json::exception& e) {
      send_error(res, 400, e.what());
    } catch (const std::exception& e) {
      send_error(res, 500, e.what());
    }
  }

  Completion prepare(const json& b, const ordered_json& format = ordered_json(),
                     const ordered_json& tool_calls = ordered_json()) {
    Completion c;
    if (b.contains("tokens")) {
      c.prompt = b.at("tokens").get<std::vector<int32_t>>();
    } else {
      c.prompt = engine_->tokenize(b.value("prompt", std::string()), b.value("add_special", true));
    }
    if (c.prompt.empty()) throw InvalidInput("empty prompt");
    const int64_t ctx = engine_->context_length();
    if (static_cast<int64_t>(c.prompt.size()) >= ctx)
      throw InvalidInput(fmt::format("input length ({} tokens) exceeds the model's context length ({} tokens)",
                                     c.prompt.size(), ctx));
    json o = b.value("options", json::object());
    if (!o.is_object()) throw InvalidInput("options must be an object");
    GenerateOptions& g = c.gen;
    SamplerOptions& s = g.sampling;
    // ollama's public defaults for options a request (and the Modelfile) leaves out.
    s.temperature = 0.8f;
    s.top_k = 40;
    s.top_p = 0.9f;
    g.max_tokens = get_number<int>(o, "num_predict", -1);
    if (g.max_tokens < 0) g.max_tokens = -1;
    s.temperature = get_number<float>(o, "temperature", s.temperature);
    s.top_k = get_number<int>(o, "top_k", s.top_k);
    s.top_p = get_number<float>(o, "top_p", s.top_p);
    s.min_p = get_number<float>(o, "min_p", s.min_p);
    s.repeat_penalty = get_number<float>(o, "repeat_penalty", s.repeat_penalty);
    s.repeat_last_n = get_number<int>(o, "repeat_last_n", s.repeat_last_n);
    s.presence_penalty = get_number<float>(o, "presence_penalty", s.presence_penalty);
    s.frequency_penalty = get_number<float>(o, "frequency_penalty", s.frequency_penalty);
    s.seed = get_number<int64_t>(o, "seed", s.seed);
    s.logprobs = b.value("logprobs", false);
    s.top_logprobs = get_number<int>(b, "top_logprobs", 0);
    s.validate();
    int draft = get_number<int>(o, "draft_num_predict", -1);
    if (draft == 0) {
      g.draft_depth = 0;
    } else if (draft > 0) {
      if (draft > 32) throw InvalidInput("option \"draft_num_predict\" must be between 0 and 32");
      g.max_draft_depth = draft;
    }
    int depth = get_number<int>(o, "draft_depth", -1);
    if (depth > 32) throw InvalidInput("option \"draft_depth\" must be at most 32");
    if (depth >= 0) g.draft_depth = depth;
    g.ignore_eos = o.value("ignore_eos", false);
    if (auto it = b.find("format"); it != b.end() && !it->is_null()) g.grammar = grammar_for(format);
    if (auto it = b.find("tool_calls"); it != b.end() && !it->is_null()) {
      if (g.grammar) throw InvalidInput("format and required tool calls cannot be combined");
      g.grammar = grammar_for(tool_calls, true);
    }
    g.extra_stop_ids = stop_ids_;
    if (auto it = o.find("stop"); it != o.end() && !it->is_null()) {
      if (it->is_string()) {
        c.stops.push_back(it->get<std::string>());
      } else if (it->is_array()) {
        for (const auto& x : *it) {
          if (!x.is_string()) throw InvalidInput("option \"stop\" must be a string or an array of strings");
          c.stops.push_back(x.get<std::string>());
        }
      } else {
        throw InvalidInput("option \"stop\" must be a string or an array of strings");
      }
    }
    return c;
  }

  // The compiled grammar of a `format` ("json" or a JSON schema object), cached per schema text. Compiling
  // and the per-node token classes happen here, before the response starts, so a bad schema is a 400.
  // With `tools`, `format` is {"open", "prefix", "close", "max_calls", "tools": [{"name", "parameters"}]}: tool calls
  // in the chat format's syntax, their arguments following each tool's parameters schema (a JSON object, or
  // key/value elements when "key_open", "key_close", "value_open" and "value_close" are given).
  std::shared_ptr<const grammar::CompiledGrammar> grammar_for(const ordered_json& format, bool tools = false) {
    if (!tools && !(format.is_string() && format.get<std::string>() == "json") && !format.is_object())
      throw InvalidInput("format must be \"json\" or a JSON schema object");
    if (tools && !format.is_object()) throw InvalidInput("tool_calls must be an object");
    const std::string key = (tools ? "tools:" : "") + format.dump();
    if (auto g = grammars_.get(key)) return g;
    const Tokenizer* tok = engine_->tokenizer();
    if (!tok) throw InvalidInput("structured output needs the model's tokenizer, and this model has none");
    {
      std::lock_guard<std::mutex> lk(vocab_mu_);
      if (!vocab_)
        vocab_ = std::make_shared<grammar::TokenVocab>(grammar::TokenVocab::from_tokenizer(*tok, engine_->info().vocab_size));
    }
    grammar::Grammar g;
    if (tools) {
      // A marker that is a special token must be that token; otherwise it is plain text.
      auto marker = [&](const std::string& m) {
        if (m.empty()) throw InvalidInput("tool_calls needs its open and close markers");
        auto id = tok->token_to_id(m);
        return id && tok->is_special(*id) ? grammar::TokenVocab::special_bytes(m) : m;
      };
      grammar::ToolCallSyntax syntax{marker(format.value("open", "")), format.value("prefix", ""),
                                     marker(format.value("close", ""))};
      if (format.contains("key_open")) {  // key/value arguments (GLM-4.7)
        syntax.key_open = marker(format.value("key_open", ""));
        syntax.key_close = marker(format.value("key_close", ""));
        syntax.value_open = marker(format.value("value_open", ""));
        syntax.value_close = marker(format.value("value_close", ""));
      }
      std::vector<grammar::ToolSpec> specs;
      for (const auto& t : format.value("tools", ordered_json::array())) specs.push_back({t.value("name", ""), t.value("parameters", ordered_json())});
      g = grammar::tool_call_grammar(specs, syntax, format.value("max_calls", 1));
    } else {
      g = format.is_string() ? grammar::json_object_grammar() : grammar::json_schema_grammar(format);
    }
    auto cg = std::make_shared<grammar::CompiledGrammar>(grammar::compile(g), vocab_);
    cg->precompute_all();
    grammars_.put(key, cg);
    return cg;
  }

  void completion(const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<Completion> c;
    json body;
    try {
      body = parse(req.body);
      if (!body.is_object()) throw InvalidInput("request body must be a JSON object");
      // The schema's property order sets the output's: read it again, in order.
      ordered_json format, tool_calls;
      if (body.contains("format") || body.contains("tool_calls")) {
        ordered_json ob = ordered_json::parse(req.body);
        format = ob.value("format", ordered_json());
        tool_calls = ob.value("tool_calls", ordered_json());
      }
      c = std::make_shared<Completion>(prepare(body, format, tool_calls));
    } catch (const InvalidInput& e) {
      return send_error(res, 400, e.what());
    } catch (const json::exception& e) {
      return send_error(res, 400, e.what());
    } catch (const std::exception& e) {
      return send_error(res, 500, e.what());
    }
    if (body.value("check_only", false)) {
      res.set_content(json{{"prompt_tokens", c->prompt.size()}}.dump(), "application/json");
      return;
    }
    res.set_chunked_content_provider("application/x-ndjson", [this, c](size_t, httplib::DataSink& sink) {
      run(*c, sink);
      sink.done();
      return true;
    });
  }

  void run(const Completion& c, httplib::DataSink& sink) {
    bool write_failed = false;
    auto write = [&](const json& j) {
      if (write_failed) return false;
      std::string s = dump_line(j);
      if (!sink.write(s.data(), s.size())) write_failed = true;
      return !write_failed;
    };
    {
      std::lock_guard<std::mutex> lk(mu_);
      requests_++;
    }
    if (c.gen.max_tokens == 0) {
      GenerateStats st;
      st.prompt_tokens = static_cast<int64_t>(c.prompt.size());
      write({{"done", true}, {"done_reason", "length"}, {"content", ""}, {"stats", st.to_json()}});
      return;
    }
    const Tokenizer* tok = engine_->tokenizer();
    std::unique_ptr<StreamingDecoder> dec = tok ? std::make_unique<StreamingDecoder>(*tok, false) : nullptr;
    StopMatcher stops(c.stops);
    GenerateStats stats;
    auto t0 = std::chrono::steady_clock::now();
    try {
      stats = engine_->generate(c.prompt, c.gen, [&](const TokenEvent& ev) {
        std::string piece = dec ? dec->push(ev.token) : std::string();
        json line = {{"content", stops.push(piece)}, {"token", ev.token}};
        if (ev.logprob) {
          json lp = {{"id", ev.logprob->id}, {"logprob", ev.logprob->logprob}};
          if (tok) lp["token"] = tok->decode({ev.logprob->id});
          json top = json::array();
          for (const auto& t : ev.top) {
            json e = {{"id", t.id}, {"logprob", t.logprob}};
            if (tok) e["token"] = tok->decode({t.id});
            top.push_back(std::move(e));
          }
          lp["top_logprobs"] = std::move(top);
          line["logprob"] = std::move(lp);
        }
        if (!write(line)) return false;
        return !stops.stopped();
      });
    } catch (const DeviceError& e) {
      // The device's state cannot be trusted after this: answer, then exit so that the server starts a fresh runner
      // for the next request.
      std::fprintf(stderr, "runner: device failure, exiting: %s\n", e.what());
      write({{"error", fmt::format("the device failed: {}", e.what())}});
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        std::_Exit(3);
      }).detach();
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "runner: generation failed: %s\n", e.what());
      write({{"error", e.what()}});
      return;
    }
    std::string tail;
    if (!stops.stopped()) {
      if (dec) tail = stops.push(dec->flush());
      tail += stops.flush();
    }
    std::string reason = stops.stopped() ? "stop" : stats.done_reason;
    json st = stats.to_json();
    st["device"] = backend_for(engine_->device()).description();
    if (!write_failed) write({{"done", true}, {"done_reason", reason}, {"content", tail}, {"stats", st}});
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (write_failed) cancelled_++;
      last_ = {{"generated", stats.generated},
               {"max_tokens", c.gen.max_tokens},
               {"done_reason", write_failed ? "cancel" : reason},
               {"cancelled", write_failed}};
    }
    if (write_failed)
      std::fprintf(stderr, "runner: request cancelled (client went away) after %lld generated tokens, %.2fs\n",
                   static_cast<long long>(stats.generated), secs);
  }

  RunnerOptions opts_;
  std::unique_ptr<Engine> engine_;
  std::vector<int32_t> stop_ids_;
  mutable std::mutex mu_;
  std::mutex vocab_mu_;
  std::shared_ptr<const grammar::TokenVocab> vocab_;
  grammar::GrammarCache grammars_;
  int64_t requests_ = 0, cancelled_ = 0;
  json last_ = json::object();
};

}  // namespace

int run_runner(const RunnerOptions& options) {
  ::signal(SIGPIPE, SIG_IGN);
  // SIGINT/SIGTERM are taken by a dedicated thread (sigwait) so every other thread, the compute thread included,
  // never runs a handler.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  httplib::Server svr;
  std::atomic<bool> serving{false};
  std::thread signals([&] {
    int sig = 0;
    sigwait(&set, &sig);
    if (!serving.load()) {
      std::fprintf(stderr, "runner: stopped while loading\n");
      std::_Exit(0);
    }
    svr.stop();
  });
  signals.detach();
  if (options.exit_on_stdin_eof) {
    std::thread([] {
      char buf[256];
      while (true) {
        ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EINTR)) break;
      }
      ::kill(::getpid(), SIGTERM);
    }).detach();
  }

  std::unique_ptr<Engine> engine;
  auto t0 = std::chrono::steady_clock::now();
  try {
    ModelSource src = resolve_model(options.model, options.model_dir);
    EngineOptions eo;
    eo.num_ctx = options.num_ctx;
    eo.use_draft = options.use_draft;
    const Device device = resolve_device(options.device);
    engine = std::make_unique<Engine>(src, device, eo,
                                      [](const std::string& line) { std::fprintf(stderr, "runner: %s\n", line.c_str()); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: loading %s: %s\n", options.model.empty() ? options.model_dir.c_str() : options.model.c_str(),
                 e.what());
    return 1;
  }
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  Runner runner(options, std::move(engine));
  runner.install(svr);
  svr.set_read_timeout(600, 0);
  svr.set_write_timeout(30, 0);
  int port = options.port;
  if (port == 0) {
    port = svr.bind_to_any_port(options.host);
  } else if (!svr.bind_to_port(options.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    std::fprintf(stderr, "error: cannot listen on %s:%d\n", options.host.c_str(), options.port);
    return 1;
  }
  serving = true;
  json st = runner.status();
  std::fprintf(stderr, "runner: loaded %s on %s in %.2fs (context %lld, drafter %s), listening on %s:%d\n",
               st["model"].get<std::string>().c_str(), st["device_name"].get<std::string>().c_str(), load_s,
               static_cast<long long>(st["context_length"].get<int64_t>()), st["drafter"].get<bool>() ? "yes" : "no",
               options.host.c_str(), port);
  std::printf("%s\n", json{{"status", "ready"}, {"port", port}, {"pid", ::getpid()}}.dump().c_str());
  std::fflush(stdout);
  svr.listen_after_bind();
  std::fprintf(stderr, "runner: stopped\n");
  return 0;
}

}  // namespace vatic::runner
