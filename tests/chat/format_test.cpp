#include <fstream>

#include <gtest/gtest.h>

#include "chat/format.h"
#include "chat/renderer.h"
#include "chat/types.h"
#include "util/error.h"

namespace vatic::chat {
namespace {

TEST(ChatFormat, ParserCapabilities) {
  EXPECT_TRUE(parser_capabilities("qwen3").thinking);
  EXPECT_TRUE(parser_capabilities("qwen3").tools);
  EXPECT_TRUE(parser_capabilities("llama3").tools);
  EXPECT_FALSE(parser_capabilities("llama3").thinking);
  EXPECT_FALSE(parser_capabilities("gemma3").tools);
  EXPECT_TRUE(parser_capabilities("gemma4").thinking && parser_capabilities("glm-4.7").tools);
  EXPECT_FALSE(parser_capabilities("nope").tools);
}

TEST(ChatFormat, TemplateMarkers) {
  EXPECT_TRUE(template_matches_renderer("llama3", "{{ '<|start_header_id|>' + message['role'] }}"));
  EXPECT_TRUE(template_matches_renderer("qwen3", "{{- '<|im_start|>' + message.role }}"));
  EXPECT_TRUE(template_matches_renderer("gemma3", "{{ '<start_of_turn>' + role }}"));
  EXPECT_TRUE(template_matches_renderer("glm-4.7", "[gMASK]<sop>"));
  EXPECT_TRUE(template_matches_renderer("gemma4-small", "{{ '<|turn>' + role }}"));
  // A Mistral template under a Llama architecture is not the Llama 3 format.
  EXPECT_FALSE(template_matches_renderer("llama3", "{{ '[INST] ' + message['content'] + ' [/INST]' }}"));
  EXPECT_FALSE(template_matches_renderer("qwen3", "{{ '<start_of_turn>' }}"));
  EXPECT_FALSE(template_matches_renderer("", "<|im_start|>"));
}

TEST(ChatFormat, EveryDefaultNameCanBeMade) {
  for (const auto& n : renderer_names()) EXPECT_EQ(make_renderer(n)->name(), n);
}

TEST(ChatFormat, UnknownNamesAndArchitectures) {
  try {
    make_renderer("chatml");
    FAIL() << "expected InvalidInput";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("gemma4, gemma4-small, gemma4-large, glm-4.7, llama3, qwen3, gemma3"),
              std::string::npos)
        << e.what();
  }
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
