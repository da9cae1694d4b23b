// Protocol tests against a live `vatic serve` with the fixture models.
#include <atomic>
#include <thread>

#include "grammar/schema_check.h"
#include "server/harness.h"

namespace vatic::test {
namespace {

class Api : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Creating from server folders through the API is off by default; this server allows the fixture models.
    server_ = new ServerProcess(
        Env{{"VATIC_KEEP_ALIVE", "5m"}, {"VATIC_CREATE_PATHS", (fs::path(VATIC_FIXTURES_DIR) / "models").string()}});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static httplib::Result post(const std::string& path, const json& body, int timeout = 60) {
    auto c = server_->client(timeout);
    return c.Post(path, body.dump(), "application/json");
  }
  static json ps() {
    auto c = server_->client();
    auto r = c.Get("/api/ps");
    EXPECT_TRUE(r);
    return json::parse(r->body);
  }
  static ServerProcess* server_;
};
ServerProcess* Api::server_ = nullptr;

TEST_F(Api, HealthAndVersion) {
  auto c = server_->client();
  auto r = c.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "vatic is running");
  auto h = c.Head("/");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto v = c.Get("/api/version");
  ASSERT_TRUE(v);
  EXPECT_TRUE(json::parse(v->body).contains("version"));
}

TEST_F(Api, GenerateStreamsNdjsonWithFinalMetrics) {
  auto r = post("/api/generate", {{"model", "tiny"}, {"prompt", "Hello there"}, {"options", {{"num_predict", 12}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/x-ndjson");
  auto lines = ndjson(r->body);
  ASSERT_GE(lines.size(), 1u);
  for (size_t i = 0; i + 1 < lines.size(); i++) {
    EXPECT_EQ(lines[i]["model"], "tiny");
    EXPECT_FALSE(lines[i]["done"].get<bool>());
    EXPECT_TRUE(lines[i]["response"].is_string());
    EXPECT_TRUE(lines[i]["created_at"].is_string());
  }
  const json& fin = lines.back();
  EXPECT_TRUE(fin["done"].get<bool>());
  EXPECT_TRUE(fin["done_reason"] == "stop" || fin["done_reason"] == "length") << fin;
  for (const char* k : {"total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
                        "eval_duration"})
    EXPECT_TRUE(fin.contains(k) && fin[k].is_number_integer()) << k << " in " << fin;
  EXPECT_GT(fin["prompt_eval_count"].get<int64_t>(), 0);
  EXPECT_LE(fin["eval_count"].get<int64_t>(), 12);
  EXPECT_GT(fin["total_duration"].get<int64_t>(), 0);
  EXPECT_TRUE(fin.contains("prompt_cache"));
}

TEST_F(Api, GenerateNonStreamingAndSpeculativeStats) {
  json req = {{"model", "tiny"},
              {"prompt", "Once upon a time"},
              {"stream", false},
              {"options", {{"num_predict", 24}, {"ignore_eos", true}, {"temperature", 0}}}};
  auto r = post("/api/generate", req);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  json j = json::parse(r->body);
  EXPECT_TRUE(j["done"].get<bool>());
  EXPECT_EQ(j["eval_count"], 24);
  EXPECT_EQ(j["done_reason"], "length");
  ASSERT_TRUE(j.contains("speculative")) << j;
  EXPECT_GT(j["speculative"]["rounds"].get<int64_t>(), 0);
  for (const char* k : {"drafted", "accepted", "acceptance_length", "position_acceptance"})
    EXPECT_TRUE(j["speculative"].contains(k)) << k;
  // The same prompt again reuses the cached prefix.
  auto r2 = post("/api/generate", req);
  ASSERT_TRUE(r2);
  json j2 = json::parse(r2->body);
  EXPECT_GT(j2["prompt_cache"]["reused"].get<int64_t>(), 0) << j2;
  // prompt_eval_count counts the evaluated tokens only (as ollama); the reused ones are reported apart.
  EXPECT_EQ(j2["prompt_eval_count"].get<int64_t>() + j2["prompt_cache"]["reused"].get<int64_t>(),
            j["prompt_eval_count"].get<int64_t>() + j["prompt_cache"]["reused"].get<int64_t>());
  EXPECT_LT(j2["prompt_eval_count"].get<int64_t>(), j["prompt_eval_count"].get<int64_t>());
  EXPECT_EQ(j2["response"], j["response"]);  // greedy: the warm request answers exactly as the cold one
}

TEST_F(Api, StopStringsCutTheOutput) {
  json req = {{"model", "tiny"},
              {"prompt", "abc"},
              {"raw", true},
              {"stream", false},
              {"options", {{"num_predict", 40}, {"ignore_eos", true}, {"temperature", 0}}}};
  auto r = post("/api/generate", req);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string full = json::parse(r->body)["response"];
  // A stop string made of two ASCII characters from the second half of the output.
  std::string stop;
  for (size_t i = full.size() / 2; i + 1 < full.size() && stop.empty(); i++)
    if (std::isalnum(static_cast<unsigned char>(full[i])) && std::isalnum(static_cast<unsigned char>(full[i + 1])))
      stop = full.substr(i, 2);
  if (stop.empty()) GTEST_SKIP() << "no ASCII pair in the output: " << full;
  size_t cut = full.find(stop);
  req["options"]["stop"] = json::array({stop});
  req["stream"] = true;
  auto r2 = post("/api/generate", req);
  ASSERT_TRUE(r2);
  std::string text;
  auto lines = ndjson(r2->body);
  for (const auto& l : lines) text += l.value("response", "");
  EXPECT_EQ(text, full.substr(0, cut));
  EXPECT_EQ(lines.back()["done_reason"], "stop");
}

TEST_F(Api, ChatStreamingAndNot) {
  json req = {{"model", "dense"},
              {"messages", json::array({{{"role", "user"}, {"content", "Hi!"}}})},
              {"options", {{"num_predict", 8}}}};
  auto r = post("/api/chat", req);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto lines = ndjson(r->body);
  ASSERT_GE(lines.size(), 1u);
  for (const auto& l : lines) {
    ASSERT_TRUE(l.contains("message")) << l;
    EXPECT_EQ(l["message"]["role"], "assistant");
  }
  EXPECT_TRUE(lines.back()["done"].get<bool>());
  EXPECT_TRUE(lines.back().contains("eval_count"));
  req["stream"] = false;
  req["tools"] = json::array({{{"type", "function"},
                               {"function",
                                {{"name", "get_weather"},
                                 {"description", "Weather in a city"},
                                 {"parameters",
                                  {{"type", "object"},
                                   {"properties", {{"city", {{"type", "string"}}}}},
                                   {"required", json::array({"city"})}}}}}}});
  req["think"] = true;
  auto r2 = post("/api/chat", req);
  ASSERT_TRUE(r2);
  ASSERT_EQ(r2->status, 200) << r2->body;
  json j = json::parse(r2->body);
  EXPECT_EQ(j["message"]["role"], "assistant");
  EXPECT_TRUE(j["done"].get<bool>());
}

TEST_F(Api, LogprobsAreReturned) {
  auto r = post("/api/generate", {{"model", "tiny"},
                                  {"prompt", "x"},
                                  {"stream", false},
                                  {"logprobs", true},
                                  {"top_logprobs", 3},
                                  {"options", {{"num_predict", 4}, {"ignore_eos", true}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  ASSERT_TRUE(j.contains("logprobs")) << j;
  ASSERT_EQ(j["logprobs"].size(), 4u);
  EXPECT_LE(j["logprobs"][0]["logprob"].get<double>(), 0.0);
  EXPECT_EQ(j["logprobs"][0]["top_logprobs"].size(), 3u);
}

TEST_F(Api, OpenAIChatCompletionsSse) {
  auto r = post("/v1/chat/completions", {{"model", "tiny"},
                                         {"messages", json::array({{{"role", "user"}, {"content", "Hello"}}})},
                                         {"max_tokens", 6},
                                         {"stream", true},
                                         {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  std::vector<std::string> events;
  size_t pos = 0;
  while (pos < r->body.size()) {
    size_t end = r->body.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos) << "unterminated event";
    std::string ev = r->body.substr(pos, end - pos);
    ASSERT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    events.push_back(ev.substr(6));
    pos = end + 2;
  }
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_GT(usage["usage"]["prompt_tokens"].get<int>(), 0);
  json fin = json::parse(events[events.size() - 3]);
  EXPECT_EQ(fin["object"], "chat.completion.chunk");
  EXPECT_TRUE(fin["choices"][0]["finish_reason"] == "length" || fin["choices"][0]["finish_reason"] == "stop");
  json first = json::parse(events[0]);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
}

TEST_F(Api, OpenAINonStreamingModelsAndErrors) {
  auto r = post("/v1/chat/completions", {{"model", "tiny"},
                                         {"messages", json::array({{{"role", "user"}, {"content", "Hello"}}})},
                                         {"max_completion_tokens", 5},
                                         {"reasoning_effort", "none"},
                                         {"seed", 7},
                                         {"temperature", 0.8}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 5);

  auto c = post("/v1/completions", {{"model", "tiny"}, {"prompt", "Say"}, {"max_tokens", 4}});
  ASSERT_TRUE(c);
  ASSERT_EQ(c->status, 200) << c->body;
  EXPECT_EQ(json::parse(c->body)["object"], "text_completion");

  auto cl = server_->client();
  auto m = cl.Get("/v1/models");
  ASSERT_TRUE(m);
  json models = json::parse(m->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_GE(models["data"].size(), 3u);
  auto one = cl.Get("/v1/models/tiny:latest");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  EXPECT_EQ(json::parse(one->body)["id"], "tiny:latest");
  auto missing = cl.Get("/v1/models/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  json err = json::parse(missing->body);
  EXPECT_TRUE(err["error"]["message"].is_string());
  EXPECT_TRUE(err["error"]["type"].is_string());

  auto bad = cl.Post("/v1/chat/completions", "{oops", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_TRUE(json::parse(bad->body)["error"].is_object());
}

TEST_F(Api, ErrorStatuses) {
  auto c = server_->client();
  auto expect_error = [](const httplib::Result& r, int status, const std::string& needle) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    json j = json::parse(r->body);
    ASSERT_TRUE(j["error"].is_string()) << r->body;
    EXPECT_NE(j["error"].get<std::string>().find(needle), std::string::npos) << j;
  };
  expect_error(c.Post("/api/generate", "{not json", "application/json"), 400, "invalid JSON");
  expect_error(c.Post("/api/generate", "[1,2]", "application/json"), 400, "JSON object");
  expect_error(post("/api/generate", {{"prompt", "x"}}), 400, "model is required");
  expect_error(post("/api/generate", {{"model", 5}}), 400, "model");
  expect_error(post("/api/generate", {{"model", "no-such-model"}, {"prompt", "x"}}), 404, "not found");
  expect_error(post("/api/chat", {{"model", "no-such-model"}, {"messages", json::array()}}), 404, "not found");
  expect_error(post("/api/generate", {{"model", "tiny"}, {"prompt", "x"}, {"options", {{"temperature", "hot"}}}}), 400,
               "temperature");
  expect_error(post("/api/generate", {{"model", "tiny"}, {"prompt", "x"}, {"options", {{"top_p", 3.5}}}}), 400, "top_p");
  expect_error(post("/api/generate", {{"model", "tiny"}, {"prompt", "x"}, {"keep_alive", "forever"}}), 400,
               "duration");
  expect_error(post("/api/generate", {{"model", "tiny"}, {"prompt", "x"}, {"format", "yaml"}}), 400, "format");
  expect_error(post("/api/generate", {{"model", "tiny"}, {"prompt", "x"}, {"format", {{"type", "integer"}, {"multipleOf", 3}}}}),
               400, "multipleOf");
  expect_error(post("/api/chat", {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}, {"think", true},
                                  {"format", "json"}}),
               400, "format");
  expect_error(post("/api/chat", {{"model", "tiny"}, {"messages", "hi"}}), 400, "messages");
  // Over the context: the prompt is longer than num_ctx.
  std::string long_prompt;
  for (int i = 0; i < 400; i++) long_prompt += "word" + std::to_string(i) + " ";
  expect_error(post("/api/generate", {{"model", "plain"}, {"prompt", long_prompt}, {"options", {{"num_ctx", 64}}}}), 400,
               "context length");
  expect_error(post("/api/embed", {{"model", "tiny"}, {"input", "x"}}), 501, "not supported");
  expect_error(c.Get("/api/nothing-here"), 404, "no such endpoint");
  // Bodies over the limit are refused.
  std::string huge(33u << 20, 'a');
  auto big = c.Post("/api/generate", huge, "application/json");
  if (big) {
    EXPECT_EQ(big->status, 413);
  }
}

// format / response_format: the answer follows the schema (the random fixture model has no idea of JSON, so only
// the grammar makes it valid), on both APIs.
TEST_F(Api, StructuredOutput) {
  const json schema = {{"type", "object"},
                       {"properties", {{"ok", {{"type", "boolean"}}}, {"n", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}}}},
                       {"required", {"ok", "n"}}};
  auto check = [](const std::string& text) {
    json v = json::parse(text, nullptr, false);
    ASSERT_TRUE(v.is_object()) << text;
    EXPECT_EQ(v.size(), 2u) << text;
    EXPECT_TRUE(v["ok"].is_boolean()) << text;
    ASSERT_TRUE(v["n"].is_number_integer()) << text;
    EXPECT_GE(v["n"].get<int>(), 0);
    EXPECT_LE(v["n"].get<int>(), 9);
  };
  for (double temperature : {0.0, 1.0}) {
    auto r = post("/api/generate", {{"model", "tiny"}, {"prompt", "Answer in JSON"}, {"stream", false}, {"format", schema},
                                    {"options", {{"temperature", temperature}, {"seed", 3}, {"num_predict", 400}}}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    json j = json::parse(r->body);
    EXPECT_EQ(j["done_reason"], "stop") << r->body;
    check(j["response"].get<std::string>());
  }
  auto o = post("/v1/chat/completions",
                {{"model", "tiny"},
                 {"messages", {{{"role", "user"}, {"content", "JSON"}}}},
                 {"max_tokens", 400},
                 {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"strict", true}, {"schema", schema}}}}}});
  ASSERT_TRUE(o);
  ASSERT_EQ(o->status, 200) << o->body;
  check(json::parse(o->body)["choices"][0]["message"]["content"].get<std::string>());
  auto bad = post("/v1/chat/completions", {{"model", "tiny"},
                                           {"messages", {{{"role", "user"}, {"content", "JSON"}}}},
                                           {"response_format", {{"type", "xml"}}}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  auto no_schema = post("/v1/chat/completions", {{"model", "tiny"},
                                                 {"messages", {{{"role", "user"}, {"content", "JSON"}}}},
                                                 {"response_format", {{"type", "json_schema"}}}});
  ASSERT_TRUE(no_schema);
  EXPECT_EQ(no_schema->status, 400);
}

TEST_F(Api, ConcurrentRequestsAreAllAnswered) {
  const int n = 6;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < n; i++) {
    threads.emplace_back([&, i] {
      auto r = post("/api/generate", {{"model", i % 2 ? "tiny" : "dense"},
                                      {"prompt", "request " + std::to_string(i)},
                                      {"stream", i % 3 == 0},
                                      {"options", {{"num_predict", 16}}}});
      if (r && r->status == 200 && r->body.find("\"done\":true") != std::string::npos) ok++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), n) << server_->log();
}

TEST_F(Api, ClientDisconnectStopsGeneration) {
  const int num_predict = 3000;
  auto c = server_->client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/api/generate";
  req.body = json{{"model", "plain"},
                  {"prompt", "Tell me a long story"},
                  {"raw", true},
                  // Greedy: this fixture's greedy text streams a line per token, so the client can hang up early.
                  {"options", {{"num_predict", num_predict}, {"ignore_eos", true}, {"temperature", 0}}}}
                 .dump();
  req.set_header("Content-Type", "application/json");
  int lines = 0;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    lines += static_cast<int>(std::count(data, data + len, '\n'));
    return lines < 3;  // hang up after a few tokens
  };
  auto r = c.send(req);
  EXPECT_FALSE(r);  // cancelled by us
  // The runner notices within a step and records the cancellation.
  json last;
  eventually(
      [&] {
        for (const json p = ps(); const auto& m : p["models"])
          if (m["name"] == "plain:latest" && m["runner"].contains("last")) last = m["runner"]["last"];
        return last.value("cancelled", false);
      },
      100);
  ASSERT_TRUE(last.value("cancelled", false)) << last << "\n" << server_->log();
  EXPECT_LT(last["generated"].get<int64_t>(), num_predict / 2) << last;
  // The runner records the cancellation, then logs it; the line reaches the server's log through the runner's
  // stderr, so it may come a little after the record is visible.
  EXPECT_TRUE(eventually([&] { return server_->log().find("request cancelled") != std::string::npos; }, 100))
      << server_->log();
}

TEST_F(Api, LoadUnloadAndKeepAliveZero) {
  auto r = post("/api/generate", {{"model", "dense"}, {"stream", false}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["done_reason"], "load");
  bool found = false;
  for (const json p_ = ps(); const auto& m : p_["models"]) {
    if (m["name"] != "dense:latest") continue;
    found = true;
    EXPECT_TRUE(m["expires_at"].is_string());
    EXPECT_GT(m["size"].get<int64_t>(), 0);
    EXPECT_GT(m["runner"]["pid"].get<int>(), 0);
  }
  EXPECT_TRUE(found);
  auto u = post("/api/chat", {{"model", "dense"}, {"messages", json::array()}, {"keep_alive", 0}, {"stream", false}});
  ASSERT_TRUE(u);
  EXPECT_EQ(json::parse(u->body)["done_reason"], "unload");
  for (const json p_ = ps(); const auto& m : p_["models"]) EXPECT_NE(m["name"], "dense:latest");

  // A request with keep_alive 0 unloads its model when it is done.
  auto g = post("/api/generate",
                {{"model", "dense"}, {"prompt", "hi"}, {"keep_alive", 0}, {"stream", false}, {"options", {{"num_predict", 2}}}});
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 200);
  EXPECT_TRUE(eventually(
      [&] {
        bool gone = true;
        for (const json p_ = ps(); const auto& m : p_["models"]) gone &= m["name"] != "dense:latest";
        return gone;
      },
      50));
}

TEST_F(Api, KilledRunnerIsReportedAndReplaced) {
  json req = {{"model", "tiny"}, {"prompt", "hello"}, {"stream", false}, {"options", {{"num_predict", 2}}}};
  ASSERT_EQ(post("/api/generate", req)->status, 200);
  int pid = 0;
  for (const json p_ = ps(); const auto& m : p_["models"])
    if (m["name"] == "tiny:latest") pid = m["runner"]["pid"];
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto r = post("/api/generate", req);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  int pid2 = 0;
  for (const json p_ = ps(); const auto& m : p_["models"])
    if (m["name"] == "tiny:latest") pid2 = m["runner"]["pid"];
  EXPECT_GT(pid2, 0);
  EXPECT_NE(pid2, pid);

  // Killed in the middle of a streamed request: one final error line that says what happened.
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::kill(pid2, SIGKILL);
  });
  auto s = post("/api/generate", {{"model", "tiny"},
                                  {"prompt", "a long one"},
                                  {"options", {{"num_predict", 4000}, {"ignore_eos", true}}}});
  killer.join();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->status, 200);
  auto lines = ndjson(s->body);
  ASSERT_FALSE(lines.empty());
  if (lines.back().contains("error")) {
    std::string e = lines.back()["error"];
    EXPECT_NE(e.find("stopped unexpectedly"), std::string::npos) << e;
    EXPECT_NE(e.find("signal 9"), std::string::npos) << e;
  } else {
    GTEST_SKIP() << "generation finished before the runner was killed";
  }
  // And the next request gets a fresh runner.
  auto again = post("/api/generate", req);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
}

TEST_F(Api, ModelManagement) {
  auto c = server_->client();
  auto tags = json::parse(c.Get("/api/tags")->body);
  ASSERT_GE(tags["models"].size(), 3u);
  for (const auto& m : tags["models"]) {
    EXPECT_TRUE(m["name"].is_string());
    EXPECT_TRUE(m["model"].is_string());
    EXPECT_TRUE(m["modified_at"].is_string());
    EXPECT_TRUE(m["size"].is_number());
    EXPECT_TRUE(m["digest"].is_string());
    EXPECT_EQ(m["details"]["format"], "safetensors");
  }
  auto show = post("/api/show", {{"model", "tiny"}});
  ASSERT_EQ(show->status, 200) << show->body;
  json s = json::parse(show->body);
  EXPECT_TRUE(s["modelfile"].is_string());
  EXPECT_TRUE(s["details"].is_object());
  EXPECT_TRUE(s["model_info"].is_object());
  EXPECT_TRUE(s.contains("draft"));
  EXPECT_EQ(post("/api/show", {{"model", "missing"}})->status, 404);

  // create (streamed progress) from a local directory, copy, delete
  auto cr = post("/api/create", {{"model", "made"},
                                 {"from", fixture_model("gemma4-dense-tiny").string()},
                                 {"parameters", {{"temperature", 0.5}, {"stop", json::array({"<end>"})}}},
                                 {"system", "Be brief."}});
  ASSERT_TRUE(cr);
  ASSERT_EQ(cr->status, 200) << cr->body;
  auto lines = ndjson(cr->body);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back()["status"], "success") << cr->body;
  json made = json::parse(post("/api/show", {{"model", "made"}})->body);
  EXPECT_EQ(made["system"], "Be brief.");
  EXPECT_NE(made["parameters"].get<std::string>().find("temperature"), std::string::npos);

  auto mf = post("/api/create", {{"model", "made2"},
                                 {"modelfile", "FROM " + fixture_model("gemma4-dense-tiny").string() + "\nPARAMETER top_k 5\n"},
                                 {"stream", false}});
  ASSERT_EQ(mf->status, 200) << mf->body;
  auto bad = post("/api/create", {{"model", "made3"}, {"modelfile", "FROMM nothing\n"}, {"stream", false}});
  EXPECT_EQ(bad->status, 400) << bad->body;

  EXPECT_EQ(post("/api/copy", {{"source", "made"}, {"destination", "made-copy"}})->status, 200);
  EXPECT_EQ(post("/api/copy", {{"source", "nope"}, {"destination", "x"}})->status, 404);
  auto gen = post("/api/generate", {{"model", "made-copy"}, {"prompt", "hi"}, {"stream", false}, {"options", {{"num_predict", 2}}}});
  EXPECT_EQ(gen->status, 200) << gen->body;
  for (const char* name : {"made", "made2", "made-copy"}) {
    auto d = c.Delete("/api/delete", json{{"model", name}}.dump(), "application/json");
    ASSERT_TRUE(d);
    EXPECT_EQ(d->status, 200) << name << ": " << d->body;
  }
  auto d = c.Delete("/api/delete", json{{"model", "made"}}.dump(), "application/json");
  EXPECT_EQ(d->status, 404);
}

// A server with a queue of one and one loaded model at a time.
TEST(ApiLimits, QueueOverflowGets503AndLruEviction) {
  ServerProcess server(Env{{"VATIC_MAX_QUEUE", "1"}, {"VATIC_MAX_LOADED_MODELS", "1"}});
  auto post = [&](const json& body) {
    auto c = server.client();
    return c.Post("/api/generate", body.dump(), "application/json");
  };
  const int n = 4;
  std::vector<int> status(n, 0);
  std::vector<std::string> bodies(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; i++)
    threads.emplace_back([&, i] {
      auto r = post({{"model", "plain"},
                     {"prompt", "busy " + std::to_string(i)},
                     {"stream", false},
                     {"options", {{"num_predict", 400}, {"ignore_eos", true}}}});
      if (r) {
        status[i] = r->status;
        bodies[i] = r->body;
      }
    });
  for (auto& t : threads) t.join();
  int ok = 0, busy = 0;
  for (int i = 0; i < n; i++) {
    if (status[i] == 200) ok++;
    if (status[i] == 503) {
      busy++;
      EXPECT_EQ(json::parse(bodies[i])["error"], "server busy, please try again. maximum pending requests exceeded");
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(busy, 1);
  EXPECT_EQ(ok + busy, n);

  // One model at a time: using a second model evicts the first.
  ASSERT_EQ(post({{"model", "tiny"}, {"prompt", "x"}, {"stream", false}, {"options", {{"num_predict", 1}}}})->status, 200);
  auto c = server.client();
  json p = json::parse(c.Get("/api/ps")->body);
  ASSERT_EQ(p["models"].size(), 1u) << p;
  EXPECT_EQ(p["models"][0]["name"], "tiny:latest");
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(ApiLimits, HungRunnerTimesOutAndIsReplaced) {
  ServerProcess server(Env{{"VATIC_RUNNER_TIMEOUT", "1s"}});
  auto c = server.client();
  json req = {{"model", "tiny"}, {"prompt", "hi"}, {"stream", false}, {"options", {{"num_predict", 2}}}};
  ASSERT_EQ(c.Post("/api/generate", req.dump(), "application/json")->status, 200);
  json p = json::parse(c.Get("/api/ps")->body);
  int pid = p["models"][0]["runner"]["pid"];
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);  // the runner stops answering
  auto r = c.Post("/api/generate", req.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  std::string err = json::parse(r->body)["error"];
  EXPECT_NE(err.find("no answer from the runner"), std::string::npos) << err;
  auto again = c.Post("/api/generate", req.dump(), "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
  json p2 = json::parse(c.Get("/api/ps")->body);
  EXPECT_NE(p2["models"][0]["runner"]["pid"].get<int>(), pid);
}

TEST(ApiLimits, DefaultKeepAliveFromEnvironment) {
  ServerProcess server(Env{{"VATIC_KEEP_ALIVE", "1s"}});
  auto c = server.client();
  auto r = c.Post("/api/generate", json{{"model", "tiny"}, {"stream", false}}.dump(), "application/json");
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(c.Get("/api/ps")->body)["models"].size(), 1u);
  EXPECT_TRUE(eventually([&] { return json::parse(c.Get("/api/ps")->body)["models"].empty(); }, 61,
                         std::chrono::milliseconds(100)));
}

}  // namespace
}  // namespace vatic::test

namespace vatic::test {
namespace {

// GLM-4.7-Flash architecture (int8) through the server: the GLM chat format with thinking on and off.
TEST_F(Api, GlmChatThinkingOnAndOff) {
  auto show = post("/api/show", {{"model", "glm"}});
  ASSERT_TRUE(show);
  ASSERT_EQ(show->status, 200) << show->body;
  EXPECT_EQ(json::parse(show->body)["renderer"], "glm-4.7");
  json req = {{"model", "glm"},
              {"messages", json::array({{{"role", "user"}, {"content", "Hello"}}})},
              {"stream", false},
              {"options", {{"num_predict", 10}, {"temperature", 0}}}};
  req["think"] = true;
  auto on = post("/api/chat", req);
  ASSERT_TRUE(on);
  ASSERT_EQ(on->status, 200) << on->body;
  json a = json::parse(on->body);
  // The prompt opens <think>: what the model writes is thinking until it closes it.
  EXPECT_FALSE(a["message"].value("thinking", "").empty()) << on->body;
  EXPECT_EQ(a["eval_count"], 10);
  req["think"] = false;
  auto off = post("/api/chat", req);
  ASSERT_TRUE(off);
  ASSERT_EQ(off->status, 200) << off->body;
  json b = json::parse(off->body);
  EXPECT_TRUE(b["message"].value("thinking", "").empty()) << off->body;
  EXPECT_FALSE(b["message"].value("content", "").empty()) << off->body;
}

// tool_choice "required" / a named function with the GLM-4.7 chat format: the fixture model's random weights write
// tool calls only because of the grammar; every call is parsed back and its arguments validate.
TEST_F(Api, GlmRequiredToolCallsValidate) {
  const ordered_json weather = ordered_json::parse(R"({"type":"object","properties":{
    "city":{"type":"string","minLength":1,"maxLength":10},
    "unit":{"type":"string","enum":["celsius","fahrenheit"]},
    "days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","unit"]})");
  const ordered_json draw = ordered_json::parse(R"({"type":"object","properties":{
    "shape":{"oneOf":[
      {"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"integer","minimum":0,"maximum":5}},
       "required":["kind","r"],"additionalProperties":false},
      {"type":"object","properties":{"kind":{"const":"rect"},"w":{"type":"integer","minimum":1,"maximum":9}},
       "required":["kind","w"],"additionalProperties":false}]},
    "filled":{"type":"boolean"}},"required":["shape","filled"]})");
  const json tools = json::array(
      {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", json::parse(weather.dump())}}}},
       {{"type", "function"}, {"function", {{"name", "draw"}, {"parameters", json::parse(draw.dump())}}}}});
  const json named = {{"type", "function"}, {"function", {{"name", "draw"}}}};
  int calls = 0;
  for (const auto& [tool_choice, seed] : std::vector<std::pair<json, int>>{{"required", 1}, {"required", 2}, {named, 3}}) {
    auto r = post("/v1/chat/completions", {{"model", "glm"},
                                           {"messages", {{{"role", "user"}, {"content", "Use a tool."}}}},
                                           {"tools", tools},
                                           {"tool_choice", tool_choice},
                                           {"max_tokens", 2000},
                                           {"seed", seed}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    json choice = json::parse(r->body)["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << choice;
    ASSERT_TRUE(choice["message"].contains("tool_calls")) << choice;
    for (const auto& c : choice["message"]["tool_calls"]) {
      const std::string name = c["function"]["name"];
      if (tool_choice.is_object()) {
        EXPECT_EQ(name, "draw");
      }
      ASSERT_TRUE(name == "draw" || name == "get_weather") << name;
      const ordered_json& schema = name == "draw" ? draw : weather;
      ordered_json args = ordered_json::parse(c["function"]["arguments"].get<std::string>());
      EXPECT_TRUE(schema_check::valid(args, schema, schema)) << name << " " << args.dump();
      calls++;
    }
  }
  EXPECT_GE(calls, 3);
  // A parameter schema the GLM-4.7 format cannot carry exactly is a 400 that says why.
  json bad_tools = json::array({{{"type", "function"},
                                 {"function", {{"name", "f"}, {"parameters", {{"type", "object"}, {"properties", {{"x", {{"type", json::array({"string", "integer"})}}}}}}}}}}});
  auto bad = post("/v1/chat/completions", {{"model", "glm"},
                                           {"messages", {{{"role", "user"}, {"content", "x"}}}},
                                           {"tools", bad_tools},
                                           {"tool_choice", "required"}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_NE(bad->body.find("told apart"), std::string::npos) << bad->body;
}

}  // namespace
}  // namespace vatic::test
