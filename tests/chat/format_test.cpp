#include <fstream>

#include <gtest/gtest.h>

#include "chat/format.h"
#include "chat/renderer.h"
#include "chat/types.h"
#include "util/error.h"

namespace vatic::chat {
namespace {

json fixture_config(const std::string& model) {
  std::ifstream in(std::string(VATIC_FIXTURES_DIR) + "/models/" + model + "/config.json");
  if (!in) return json();
  return json::parse(in);
}

TEST(ChatFormat, DefaultsPerArchitecture) {
  // E2B/E4B have per-layer embeddings (nested text_config in the multimodal layout).
  json e2b = {{"text_config", {{"hidden_size_per_layer_input", 256}}}};
  EXPECT_EQ(default_chat_format("Gemma4ForConditionalGeneration", e2b), (ChatFormat{"gemma4-small", "gemma4"}));
  json big = {{"text_config", {{"hidden_size_per_layer_input", 0}, {"enable_moe_block", true}}}};
  EXPECT_EQ(default_chat_format("Gemma4ForConditionalGeneration", big), (ChatFormat{"gemma4-large", "gemma4"}));
  json flat = {{"hidden_size", 5376}};
  EXPECT_EQ(default_chat_format("Gemma4ForCausalLM", flat), (ChatFormat{"gemma4-large", "gemma4"}));
  EXPECT_EQ(default_chat_format("Glm4MoeLiteForCausalLM", json::object()), (ChatFormat{"glm-4.7", "glm-4.7"}));
}

TEST(ChatFormat, FixtureConfigs) {
  json e2b = fixture_config("gemma4-e2b-tiny");
  if (e2b.is_null()) GTEST_SKIP() << "fixtures not present";
  EXPECT_EQ(default_chat_format("Gemma4ForConditionalGeneration", e2b).renderer, "gemma4-small");
  EXPECT_EQ(default_chat_format("Gemma4ForConditionalGeneration", fixture_config("gemma4-moe-tiny")).renderer,
            "gemma4-large");
  EXPECT_EQ(default_chat_format("Gemma4ForCausalLM", fixture_config("gemma4-dense-tiny")).renderer, "gemma4-large");
}

TEST(ChatFormat, EveryDefaultNameCanBeMade) {
  for (const auto& n : renderer_names()) EXPECT_EQ(make_renderer(n)->name(), n);
}

TEST(ChatFormat, UnknownNamesAndArchitectures) {
  try {
    make_renderer("chatml");
    FAIL() << "expected InvalidInput";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("gemma4, gemma4-small, gemma4-large, glm-4.7"), std::string::npos) << e.what();
  }
  EXPECT_THROW(default_chat_format("LlamaForCausalLM", json::object()), InvalidInput);
}

TEST(ChatTypes, MessageFromOpenAiJson) {
  Message m = Message::from_json(ordered_json::parse(R"({"role":"assistant","content":null,
      "reasoning_content":"hmm",
      "tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"b\": 1, \"a\": [true]}"}}]})"));
  EXPECT_EQ(m.role, "assistant");
  EXPECT_EQ(m.content, "");
  EXPECT_EQ(m.thinking, "hmm");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].id, "call_1");
  EXPECT_EQ(m.tool_calls[0].name, "f");
  EXPECT_EQ(m.tool_calls[0].arguments.dump(), R"({"b":1,"a":[true]})");
  EXPECT_EQ(m.tool_calls[0].to_json().dump(), R"({"id":"call_1","function":{"name":"f","arguments":{"b":1,"a":[true]}}})");

  Message t = Message::from_json(ordered_json::parse(
      R"({"role":"tool","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"tool_call_id":"call_1"})"));
  EXPECT_EQ(t.content, "ab");
  EXPECT_EQ(t.tool_call_id, "call_1");
  Message o = Message::from_json(ordered_json::parse(R"({"role":"tool","content":"x","tool_name":"f"})"));
  EXPECT_EQ(o.tool_name, "f");
}

TEST(ChatTypes, ToolFromJson) {
  Tool bare = Tool::from_json(ordered_json::parse(R"({"name":"now","description":"Time"})"));
  EXPECT_EQ(bare.name, "now");
  EXPECT_TRUE(bare.parameters.is_null());
  EXPECT_EQ(bare.to_json().dump(), R"({"type":"function","function":{"name":"now","description":"Time"}})");
  EXPECT_THROW(Tool::from_json(ordered_json::parse(R"({"type":"function","function":{"description":"x"}})")),
               InvalidInput);
}

TEST(ChatTypes, InvalidArgumentsJsonIsAClearError) {
  EXPECT_EQ(parse_tool_arguments("").dump(), "{}");
  EXPECT_EQ(parse_tool_arguments(R"( {"a": 1} )").dump(), R"({"a":1})");
  try {
    parse_tool_arguments("{\"a\": ");
    FAIL() << "expected InvalidInput";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_tool_arguments("[1]"), InvalidInput);
  EXPECT_THROW(Message::from_json(ordered_json::parse(
                   R"({"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{oops"}}]})")),
               InvalidInput);
  EXPECT_THROW(Message::from_json(ordered_json::parse(R"({"content":"no role"})")), InvalidInput);
}

}  // namespace
}  // namespace vatic::chat
