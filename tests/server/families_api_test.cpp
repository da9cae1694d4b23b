// The Llama, Qwen3-MoE and Gemma 3 fixtures served by a live `vatic serve`: show reports their chat formats,
// chat requests render and answer, and speculative decoding with a draft model is exact under greedy
// sampling.
#include "server/harness.h"

namespace vatic::test {
namespace {

class FamiliesApi : public ::testing::Test {
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
  static ServerProcess* server_;
};
ServerProcess* FamiliesApi::server_ = nullptr;

TEST_F(FamiliesApi, ShowAndChat) {
  struct Case {
    const char* model;
    const char* arch;
    const char* renderer;
  };
  for (const Case& c :
       {Case{"llama", "LlamaForCausalLM", "llama3"}, Case{"qwen-moe", "Qwen3MoeForCausalLM", "qwen3"},
        Case{"gemma3", "Gemma3ForCausalLM", "gemma3"}}) {
    SCOPED_TRACE(c.model);
    auto show = post("/api/show", {{"model", c.model}});
    ASSERT_TRUE(show);
    ASSERT_EQ(show->status, 200) << show->body;
    json s = json::parse(show->body);
    EXPECT_EQ(s["renderer"], c.renderer) << s;
    EXPECT_EQ(s["model_info"]["general.architecture"], c.arch) << s;
    json req = {{"model", c.model},
                {"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                          {{"role", "user"}, {"content", "Hello"}}})},
                {"stream", false},
                {"options", {{"num_predict", 6}, {"temperature", 0}, {"ignore_eos", true}}}};
    auto r = post("/api/chat", req);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    json a = json::parse(r->body);
    EXPECT_EQ(a["message"]["role"], "assistant");
    EXPECT_GT(a["prompt_eval_count"].get<int64_t>(), 5) << a;
  }
  // Gemma 3 has no tool format: a request with tools is refused with a clear message.
  json tools = json::array(
      {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}});
  auto bad = post("/api/chat", {{"model", "gemma3"},
                                {"messages", json::array({{{"role", "user"}, {"content", "x"}}})},
                                {"tools", tools},
                                {"stream", false}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_NE(bad->body.find("tool"), std::string::npos) << bad->body;
}

TEST_F(FamiliesApi, DraftModelSpeculationIsExact) {
  for (const char* model : {"llama", "qwen-moe"}) {
    SCOPED_TRACE(model);
    json req = {{"model", model},
                {"prompt", "Once upon a time"},
                {"raw", true},
                {"stream", false},
                {"options", {{"num_predict", 24}, {"ignore_eos", true}, {"temperature", 0}}}};
    auto r = post("/api/generate", req);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    json j = json::parse(r->body);
    EXPECT_EQ(j["eval_count"], 24);
    ASSERT_TRUE(j.contains("speculative")) << j;
    EXPECT_GT(j["speculative"]["rounds"].get<int64_t>(), 0) << j;
    // The same request without the drafter: the same text.
    req["options"]["draft_num_predict"] = 0;
    auto plain = post("/api/generate", req);
    ASSERT_TRUE(plain);
    EXPECT_EQ(json::parse(plain->body)["response"], j["response"]);
  }
}

}  // namespace
}  // namespace vatic::test
