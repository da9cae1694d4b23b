// vatic run / ps / stop against a fake ollama-API server: what the binary sends, prints and exits with.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <filesystem>
#include <fstream>

#include "cli/client_api.h"
#include "cli/client_format.h"
#include "cli/client_session.h"
#include "util/error.h"
#include "cli_test_util.h"

namespace vatic::test {
namespace {

namespace fs = std::filesystem;

json chat_chunk(const std::string& content, const std::string& thinking = "") {
  json m = {{"role", "assistant"}, {"content", content}};
  if (!thinking.empty()) m["thinking"] = thinking;
  return {{"model", "m"}, {"created_at", "2026-08-21T10:00:00Z"}, {"message", m}, {"done", false}};
}

json chat_final(json extra = json::object()) {
  json f = {{"model", "m"},
            {"created_at", "2026-08-21T10:00:01Z"},
            {"message", {{"role", "assistant"}, {"content", ""}}},
            {"done", true},
            {"done_reason", "stop"}};
  f.update(extra);
  return f;
}

json show_chat() { return {{"renderer", "gemma4"}, {"parser", "gemma4"}, {"capabilities", {"completion"}}}; }

class ClientCommands : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = fs::temp_directory_path() / ("vatic-cli-test-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(home_);
    fs::create_directories(home_);
    server_.on_json("/api/show", show_chat());
    server_.on_stream("/api/generate", {{{{"model", "m"}, {"response", ""}, {"done", true}, {"done_reason", "load"}}}});
  }
  void TearDown() override { fs::remove_all(home_); }

  std::map<std::string, std::string> env() const {
    return {{"VATIC_HOST", server_.host()}, {"HOME", home_.string()}};
  }
  ProcessResult vatic(const std::vector<std::string>& args, const std::string& input = "") {
    return run_vatic(args, input, env());
  }

  FakeServer server_;
  fs::path home_;
};

TEST_F(ClientCommands, RunStreamsChatAnswer) {
  server_.on_stream("/api/chat", {{chat_chunk("Hel"), chat_chunk("lo,"), chat_chunk(" world"), chat_final()}});
  auto r = vatic({"run", "m", "say", "hello"});
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Hello, world\n");
  EXPECT_EQ(r.err, "");
  auto reqs = server_.requests("/api/chat");
  ASSERT_EQ(reqs.size(), 1u);
  const json& b = reqs[0].body;
  EXPECT_EQ(b["model"], "m");
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["messages"], json::parse(R"([{"role":"user","content":"say hello"}])"));
  EXPECT_FALSE(b.contains("think"));
  EXPECT_FALSE(b.contains("keep_alive"));
  EXPECT_EQ(server_.requests("/api/show").at(0).body["model"], "m");
}

TEST_F(ClientCommands, RunReadsPromptFromStdinBeforeArguments) {
  server_.on_stream("/api/chat", {{chat_chunk("ok"), chat_final()}});
  auto r = vatic({"run", "m", "summarise", "this"}, "a long document");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "ok\n");
  auto reqs = server_.requests("/api/chat");
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].body["messages"][0]["content"], "a long document summarise this");
}

TEST_F(ClientCommands, RunUsesGenerateForModelsWithoutChatFormat) {
  server_.on_json("/api/show", {{"renderer", ""}, {"template", ""}, {"capabilities", {"completion"}}});
  server_.on_stream("/api/generate", {{{{"response", "It was"}, {"done", false}},
                                       {{"response", " a truth"}, {"done", false}},
                                       {{"response", ""}, {"done", true}, {"context", {1, 2, 3}}}}});
  auto r = vatic({"run", "m", "Once upon a time", "--keepalive", "10m", "--format", R"({"type":"object"})"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "It was a truth\n");
  EXPECT_TRUE(server_.requests("/api/chat").empty());
  auto reqs = server_.requests("/api/generate");
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].body["prompt"], "Once upon a time");
  EXPECT_EQ(reqs[0].body["keep_alive"], "10m");
  EXPECT_EQ(reqs[0].body["format"], json::parse(R"({"type":"object"})"));
}

TEST_F(ClientCommands, VerbosePrintsOllamaStatsAndSpeculativeStats) {
  json final = chat_final({{"total_duration", 2345678901LL},
                           {"load_duration", 12345678},
                           {"prompt_eval_count", 26},
                           {"prompt_eval_duration", 130000000},
                           {"prompt_reused", 512},
                           {"eval_count", 298},
                           {"eval_duration", 4709213000LL},
                           {"speculative",
                            {{"rounds", 100},
                             {"drafted", 300},
                             {"accepted", 198},
                             {"acceptance_length", 2.98},
                             {"position_acceptance", {0.9, 0.66, 0.42}}}}});
  server_.on_stream("/api/chat", {{chat_chunk("Hi."), final}});
  auto r = vatic({"run", "m", "hi", "--verbose"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Hi.\n");
  EXPECT_EQ(r.err,
            "total duration:       2.345678901s\n"
            "load duration:        12.345678ms\n"
            "prompt eval count:    26 token(s)\n"
            "prompt eval duration: 130ms\n"
            "prompt eval rate:     200.00 tokens/s\n"
            "prompt tokens reused: 512 token(s)\n"
            "eval count:           298 token(s)\n"
            "eval duration:        4.709213s\n"
            "eval rate:            63.28 tokens/s\n"
            "speculative rounds:   100\n"
            "acceptance length:    2.98\n"
            "draft tokens accepted: 198/300 (66.0%)\n"
            "position acceptance:  0.90, 0.66, 0.42\n");
}

TEST_F(ClientCommands, ThinkingIsShownThenTheAnswer) {
  server_.on_stream("/api/chat", {{chat_chunk("", "Let me"), chat_chunk("", " think."), chat_chunk("Forty"),
                                   chat_chunk("-two"), chat_final()}});
  auto r = vatic({"run", "m", "question", "--think"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // not a terminal: no colours
  EXPECT_EQ(r.out, "Thinking...\nLet me think.\n...done thinking.\n\nForty-two\n");
  EXPECT_EQ(server_.requests("/api/chat").at(0).body["think"], true);

  r = vatic({"run", "m", "question", "--hidethinking"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Forty-two\n");
  EXPECT_FALSE(server_.requests("/api/chat").at(1).body.contains("think"));
}

TEST_F(ClientCommands, ThinkFlagValues) {
  server_.on_stream("/api/chat", {{chat_chunk("ok"), chat_final()}});
  ASSERT_EQ(vatic({"run", "m", "q", "--nothink"}).exit_code, 0);
  ASSERT_EQ(vatic({"run", "m", "q", "--think=false"}).exit_code, 0);
  ASSERT_EQ(vatic({"run", "m", "q", "--think=high"}).exit_code, 0);
  auto reqs = server_.requests("/api/chat");
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].body["think"], false);
  EXPECT_EQ(reqs[1].body["think"], false);
  EXPECT_EQ(reqs[2].body["think"], "high");
  auto bad = vatic({"run", "m", "q", "--think=loud"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--think: 'loud'"), std::string::npos) << bad.err;
}

TEST_F(ClientCommands, ServerErrorIsPrintedAndExitsOne) {
  server_.on_json("/api/show", {{"error", "model 'nope' not found"}}, 404);
  auto r = vatic({"run", "nope", "hi"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "Error: model 'nope' not found\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(ClientCommands, ErrorLineInTheStreamExitsOne) {
  server_.on_stream("/api/chat", {{chat_chunk("partial"), {{"error", "runner crashed"}}}});
  auto r = vatic({"run", "m", "hi"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "partial\n");
  EXPECT_EQ(r.err, "Error: runner crashed\n");
}

TEST_F(ClientCommands, ServerNotRunningSaysHowToStartIt) {
  // a port that was free a moment ago: bound without listening, then closed
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  for (auto args : std::vector<std::vector<std::string>>{{"ps"}, {"run", "m", "hi"}, {"stop", "m"}}) {
    auto r = run_vatic(args, "", {{"VATIC_HOST", "http://127.0.0.1:" + std::to_string(port)}});
    EXPECT_EQ(r.exit_code, 1) << args[0];
    EXPECT_EQ(r.err, "Error: could not connect to vatic server at 127.0.0.1:" + std::to_string(port) +
                         " \u2014 start it with 'vatic serve' (or set VATIC_HOST)\n")
        << args[0];
  }
}

TEST_F(ClientCommands, PsPrintsTheRunningModels) {
  auto in = [](int secs) {
    auto t = std::chrono::system_clock::now() + std::chrono::seconds(secs);
    std::time_t tt = std::chrono::system_clock::to_time_t(t);
    char buf[64];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S.123456789Z", std::gmtime(&tt));
    return std::string(buf);
  };
  server_.on_json("/api/ps",
                  {{"models",
                    {{{"name", "gemma4:latest"},
                      {"model", "gemma4:latest"},
                      {"size", 6200000000LL},
                      {"size_vram", 6200000000LL},
                      {"digest", "a2af6cc3eb7fa8be8504abaf9b04e88f17a119ec3f04a3addf55f92841195f5a"},
                      {"expires_at", in(4 * 60 + 30)}},
                     {{"name", "glm:q4"},
                      {"model", "glm:q4"},
                      {"size", 1500000},
                      {"size_vram", 0},
                      {"digest", "0123456789abcdef0123"},
                      {"expires_at", "2318-01-01T00:00:00Z"}}}}});
  auto r = vatic({"ps"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "NAME             ID              SIZE      PROCESSOR    UNTIL\n"
            "gemma4:latest    a2af6cc3eb7f    6.2 GB    100% GPU     4 minutes from now\n"
            "glm:q4           0123456789ab    1.5 MB    100% CPU     Forever\n");

  server_.on_json("/api/ps", {{"models", json::array()}});
  r = vatic({"ps"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "NAME    ID    SIZE    PROCESSOR    UNTIL\n");
}

TEST_F(ClientCommands, StopUnloadsWithKeepAliveZero) {
  server_.on_stream("/api/generate", {{{{"model", "m"}, {"response", ""}, {"done", true}, {"done_reason", "unload"}}}});
  auto r = vatic({"stop", "m"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  auto reqs = server_.requests("/api/generate");
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].body["model"], "m");
  EXPECT_EQ(reqs[0].body["prompt"], "");
  EXPECT_EQ(reqs[0].body["keep_alive"], 0);

  server_.on_json("/api/generate", {{"error", "model 'x' not found"}}, 404);
  r = vatic({"stop", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "Error: couldn't find model \"x\" to stop\n");
}

TEST_F(ClientCommands, InteractiveOnPipedInput) {
  server_.on_stream("/api/chat", {{chat_chunk("Answer."), chat_final()}});
  const std::string script =
      "/set parameter temperature 0.5\n"
      "/set parameter stop <end> STOP\n"
      "/set parameter top_k many\n"
      "/set parameter nonsense 1\n"
      "\"\"\"\n"
      "line one\n"
      "  line two\n"
      "\"\"\"\n"
      "second\n"
      "/clear\n"
      "/set system You are terse.\n"
      "/set nothink\n"
      "\"\"\"single line in quotes\"\"\"\n"
      "/bye\n"
      "never sent\n";
  auto r = vatic({"run", "m", "--interactive"}, script);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "Set parameter 'temperature' to '0.5'\n"
            "Set parameter 'stop' to '<end>, STOP'\n"
            "Couldn't set parameter: invalid int value [many]\n"
            "Couldn't set parameter: unknown parameter 'nonsense'\n"
            "Answer.\n\n"
            "Answer.\n\n"
            "Cleared session context\n"
            "Set system message.\n"
            "Set 'nothink' mode.\n"
            "Answer.\n\n");

  // the model was loaded first (empty prompt)
  auto loads = server_.requests("/api/generate");
  ASSERT_EQ(loads.size(), 1u);
  EXPECT_FALSE(loads[0].body.contains("prompt") && loads[0].body["prompt"] != "");

  auto reqs = server_.requests("/api/chat");
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].body["options"], json::parse(R"({"temperature":0.5,"stop":["<end>","STOP"]})"));
  EXPECT_EQ(reqs[0].body["messages"], json::parse(R"([{"role":"user","content":"line one\n  line two\n"}])"));
  EXPECT_EQ(reqs[1].body["messages"],
            json::parse(R"([{"role":"user","content":"line one\n  line two\n"},
                            {"role":"assistant","content":"Answer."},
                            {"role":"user","content":"second"}])"));
  EXPECT_EQ(reqs[2].body["messages"], json::parse(R"([{"role":"system","content":"You are terse."},
                                                      {"role":"user","content":"single line in quotes"}])"));
  EXPECT_EQ(reqs[2].body["think"], false);
}

TEST_F(ClientCommands, InteractiveShowAndVerbose) {
  server_.on_json("/api/show", {{"renderer", "gemma4"},
                                {"architecture", "gemma4"},
                                {"parameter_count", 4300000000LL},
                                {"context_length", 131072},
                                {"embedding_length", 2560},
                                {"quantization", "int4"},
                                {"capabilities", {"completion", "thinking"}},
                                {"parameters", {{"temperature", 1.0}, {"stop", {"<turn|>"}}}},
                                {"draft", {{"architecture", "gemma4_assistant"}, {"parameter_count", 78000000},
                                           {"quantization", "bfloat16"}}},
                                {"system", "Be kind."}});
  server_.on_stream("/api/chat", {{chat_chunk("Yes."), chat_final({{"eval_count", 3}, {"eval_duration", 1500000000}})}});
  auto r = vatic({"run", "m", "--interactive"}, "/show info\n/set verbose\nhi\n/set quiet\nhi\n/show system\n/show nope\n/nope\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "  Model\n"
            "    architecture        gemma4\n"
            "    parameters          4.3B\n"
            "    context length      131072\n"
            "    embedding length    2560\n"
            "    quantization        int4\n"
            "\n"
            "  Draft\n"
            "    architecture    gemma4_assistant\n"
            "    parameters      78M\n"
            "    quantization    bfloat16\n"
            "\n"
            "  Capabilities\n"
            "    completion\n"
            "    thinking\n"
            "\n"
            "  Parameters\n"
            "    stop           \"<turn|>\"\n"
            "    temperature    1.0\n"
            "\n"
            "  System\n"
            "    Be kind.\n"
            "\n"
            "Set 'verbose' mode.\n"
            "Yes.\n\n"
            "Set 'quiet' mode.\n"
            "Yes.\n\n"
            "Be kind.\n"
            "Unknown command '/show nope'. Type /? for help\n"
            "Unknown command '/nope'. Type /? for help\n");
  // stats for the first answer only
  EXPECT_EQ(r.err, "eval count:           3 token(s)\neval duration:        1.5s\neval rate:            2.00 tokens/s\n\n");
}

TEST_F(ClientCommands, CtrlCCancelsTheRequest) {
  std::vector<json> chunks;
  for (int i = 0; i < 200; ++i) chunks.push_back(chat_chunk("tok "));
  chunks.push_back(chat_final());
  server_.on_stream("/api/chat", {chunks, std::chrono::milliseconds(50)});
  bool sent = false;
  auto start = std::chrono::steady_clock::now();
  auto r = run_vatic({"run", "m", "go"}, "", env(), std::chrono::seconds(30), [&](pid_t pid, const std::string& out) {
    if (!sent && out.find("tok tok") != std::string::npos) {
      ::kill(pid, SIGINT);
      sent = true;
    }
  });
  EXPECT_TRUE(sent);
  EXPECT_EQ(r.exit_code, 130);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
  // the server sees the connection go away and stops streaming
  for (int i = 0; i < 100 && !server_.client_disconnected(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(server_.client_disconnected());
}

TEST_F(ClientCommands, InteractiveOnATerminal) {
  std::vector<json> slow;
  for (int i = 0; i < 300; ++i) slow.push_back(chat_chunk("word "));
  slow.push_back(chat_final());
  server_.on_stream("/api/chat", {{chat_chunk("", "hmm"), chat_chunk("Hello there."), chat_final()}});
  PtyProcess p({"run", "m"}, env());
  long at = p.wait_for(">>> ");
  ASSERT_GE(at, 0) << p.output();
  p.send("hi\r");
  at = p.wait_for("Hello there.", static_cast<size_t>(at));
  ASSERT_GE(at, 0) << p.output();
  // thinking is dimmed on a terminal
  EXPECT_NE(p.output().find("\033[90mThinking...\r\nhmm\r\n...done thinking.\r\n\r\n\033[0mHello there."),
            std::string::npos)
      << p.output();
  at = p.wait_for(">>> ", static_cast<size_t>(at));
  ASSERT_GE(at, 0) << p.output();

  // Ctrl-C during an answer cancels it and returns to the prompt
  server_.on_stream("/api/chat", {slow, std::chrono::milliseconds(30)});
  p.send("go on\r");
  at = p.wait_for("word word", static_cast<size_t>(at));
  ASSERT_GE(at, 0) << p.output();
  p.send("\x03");
  at = p.wait_for(">>> ", static_cast<size_t>(at));
  ASSERT_GE(at, 0) << p.output();
  for (int i = 0; i < 100 && !server_.client_disconnected(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(server_.client_disconnected());

  // Ctrl-C at the prompt does not exit
  p.send("\x03");
  at = p.wait_for("Use Ctrl + d or /bye to exit.", static_cast<size_t>(at));
  ASSERT_GE(at, 0) << p.output();

  p.send("/bye\r");
  EXPECT_EQ(p.wait_exit(), 0) << p.output();

  // the cancelled turn stays out of the history sent next time; the first turn is in it
  auto reqs = server_.requests("/api/chat");
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].body["messages"].size(), 3u);

  std::ifstream hist(home_ / ".vatic" / "history");
  std::string all((std::istreambuf_iterator<char>(hist)), std::istreambuf_iterator<char>());
  // libedit's history file escapes blanks as \040
  EXPECT_NE(all.find("go\\040on"), std::string::npos) << all;
  EXPECT_NE(all.find("\nhi\n"), std::string::npos) << all;
}

TEST_F(ClientCommands, HelpAndVersion) {
  auto r = vatic({"run", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--verbose", "--think", "--nothink", "--hidethinking", "--keepalive", "--format",
                           "--nowordwrap", "--interactive"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  r = vatic({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("vatic version ", 0), 0u) << r.out;
}

// Formatting helpers, directly.

TEST(ClientFormat, GoDurations) {
  using vatic::cli::go_duration;
  EXPECT_EQ(go_duration(0), "0s");
  EXPECT_EQ(go_duration(850), "850ns");
  EXPECT_EQ(go_duration(12500), "12.5\u00b5s");
  EXPECT_EQ(go_duration(123456789), "123.456789ms");
  EXPECT_EQ(go_duration(1500000000), "1.5s");
  EXPECT_EQ(go_duration(123250000000LL), "2m3.25s");
  EXPECT_EQ(go_duration(3600000000000LL), "1h0m0s");
  EXPECT_EQ(go_duration(-1500000000), "-1.5s");
}

TEST(ClientFormat, HumanBytesAndNumbers) {
  using namespace vatic::cli;
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(1500), "1.5 KB");
  EXPECT_EQ(human_bytes(2000000), "2 MB");
  EXPECT_EQ(human_bytes(12300000000LL), "12 GB");
  EXPECT_EQ(human_number(950), "950");
  EXPECT_EQ(human_number(14000000), "14M");
  EXPECT_EQ(human_number(1200000), "1.2M");
  EXPECT_EQ(human_number(8000000000LL), "8B");
}

TEST(ClientFormat, UntilText) {
  using namespace vatic::cli;
  auto now = *parse_rfc3339("2026-08-21T10:00:00Z");
  EXPECT_EQ(until_text("2026-08-21T12:04:59.5+02:00", now), "4 minutes from now");
  EXPECT_EQ(until_text("2026-08-21T10:00:30Z", now), "30 seconds from now");
  EXPECT_EQ(until_text("2026-08-21T09:59:59Z", now), "Stopping...");
  EXPECT_EQ(until_text("2318-01-01T00:00:00Z", now), "Forever");
  EXPECT_EQ(until_text("0001-01-01T00:00:00Z", now), "Never");
  EXPECT_FALSE(parse_rfc3339("yesterday"));
}

TEST(ClientFormat, VerboseReadsThePrefixCacheObject) {
  json f = {{"done", true}, {"prompt_eval_count", 4}, {"prompt_eval_duration", 2000000},
            {"prompt_cache", {{"evaluated", 4}, {"reused", 96}}}};
  EXPECT_EQ(vatic::cli::verbose_summary(f),
            "prompt eval count:    4 token(s)\n"
            "prompt eval duration: 2ms\n"
            "prompt eval rate:     2000.00 tokens/s\n"
            "prompt tokens reused: 96 token(s)\n");
  EXPECT_EQ(vatic::cli::verbose_summary({{"done", true}}), "");
}

TEST(ClientFormat, ShowInfoFromOllamaLayout) {
  // what `vatic serve` answers to /api/show (ollama's details / model_info, plus renderer and draft)
  json show = {{"parameters", "temperature                    1\nstop                           \"<eos>\"\n"},
               {"template", ""},
               {"system", ""},
               {"details", {{"family", "gemma4"}, {"parameter_size", "14.2M"}, {"quantization_level", "bfloat16"}}},
               {"model_info",
                {{"general.architecture", "gemma4"},
                 {"general.parameter_count", 14200000},
                 {"gemma4.context_length", 2048},
                 {"gemma4.embedding_length", 256}}},
               {"capabilities", {"completion"}},
               {"renderer", "gemma4"},
               {"draft", {{"architecture", "gemma4_assistant"}, {"parameter_count", 1200000},
                          {"quantization_level", "int8"}}}};
  EXPECT_EQ(vatic::cli::show_info(show),
            "  Model\n"
            "    architecture        gemma4\n"
            "    parameters          14.2M\n"
            "    context length      2048\n"
            "    embedding length    256\n"
            "    quantization        bfloat16\n"
            "\n"
            "  Draft\n"
            "    architecture    gemma4_assistant\n"
            "    parameters      1.2M\n"
            "    quantization    int8\n"
            "\n"
            "  Capabilities\n"
            "    completion\n"
            "\n"
            "  Parameters\n"
            "    temperature    1\n"
            "    stop           \"<eos>\"\n"
            "\n");
  EXPECT_TRUE(vatic::cli::has_chat_format(show));
  EXPECT_FALSE(vatic::cli::has_chat_format({{"renderer", ""}, {"template", ""}}));
  EXPECT_TRUE(vatic::cli::has_chat_format({{"renderer", ""}, {"template", "{{ .System }} {{ .Prompt }}"}}));
}

TEST(ClientAddress, ParsesVaticHost) {
  using vatic::cli::parse_server_address;
  EXPECT_EQ(parse_server_address("").display(), "127.0.0.1:11435");
  EXPECT_EQ(parse_server_address("10.0.0.2:8080").display(), "10.0.0.2:8080");
  EXPECT_EQ(parse_server_address("http://example.org:9000/").display(), "example.org:9000");
  EXPECT_EQ(parse_server_address("localhost").display(), "localhost:11435");
  EXPECT_EQ(parse_server_address(":7000").display(), "127.0.0.1:7000");
  EXPECT_EQ(parse_server_address("[::1]:7000").display(), "[::1]:7000");
  EXPECT_THROW(parse_server_address("https://x:1"), vatic::Error);
  EXPECT_THROW(parse_server_address("x:port"), vatic::Error);
}

}  // namespace
}  // namespace vatic::test
