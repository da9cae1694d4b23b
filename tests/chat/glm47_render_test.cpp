// Expected prompts are the output of GLM-4.7's official chat_template.jinja rendered with Jinja2 (tojson as in
// transformers: json.dumps with ensure_ascii=False) for the same conversations.
#include <gtest/gtest.h>

#include "chat/renderer.h"
#include "chat_test_util.h"
#include "util/error.h"

namespace vatic::chat {
namespace {

using namespace test;

const std::string kToolsHead =
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
    "with function signatures within <tools></tools> XML tags:\n<tools>\n";
const std::string kToolsTail =
    "</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}"
    "</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>";
const std::string kWeatherJson =
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the current weather for "
    "a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\", "
    "\"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}}, "
    "\"required\": [\"location\"]}}}\n";

std::string render(const std::vector<Message>& messages, const std::vector<Tool>& tools = {},
                   RenderOptions options = {}) {
  return make_renderer("glm-4.7")->render(messages, tools, options);
}

RenderOptions think(bool on) {
  RenderOptions o;
  o.think = on;
  return o;
}

TEST(Glm47Render, PlainChat) {
  EXPECT_EQ(render({user("Hello")}), "[gMASK]<sop><|user|>Hello<|assistant|><think>");
  EXPECT_EQ(render({user("Hello")}, {}, think(true)), "[gMASK]<sop><|user|>Hello<|assistant|><think>");
}

TEST(Glm47Render, SystemPrompt) {
  EXPECT_EQ(render({system("You are helpful."), user("Hi")}),
            "[gMASK]<sop><|system|>You are helpful.<|user|>Hi<|assistant|><think>");
}

TEST(Glm47Render, ThinkingOff) {
  EXPECT_EQ(render({user("Hello")}, {}, think(false)), "[gMASK]<sop><|user|>Hello<|assistant|></think>");
}

TEST(Glm47Render, MultiTurnThinkingHistory) {
  std::vector<Message> chat = {user("What is 2+2?"), assistant(" 4 ", " Add two and two. "), user("And 3+3?")};
  // Default (ollama): earlier reasoning is kept, as the official template does with clear_thinking=false.
  EXPECT_EQ(render(chat),
            "[gMASK]<sop><|user|>What is 2+2?<|assistant|><think>Add two and two.</think>4<|user|>And 3+3?"
            "<|assistant|><think>");
  // The official template's default (clear_thinking unset) drops it.
  RenderOptions clear;
  clear.preserve_thinking = false;
  EXPECT_EQ(render(chat, {}, clear),
            "[gMASK]<sop><|user|>What is 2+2?<|assistant|></think>4<|user|>And 3+3?<|assistant|><think>");
}

TEST(Glm47Render, ReasoningInsideContentIsSplitOut) {
  EXPECT_EQ(render({user("Hi"), assistant("<think>\nGreet back.\n</think>\nHello!")}),
            "[gMASK]<sop><|user|>Hi<|assistant|><think>Greet back.</think>Hello!<|assistant|><think>");
}

TEST(Glm47Render, ToolsWithCallsAndResponses) {
  std::vector<Message> chat = {
      system("Be brief."), user("Weather in Paris and Oslo?"),
      assistant("", "Call the tool twice.",
                {call("get_weather", R"({"location":"Paris","unit":"celsius"})"),
                 call("get_weather", R"({"location":"Oslo"})")}),
      tool_result(R"({"temperature": 18})"), tool_result(R"({"temperature": 4})")};
  EXPECT_EQ(render(chat, {weather_tool()}),
            "[gMASK]<sop>" + kToolsHead + kWeatherJson + kToolsTail +
                "<|system|>Be brief.<|user|>Weather in Paris and Oslo?<|assistant|><think>Call the tool twice.</think>"
                "<tool_call>get_weather<arg_key>location</arg_key><arg_value>Paris</arg_value><arg_key>unit</arg_key>"
                "<arg_value>celsius</arg_value></tool_call><tool_call>get_weather<arg_key>location</arg_key><arg_value>"
                "Oslo</arg_value></tool_call><|observation|><tool_response>{\"temperature\": 18}</tool_response>"
                "<tool_response>{\"temperature\": 4}</tool_response><|assistant|><think>");
}

TEST(Glm47Render, NonStringArgumentsAreJsonWithPythonSpacing) {
  std::vector<Message> chat = {
      user("Go"),
      assistant("Creating.", "",
                {call("create_event",
                      R"({"title":"Sync","attendees":[{"email":"a@x.org","optional":false}],"duration":30.5,"note":null})")}),
      tool_result("ok"), assistant("Done.")};
  EXPECT_EQ(render(chat, {}, think(false)),
            "[gMASK]<sop><|user|>Go<|assistant|></think>Creating.<tool_call>create_event<arg_key>title</arg_key>"
            "<arg_value>Sync</arg_value><arg_key>attendees</arg_key><arg_value>[{\"email\": \"a@x.org\", \"optional\": "
            "false}]</arg_value><arg_key>duration</arg_key><arg_value>30.5</arg_value><arg_key>note</arg_key><arg_value>"
            "null</arg_value></tool_call><|observation|><tool_response>ok</tool_response><|assistant|></think>Done."
            "<|assistant|></think>");
}

TEST(Glm47Render, NestedToolDeclarationKeepsKeyOrder) {
  EXPECT_EQ(
      render({user("Plan it")}, {event_tool()}),
      "[gMASK]<sop>" + kToolsHead +
          "{\"type\": \"function\", \"function\": {\"name\": \"create_event\", \"description\": \"Create a calendar "
          "event\", \"parameters\": {\"type\": \"object\", \"properties\": {\"title\": {\"type\": \"string\", "
          "\"description\": \"Event title\"}, \"attendees\": {\"type\": \"array\", \"description\": \"People to "
          "invite\", \"items\": {\"type\": \"object\", \"properties\": {\"email\": {\"type\": \"string\"}, "
          "\"optional\": {\"type\": \"boolean\"}}, \"required\": [\"email\"]}}, \"tags\": {\"type\": \"array\", "
          "\"items\": {\"type\": \"string\"}}, \"duration\": {\"type\": \"number\", \"description\": \"Minutes\", "
          "\"nullable\": true}, \"Reminder\": {\"type\": \"object\", \"properties\": {\"minutes\": {\"type\": "
          "\"integer\"}}, \"required\": [\"minutes\"]}, \"priority\": {\"type\": \"integer\", \"enum\": [1, 2, 3]}}, "
          "\"required\": [\"title\", \"attendees\"]}}}\n" +
          kToolsTail + "<|user|>Plan it<|assistant|><think>");
}

TEST(Glm47Render, PromptOpensThinking) {
  auto r = make_renderer("glm-4.7");
  EXPECT_TRUE(r->default_think());
  EXPECT_TRUE(r->prompt_opens_thinking(r->render({user("Hi")}, {}, {})));
  EXPECT_FALSE(r->prompt_opens_thinking(r->render({user("Hi")}, {}, think(false))));
}

TEST(Glm47Render, BadInput) {
  EXPECT_THROW(render({msg("observation", "x")}), InvalidInput);
  Message bad = assistant("", "", {call("a", "\"text\"")});
  EXPECT_THROW(render({user("Go"), bad}), InvalidInput);
  Message unnamed = assistant("", "", {call("", "{}")});
  EXPECT_THROW(render({user("Go"), unnamed}), InvalidInput);
}

}  // namespace
}  // namespace vatic::chat
