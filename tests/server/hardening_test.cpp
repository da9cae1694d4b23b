// The server under hostile input, bursts and faults: body limits whatever the framing, JSON nesting, idle and
// bursting clients, Host / Origin checks, a busy port, option ranges, refused creates, blob uploads and the create
// path policy, runner crashes with queued requests, and stale runners of deleted models.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <future>
#include <thread>

#include "server/harness.h"
#include "server/http.h"
#include "store/sha256.h"

namespace vatic::test {
namespace {

using Clock = std::chrono::steady_clock;

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads what the server answers until it closes or `timeout_ms` passes without data.
std::string read_reply(int fd, int timeout_ms) {
  std::string out;
  char buf[65536];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    // One response is enough for these tests.
    if (auto h = out.find("\r\n\r\n"); h != std::string::npos) {
      auto cl = out.find("Content-Length: ");
      if (cl != std::string::npos && cl < h) {
        size_t len = std::stoul(out.substr(cl + 16));
        if (out.size() >= h + 4 + len) break;
      }
    }
  }
  return out;
}

int status_of(const std::string& reply) {
  if (reply.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::stoi(reply.substr(9, 3));
}

// A chunked body of `total` bytes of 'a', sent in 1 MiB chunks (stops early when the server closes).
std::string chunked_request(const std::string& path) {
  return "POST " + path +
         " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
}

int send_chunked(int port, const std::string& path, size_t total) {
  int fd = connect_to(port);
  if (fd < 0) return -1;
  send_all(fd, chunked_request(path));
  const std::string piece(1 << 20, 'a');
  char head[32];
  std::snprintf(head, sizeof head, "%zx\r\n", piece.size());
  for (size_t sent = 0; sent < total; sent += piece.size())
    if (!send_all(fd, head + piece + "\r\n")) break;
  send_all(fd, "0\r\n\r\n");
  int st = status_of(read_reply(fd, 10000));
  ::close(fd);
  return st;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class Hardening : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess(Env{{"VATIC_KEEP_ALIVE", "5m"}}); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static httplib::Result post(const std::string& path, const json& body, int timeout = 60) {
    auto c = server_->client(timeout);
    return c.Post(path, body.dump(), "application/json");
  }
  static httplib::Result post_raw(const std::string& path, const std::string& body, const std::string& type) {
    auto c = server_->client(60);
    return c.Post(path, body, type);
  }
  static ServerProcess* server_;
};
ServerProcess* Hardening::server_ = nullptr;

TEST_F(Hardening, DeeplyNestedJsonIsRefusedOnEveryEndpoint) {
  std::string deep = std::string(60000, '[') + std::string(60000, ']');
  for (const char* path : {"/api/generate", "/api/chat", "/api/show", "/api/create", "/api/copy",
                           "/v1/chat/completions", "/v1/completions"}) {
    auto r = post_raw(path, R"({"model": "tiny", "x": )" + deep + "}", "application/json");
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 400) << path << ": " << r->body;
    EXPECT_NE(r->body.find("nested deeper"), std::string::npos) << r->body;
  }
  // Nested options within the limit are carried and dumped without trouble.
  std::string nested = std::string(100, '[') + std::string(100, ']');
  auto ok = post_raw("/api/generate",
                     R"({"model": "tiny", "prompt": "hi", "stream": false, "options": {"num_predict": 2, "custom": )" +
                         nested + "}}",
                     "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  // The server is still there.
  EXPECT_EQ(server_->client().Get("/api/version")->status, 200);
}

TEST_F(Hardening, EveryBodyFramingIsLimited) {
  // Chunked, on a route and on no route at all.
  EXPECT_EQ(send_chunked(server_->port(), "/api/generate", size_t(40) << 20), 413);
  EXPECT_EQ(send_chunked(server_->port(), "/api/nothing-here", size_t(40) << 20), 413);
  // A small chunked body is read normally.
  {
    int fd = connect_to(server_->port());
    std::string body = R"({"model": "missing"})";
    char head[32];
    std::snprintf(head, sizeof head, "%zx\r\n", body.size());
    send_all(fd, chunked_request("/api/show") + head + body + "\r\n0\r\n\r\n");
    EXPECT_EQ(status_of(read_reply(fd, 10000)), 404);
    ::close(fd);
  }
  // A declared length over the limit is refused without reading the body.
  {
    int fd = connect_to(server_->port());
    send_all(fd, "POST /api/chat HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000000\r\n\r\n{");
    EXPECT_EQ(status_of(read_reply(fd, 10000)), 413);
    ::close(fd);
  }
  // No length, no chunking: the body runs to the end of the connection; the server stops reading long before
  // 400 MiB (it drops what is over the limit, then closes).
  {
    int fd = connect_to(server_->port());
    send_all(fd, "POST /api/generate HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    const std::string piece(1 << 20, 'a');
    int sent = 0;
    while (sent < 400 && send_all(fd, piece)) sent++;
    EXPECT_LT(sent, 400) << "the server read an unsized body of 400 MiB";
    ::close(fd);
  }
}

TEST_F(Hardening, JsonBodiesAreAcceptedWhateverTheContentType) {
  // curl -d sends application/x-www-form-urlencoded; bodies above 8 KB used to get a misleading 413.
  json body = {{"model", "tiny"}, {"prompt", "hi"}, {"padding", std::string(20000, 'x')}, {"stream", false},
               {"options", {{"num_predict", 1}}}};
  for (const char* type : {"application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain"}) {
    auto r = post_raw("/api/generate", body.dump(), type);
    ASSERT_TRUE(r) << type;
    EXPECT_EQ(r->status, 200) << type << ": " << r->body.substr(0, 300);
  }
}

TEST_F(Hardening, IdleConnectionsDoNotStarveTheServer) {
  // 120 clients that send half a request and wait: each holds a connection for the read timeout.
  std::vector<int> idle;
  for (int i = 0; i < 120; i++) {
    int fd = connect_to(server_->port());
    ASSERT_GE(fd, 0);
    send_all(fd, i % 2 ? "POST /api/generate HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n{"
                       : "GET /api/ver");
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto t0 = Clock::now();
  for (int i = 0; i < 5; i++) {
    auto c = server_->client(5);
    c.set_connection_timeout(2, 0);
    auto r = c.Get("/api/version");
    ASSERT_TRUE(r) << "no answer with 120 idle connections open";
    EXPECT_EQ(r->status, 200);
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  for (int fd : idle) ::close(fd);
}

TEST_F(Hardening, BurstOfStreamsWithCancellationsIsAnsweredNeverReset) {
  constexpr int kClients = 96;
  std::atomic<int> ok{0}, busy{0}, cancelled{0}, failed{0};
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; i++) {
    threads.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", server_->port());
      c.set_connection_timeout(10, 0);
      c.set_read_timeout(120, 0);
      json body = {{"model", "tiny"}, {"prompt", "burst " + std::to_string(i)}, {"options", {{"num_predict", 6}}}};
      const bool cancel = i % 4 == 0;
      std::string got;
      httplib::Request req;
      req.method = "POST";
      req.path = "/api/generate";
      req.body = body.dump();
      req.set_header("Content-Type", "application/json");
      int status = 0;
      req.response_handler = [&](const httplib::Response& r) {
        status = r.status;
        return true;
      };
      req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
        got.append(d, n);
        return !cancel;
      };
      httplib::Response res;
      httplib::Error err = httplib::Error::Success;
      c.send(req, res, err);
      if (cancel && err == httplib::Error::Canceled) {
        cancelled++;
      } else if (err != httplib::Error::Success) {
        failed++;
        errors[i] = httplib::to_string(err);
      } else if (status == 200) {
        ok++;
      } else if (status == 503) {
        busy++;
      } else {
        failed++;
        errors[i] = "status " + std::to_string(status) + ": " + got;
      }
    });
  }
  for (auto& t : threads) t.join();
  std::string why;
  for (const auto& e : errors)
    if (!e.empty()) why += e + "\n";
  EXPECT_EQ(failed.load(), 0) << why;
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(ok + busy + cancelled + failed, kClients);
  // And the server still works.
  auto r = post("/api/generate", {{"model", "tiny"}, {"prompt", "after"}, {"stream", false}, {"options", {{"num_predict", 2}}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST_F(Hardening, HostAndOriginChecks) {
  auto get = [&](httplib::Headers h) {
    auto c = server_->client(10);
    return c.Get("/api/version", h);
  };
  EXPECT_EQ(get({{"Host", "evil.example.com"}})->status, 403);
  EXPECT_EQ(get({{"Host", "8.8.8.8:11435"}})->status, 403);
  for (const char* h : {"localhost", "localhost:11435", "127.0.0.1:1", "[::1]:11435", "foo.localhost", "box.local",
                        "10.1.2.3", "192.168.1.4:80"})
    EXPECT_EQ(get({{"Host", h}})->status, 200) << h;
  auto bad = get({{"Origin", "https://evil.example.com"}});
  EXPECT_EQ(bad->status, 403);
  EXPECT_EQ(bad->get_header_value("Access-Control-Allow-Origin"), "");
  for (const char* o : {"http://localhost", "http://localhost:3000", "https://127.0.0.1:8443", "app://obsidian.md",
                        "vscode-webview://abc", "file://"}) {
    auto r = get({{"Origin", o}});
    EXPECT_EQ(r->status, 200) << o;
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), o);
  }
  // Preflight.
  auto c = server_->client(10);
  auto pre = c.Options("/api/chat", {{"Origin", "http://localhost:5173"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "http://localhost:5173");
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Headers").find("Content-Type"), std::string::npos);
  EXPECT_EQ(c.Options("/api/chat", {{"Origin", "https://evil.example.com"}})->status, 403);
}

TEST(HardeningPolicy, OriginsFromTheEnvironmentAndNonLoopbackBinds) {
  {
    ServerProcess s(Env{{"VATIC_ORIGINS", "https://chat.example.com, https://*.corp.example"}});
    auto c = s.client(10);
    EXPECT_EQ(c.Get("/api/version", {{"Origin", "https://chat.example.com"}})->status, 200);
    EXPECT_EQ(c.Get("/api/version", {{"Origin", "https://ui.corp.example"}})->status, 200);
    EXPECT_EQ(c.Get("/api/version", {{"Origin", "https://other.example.com"}})->status, 403);
    EXPECT_EQ(c.Get("/api/version", {{"Origin", "http://localhost:8080"}})->status, 200);
  }
  // The Host rule only applies to loopback binds (a server bound elsewhere is reached by other names).
  server::AccessPolicy loop("127.0.0.1", "");
  server::AccessPolicy any("0.0.0.0", "");
  EXPECT_FALSE(loop.host_allowed("example.com"));
  EXPECT_TRUE(any.host_allowed("example.com"));
  EXPECT_TRUE(server::AccessPolicy("::1", "").host_allowed("localhost:1"));
  EXPECT_FALSE(server::AccessPolicy("::1", "").host_allowed("example.com"));
  EXPECT_TRUE(server::AccessPolicy("127.0.0.1", "*").origin_allowed("https://anything.example"));
}

TEST(HardeningPort, SecondServerOnABusyPortFails) {
  ServerProcess first;
  // Start a second server on the same port; it must exit at once saying the address is in use.
  char tmpl[] = "/tmp/vatic-port-test-XXXXXX";
  fs::path dir = ::mkdtemp(tmpl);
  fs::path log = dir / "second.log";
  std::string cmd = "VATIC_HOST=127.0.0.1:" + std::to_string(first.port()) + " VATIC_MODELS=" + (dir / "m").string() +
                    " timeout 20 " + VATIC_BINARY + " serve 2>" + log.string();
  int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 1);
  EXPECT_NE(read_text(log).find("address already in use"), std::string::npos) << read_text(log);
  // The first one still answers.
  EXPECT_EQ(first.client().Get("/api/version")->status, 200);
  fs::remove_all(dir);
}

TEST_F(Hardening, OutOfRangeOptionsAndDurationsAre400) {
  auto gen = [&](json options, json extra = json::object()) {
    json body = {{"model", "tiny"}, {"prompt", "hi"}, {"stream", false}, {"options", options}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return post("/api/generate", body);
  };
  for (json o : {json{{"num_predict", 4294967299ULL}}, json{{"top_k", 4294967297ULL}}, json{{"top_k", -1}},
                 json{{"num_predict", 2.5}}, json{{"top_p", 2}}, json{{"temperature", -1}},
                 json{{"num_ctx", 1e12}}, json{{"seed", 1e300}}, json{{"repeat_last_n", 3000000000LL}},
                 json{{"draft_num_predict", 100}}, json{{"num_thread", "4"}}}) {
    auto r = gen(o);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << o.dump() << ": " << r->body;
  }
  for (const char* ka : {"nan", "inf", "-inf", "NaN", "1e999", "0x10"}) {
    auto r = gen(json{{"num_predict", 1}}, json{{"keep_alive", ka}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << ka << ": " << r->body;
  }
  auto ok = gen(json{{"num_predict", 3}, {"top_k", 40}, {"seed", -1}}, json{{"keep_alive", "1e20"}});
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  // Three tokens, or fewer when the sampling (a random seed) drew a stop token first.
  const json done = json::parse(ok->body);
  const int64_t evals = done.value("eval_count", int64_t(-1));
  EXPECT_TRUE(evals == 3 || (evals >= 0 && evals < 3 && done.value("done_reason", "") == "stop")) << ok->body;
  // OpenAI's max_tokens goes through the same checks.
  auto oa = post("/v1/chat/completions", {{"model", "tiny"},
                                          {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                          {"max_tokens", 4294967299ULL}});
  ASSERT_TRUE(oa);
  EXPECT_EQ(oa->status, 400) << oa->body;
}

TEST_F(Hardening, WrongTypesAndMethods) {
  std::vector<std::pair<std::string, json>> cases = {
      {"/api/generate", {{"model", "tiny"}, {"prompt", "hi"}, {"system", 1}}},
      {"/api/generate", {{"model", "tiny"}, {"prompt", "hi"}, {"images", "x"}}},
      {"/api/chat", {{"model", "tiny"}, {"messages", 1}}},
      {"/api/chat", {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "x"}, {"images", "x"}}}}}},
      {"/api/create", {{"model", "x1"}, {"from", "tiny"}, {"messages", 1}}},
      {"/api/create", {{"model", "x1"}, {"from", "tiny"}, {"system", 1}}},
      {"/api/create", {{"model", "x1"}, {"from", 5}}},
      {"/api/create", {{"model", "x1"}, {"from", "tiny"}, {"license", {1}}}},
  };
  for (const auto& [path, body] : cases) {
    auto r = post(path, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << path << " " << body.dump() << ": " << r->body;
  }
  auto c = server_->client();
  for (const char* path : {"/api/generate", "/api/chat", "/api/create", "/v1/chat/completions"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 405) << path;
    EXPECT_NE(r->get_header_value("Allow").find("POST"), std::string::npos);
  }
  EXPECT_EQ(c.Post("/api/tags", "{}", "application/json")->status, 405);
  EXPECT_EQ(c.Post("/api/version", "{}", "application/json")->status, 405);
  EXPECT_EQ(c.Get("/api/delete")->status, 405);
  EXPECT_EQ(c.Get("/api/no-such-thing")->status, 404);
}

TEST_F(Hardening, CreatesThatShouldBeRefusedAreNotStored) {
  auto create = [&](json body) {
    body["stream"] = false;
    return post("/api/create", body);
  };
  auto exists = [&](const std::string& name) { return post("/api/show", {{"model", name}})->status == 200; };
  std::vector<std::pair<std::string, json>> bad = {
      {"r1", {{"from", "plain"}, {"renderer", "no-such-renderer"}}},
      {"r2", {{"from", "plain"}, {"parser", "no-such-parser"}}},
      {"r3", {{"from", "plain"}, {"renderer", "gemma4\nSYSTEM injected"}}},
      {"r4", {{"from", "plain"}, {"parameters", {{"temperature\nSYSTEM injected", 1}}}}},
      {"r5", {{"from", "plain"}, {"messages", {{{"role", "user\nSYSTEM x"}, {"content", "hi"}}}}}},
      {"r6", {{"modelfile", "FROM plain\nRENDERER nosuch\n"}}},
  };
  for (auto& [name, body] : bad) {
    body["model"] = name;
    auto r = create(body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << name << ": " << r->body;
    EXPECT_FALSE(exists(name)) << name;
  }
  // A stop string with a newline stays a stop string: nothing leaks into other Modelfile commands.
  auto r = create({{"model", "stopnl"}, {"from", "plain"}, {"parameters", {{"stop", "a\nSYSTEM injected"}}}});
  ASSERT_EQ(r->status, 200) << r->body;
  json show = json::parse(post("/api/show", {{"model", "stopnl"}})->body);
  EXPECT_EQ(show["system"], "");
  Modelfile back = parse_modelfile(show["modelfile"].get<std::string>(), "/");
  EXPECT_EQ(back.system, "") << show["modelfile"];
  EXPECT_EQ(back.params["stop"], json::array({"a\nSYSTEM injected"})) << show["modelfile"];
  server_->client().Delete("/api/delete", json{{"model", "stopnl"}}.dump(), "application/json");
}

// Uploads a file as a blob; returns its digest.
std::string upload(ServerProcess& s, const std::string& bytes) {
  std::string digest = "sha256:" + sha256_hex(bytes);
  auto c = s.client();
  auto r = c.Post("/api/blobs/" + digest, bytes, "application/octet-stream");
  EXPECT_TRUE(r);
  EXPECT_TRUE(r->status == 201 || r->status == 200) << r->status << " " << r->body;
  return digest;
}

TEST_F(Hardening, BlobUploadsAndCreateFromFiles) {
  auto c = server_->client();
  const fs::path dir = fixture_model("gemma4-dense-tiny");
  std::string config = read_text(dir / "config.json") + "\n";  // not a blob the store already has
  std::string digest = "sha256:" + sha256_hex(config);
  // Unknown blob, bad digest, mismatch.
  EXPECT_EQ(c.Head(("/api/blobs/" + digest).c_str())->status, 404);
  EXPECT_EQ(c.Post("/api/blobs/sha256:1234", config, "application/octet-stream")->status, 400);
  auto mismatch = c.Post(("/api/blobs/sha256:" + std::string(64, 'a')).c_str(), config, "application/octet-stream");
  ASSERT_TRUE(mismatch);
  EXPECT_EQ(mismatch->status, 400);
  EXPECT_NE(mismatch->body.find("mismatch"), std::string::npos);
  EXPECT_EQ(c.Head(("/api/blobs/sha256:" + std::string(64, 'a')).c_str())->status, 404);
  EXPECT_EQ(c.Get(("/api/blobs/" + digest).c_str())->status, 405);
  // Upload and find it.
  upload(*server_, config);
  EXPECT_EQ(c.Head(("/api/blobs/" + digest).c_str())->status, 200);
  // Chunked uploads go through the same path (and are not bound by the 32 MiB JSON limit).
  std::string weights = read_text(dir / "model.safetensors");
  std::string wdigest = "sha256:" + sha256_hex(weights);
  {
    int fd = connect_to(server_->port());
    std::string req = "POST /api/blobs/" + wdigest +
                      " HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    char head[32];
    std::snprintf(head, sizeof head, "%zx\r\n", weights.size());
    send_all(fd, req + head + weights + "\r\n0\r\n\r\n");
    EXPECT_EQ(status_of(read_reply(fd, 10000)), 201);
    ::close(fd);
  }
  std::string tok = upload(*server_, read_text(dir / "tokenizer.json"));
  json files = {{"config.json", digest}, {"model.safetensors", wdigest}, {"tokenizer.json", tok}};
  auto cr = post("/api/create", {{"model", "uploaded"}, {"files", files}, {"stream", false}});
  ASSERT_TRUE(cr);
  ASSERT_EQ(cr->status, 200) << cr->body;
  auto gen = post("/api/generate", {{"model", "uploaded"}, {"prompt", "hi"}, {"stream", false}, {"options", {{"num_predict", 2}}}});
  ASSERT_EQ(gen->status, 200) << gen->body;
  // With a Modelfile, as ollama's CLI sends it.
  auto mf = post("/api/create", {{"model", "uploaded2"}, {"modelfile", "FROM .\nSYSTEM short\n"}, {"files", files},
                                 {"stream", false}});
  ASSERT_EQ(mf->status, 200) << mf->body;
  EXPECT_EQ(json::parse(post("/api/show", {{"model", "uploaded2"}})->body)["system"], "short");

  // Bad names and missing blobs.
  for (json f : {json{{"../config.json", digest}}, json{{"a/b", digest}}, json{{"config.json", 1}},
                 json{{"config.json", "sha256:" + std::string(64, 'b')}}, json::array()}) {
    auto r = post("/api/create", {{"model", "bad-files"}, {"files", f}, {"stream", false}});
    EXPECT_EQ(r->status, 400) << f.dump() << ": " << r->body;
  }
  // A tokenizer.json that is not JSON is refused, its content not quoted, and nothing is stored.
  std::string secret = "{ SECRET-TOKENIZER-CONTENT";
  json broken = files;
  broken["tokenizer.json"] = upload(*server_, secret);
  auto br = post("/api/create", {{"model", "broken-tok"}, {"files", broken}, {"stream", false}});
  EXPECT_EQ(br->status, 400) << br->body;
  EXPECT_EQ(br->body.find("SECRET"), std::string::npos) << br->body;
  EXPECT_EQ(post("/api/show", {{"model", "broken-tok"}})->status, 404);
  json broken_cfg = files;
  broken_cfg["config.json"] = upload(*server_, "{\"a\": SECRET-CONFIG");
  auto bc = post("/api/create", {{"model", "broken-cfg"}, {"files", broken_cfg}, {"stream", false}});
  EXPECT_EQ(bc->status, 400) << bc->body;
  EXPECT_EQ(bc->body.find("SECRET"), std::string::npos) << bc->body;
  for (const char* n : {"uploaded", "uploaded2"})
    c.Delete("/api/delete", json{{"model", n}}.dump(), "application/json");
}

TEST_F(Hardening, ServerPathsAreRefusedUnlessTheOperatorAllowsThem) {
  // This server allows no folder: the answer is the same whether a path exists or not, and reveals nothing.
  std::vector<std::string> answers;
  for (const std::string& from : std::vector<std::string>{fixture_model("gemma4-dense-tiny").string(), std::string("/etc"),
                                 std::string("/no/such/dir"), std::string("./x"), std::string("~/y")}) {
    auto r = post("/api/create", {{"model", "p1"}, {"from", from}, {"stream", false}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403) << from << ": " << r->body;
    EXPECT_NE(r->body.find("/api/blobs"), std::string::npos);
  }
  for (const std::string& mf : std::vector<std::string>{"FROM /etc/passwd\n", "FROM " + fixture_model("gemma4-dense-tiny").string() + "\n",
                               "FROM ./models\n", "FROM plain\nDRAFT /etc\n"}) {
    auto r = post("/api/create", {{"model", "p2"}, {"modelfile", mf}, {"stream", false}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403) << mf << ": " << r->body;
  }
  // A name that happens to be a folder relative to the server's directory is just a (missing) model name.
  auto r = post("/api/create", {{"model", "p3"}, {"from", "tmp"}, {"stream", false}});
  EXPECT_EQ(r->status, 404) << r->body;

  // An operator-allowed folder works; a path outside it (even through ..) does not.
  ServerProcess allowed(Env{{"VATIC_CREATE_PATHS", (fs::path(VATIC_FIXTURES_DIR) / "models").string()}});
  auto c = allowed.client();
  auto ok = c.Post("/api/create",
                   json{{"model", "fromdir"}, {"from", fixture_model("gemma4-dense-tiny").string()}, {"stream", false}}.dump(),
                   "application/json");
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto out = c.Post("/api/create",
                    json{{"model", "escape"}, {"from", fixture_model("gemma4-dense-tiny").string() + "/../../configs"},
                         {"stream", false}}.dump(),
                    "application/json");
  EXPECT_EQ(out->status, 403) << out->body;
  c.Delete("/api/delete", json{{"model", "fromdir"}}.dump(), "application/json");
}

TEST_F(Hardening, CompletionsServeRawModelsWithLogprobs) {
  auto cr = post("/api/create", {{"model", "rawplain"}, {"from", "plain"}, {"renderer", "raw"}, {"stream", false}});
  ASSERT_EQ(cr->status, 200) << cr->body;
  auto r = post("/v1/completions", {{"model", "rawplain"}, {"prompt", "Once upon"}, {"max_tokens", 3}, {"logprobs", 2},
                                    {"temperature", 0}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  const json& lp = j["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << r->body;
  EXPECT_EQ(lp["tokens"].size(), 3u);
  EXPECT_EQ(lp["token_logprobs"].size(), 3u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  ASSERT_EQ(lp["top_logprobs"].size(), 3u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  std::string joined;
  for (const auto& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, j["choices"][0]["text"]);
  // Streaming carries them per chunk.
  auto s = post("/v1/completions", {{"model", "rawplain"}, {"prompt", "Once upon"}, {"max_tokens", 2}, {"logprobs", 1},
                                    {"stream", true}});
  ASSERT_EQ(s->status, 200);
  EXPECT_NE(s->body.find("\"token_logprobs\""), std::string::npos) << s->body;
  server_->client().Delete("/api/delete", json{{"model", "rawplain"}}.dump(), "application/json");
}

TEST(HardeningFaults, QueuedRequestsGoToAFreshRunnerAfterACrash) {
  ServerProcess s(Env{{"VATIC_KEEP_ALIVE", "5m"}});
  auto post = [&](const json& body) { return s.client(120).Post("/api/generate", body.dump(), "application/json"); };
  json small = {{"model", "tiny"}, {"prompt", "hello"}, {"stream", false}, {"options", {{"num_predict", 3}}}};
  ASSERT_EQ(post(small)->status, 200);
  // An old log line (a cancelled request) that a later crash must not quote.
  {
    auto c = s.client(60);
    httplib::Request req;
    req.method = "POST";
    req.path = "/api/generate";
    req.body = json{{"model", "tiny"}, {"prompt", "x"}, {"options", {{"num_predict", 100000}, {"ignore_eos", true}}}}.dump();
    req.content_receiver = [](const char*, size_t, uint64_t, uint64_t) { return false; };
    httplib::Response res;
    httplib::Error err;
    c.send(req, res, err);
  }
  int pid = 0;
  std::string ps = s.client().Get("/api/ps")->body;
  const json ps_json = json::parse(ps);
  for (const auto& m : ps_json["models"]) pid = m["runner"]["pid"];
  ASSERT_GT(pid, 0) << ps << s.log();
  // A long stream holds the runner; two requests queue behind it.
  std::promise<void> first_chunk;
  std::atomic<bool> signalled{false};
  std::string long_body;
  std::thread streamer([&] {
    auto c = s.client(120);
    httplib::Request req;
    req.method = "POST";
    req.path = "/api/generate";
    req.body = json{{"model", "tiny"}, {"prompt", "long"}, {"options", {{"num_predict", 100000}, {"ignore_eos", true}}}}.dump();
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
      long_body.append(d, n);
      if (!signalled.exchange(true)) first_chunk.set_value();
      return true;
    };
    httplib::Response res;
    httplib::Error err;
    c.send(req, res, err);
    if (!signalled.exchange(true)) first_chunk.set_value();
  });
  ASSERT_EQ(first_chunk.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  std::vector<std::future<httplib::Result>> queued;
  for (int i = 0; i < 2; i++) queued.push_back(std::async(std::launch::async, [&] { return post(small); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  streamer.join();
  auto lines = ndjson(long_body);
  ASSERT_FALSE(lines.empty());
  ASSERT_TRUE(lines.back().contains("error")) << lines.back().dump();
  std::string e = lines.back()["error"];
  EXPECT_NE(e.find("signal 9"), std::string::npos) << e;
  EXPECT_EQ(e.find("cancelled"), std::string::npos) << "quotes an old log line: " << e;
  EXPECT_EQ(e.find("loaded"), std::string::npos) << "quotes an old log line: " << e;
  for (auto& f : queued) {
    auto r = f.get();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  int pid2 = 0;
  const json ps2 = json::parse(s.client().Get("/api/ps")->body);
  for (const auto& m : ps2["models"]) pid2 = m["runner"]["pid"];
  EXPECT_GT(pid2, 0);
  EXPECT_NE(pid2, pid);
}

TEST(HardeningFaults, ADeviceFailureEndsTheRequestAndAFreshRunnerServesTheNext) {
  // Every runner's device fails after this many operations: far more than loading the tiny model and a short
  // request take, far fewer than an endless generation.
  ServerProcess s(Env{{"VATIC_KEEP_ALIVE", "5m"}, {"VATIC_FAIL_DEVICE_AFTER", "20000"}});
  auto post = [&](const json& body) { return s.client(120).Post("/api/generate", body.dump(), "application/json"); };
  auto runner_pid = [&] {
    int pid = 0;
    const json ps = json::parse(s.client().Get("/api/ps")->body);
    for (const auto& m : ps["models"]) pid = m["runner"]["pid"];
    return pid;
  };
  json small = {{"model", "tiny"}, {"prompt", "hello"}, {"stream", false}, {"options", {{"num_predict", 3}}}};
  ASSERT_EQ(post(small)->status, 200) << s.log();
  const int pid = runner_pid();
  ASSERT_GT(pid, 0);
  // Streamed: the failure arrives as the last line, naming the device failure. Greedy, so that the text (and
  // how many lines it takes: bytes of an incomplete UTF-8 character wait for the rest) is the same every run.
  auto r = post(json{{"model", "tiny"},
                     {"prompt", "long"},
                     {"options", {{"num_predict", 100000}, {"ignore_eos", true}, {"temperature", 0}}}});
  ASSERT_TRUE(r);
  auto lines = ndjson(r->body);
  // Tokens were streamed before the failure: it happened in the middle of generation.
  ASSERT_GT(lines.size(), 3u) << r->body;
  for (size_t i = 0; i + 1 < lines.size(); i++) ASSERT_FALSE(lines[i].contains("error")) << r->body;
  ASSERT_TRUE(lines.back().contains("error")) << lines.back().dump();
  const std::string e = lines.back()["error"];
  EXPECT_NE(e.find("the device failed"), std::string::npos) << e;
  EXPECT_NE(e.find("VATIC_FAIL_DEVICE_AFTER"), std::string::npos) << e;
  // The runner exits; the next request is served by a fresh one.
  for (int i = 0; i < 100 && ::kill(pid, 0) == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto next = post(small);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200) << next->body << s.log();
  EXPECT_GT(json::parse(next->body)["eval_count"].get<int>(), 0) << next->body;
  const int pid2 = runner_pid();
  EXPECT_GT(pid2, 0);
  EXPECT_NE(pid2, pid);
  EXPECT_NE(s.log().find("device failure"), std::string::npos) << s.log();
}

TEST(HardeningFaults, RemovedModelsDoNotKeepServingAndOrphanBlobsGo) {
  // Own store: a copy of one fixture model.
  char tmpl[] = "/tmp/vatic-rm-test-XXXXXX";
  fs::path dir = ::mkdtemp(tmpl);
  fs::path store_dir = dir / "models";
  {
    ModelStore store(store_dir);
    Modelfile m;
    m.from.text = "gemma4-dense-tiny";
    m.from.path = fixture_model("gemma4-dense-tiny");
    store.create("victim", m);
  }
  // An orphan blob, as a create killed before its manifest leaves behind.
  fs::path orphan = store_dir / "blobs" / ("sha256-" + std::string(64, 'c'));
  std::ofstream(orphan) << "orphan";
  ServerProcess s(Env{{"VATIC_KEEP_ALIVE", "-1"}}, store_dir);
  EXPECT_FALSE(fs::exists(orphan)) << "orphan blob kept at server start";
  auto c = s.client(60);
  json req = {{"model", "victim"}, {"prompt", "hi"}, {"stream", false}, {"options", {{"num_predict", 2}}}};
  ASSERT_EQ(c.Post("/api/generate", req.dump(), "application/json")->status, 200);
  ASSERT_EQ(json::parse(c.Get("/api/ps")->body)["models"].size(), 1u);
  // `vatic rm` from the command line, with the server running.
  std::string cmd = "VATIC_HOST=127.0.0.1:" + std::to_string(s.port()) + " VATIC_MODELS=" + store_dir.string() + " " +
                    VATIC_BINARY + " rm victim >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(json::parse(c.Get("/api/ps")->body)["models"].size(), 0u) << "the runner still serves a deleted model";
  EXPECT_EQ(c.Post("/api/generate", req.dump(), "application/json")->status, 404);
  // Replaced behind the server's back (removed and created again with other content): the loaded runner is for
  // the old version and must not serve the new one.
  auto make = [&](const std::string& system) {
    ModelStore store(store_dir);
    if (store.exists("victim")) store.remove("victim");
    Modelfile m;
    m.from.text = "gemma4-dense-tiny";
    m.from.path = fixture_model("gemma4-dense-tiny");
    m.system = system;
    store.create("victim", m);
  };
  auto runner_pid = [&] {
    int pid = 0;
    const json ps = json::parse(c.Get("/api/ps")->body);
    for (const auto& m : ps["models"]) pid = m["runner"]["pid"];
    return pid;
  };
  make("one");
  ASSERT_EQ(c.Post("/api/generate", req.dump(), "application/json")->status, 200);
  int before = runner_pid();
  make("two");
  ASSERT_EQ(c.Post("/api/generate", req.dump(), "application/json")->status, 200);
  EXPECT_NE(runner_pid(), before) << "a runner of the deleted version served the new one";
  s.stop();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace vatic::test
