// Expected prompts are the output of Gemma 4's official chat_template.jinja (the E2B template and the 31B
// template, which differs only in the generation prompt) rendered with Jinja2 for the same conversations.
#include <gtest/gtest.h>

#include "chat/gemma4.h"
#include "chat/renderer.h"
#include "chat_test_util.h"
#include "util/error.h"

namespace vatic::chat {
namespace {

using namespace test;

const std::string kWeatherDecl =
    "<|tool>declaration:get_weather{description:<|\"|>Get the current weather for a city<|\"|>,parameters:{"
    "properties:{location:{description:<|\"|>City name<|\"|>,type:<|\"|>STRING<|\"|>},unit:{enum:[<|\"|>celsius<|"
    "\"|>,<|\"|>fahrenheit<|\"|>],type:<|\"|>STRING<|\"|>}},required:[<|\"|>location<|\"|>],type:<|\"|>OBJECT<|\"|>}"
    "}<tool|>";

std::string render(std::string_view name, const std::vector<Message>& messages, const std::vector<Tool>& tools = {},
                   RenderOptions options = {}) {
  return make_renderer(name)->render(messages, tools, options);
}

RenderOptions think(bool on) {
  RenderOptions o;
  o.think = on;
  return o;
}

TEST(Gemma4Render, PlainChat) {
  EXPECT_EQ(render("gemma4", {user("Hello")}), "<bos><|turn>user\nHello<turn|>\n<|turn>model\n");
  EXPECT_EQ(render("gemma4-small", {user("Hello")}), "<bos><|turn>user\nHello<turn|>\n<|turn>model\n");
}

TEST(Gemma4Render, SystemPromptIsTrimmed) {
  EXPECT_EQ(render("gemma4", {system("  You are helpful.\n"), user("Hi there ")}),
            "<bos><|turn>system\nYou are helpful.<turn|>\n<|turn>user\nHi there<turn|>\n<|turn>model\n");
}

TEST(Gemma4Render, DeveloperRoleIsTheSystemTurn) {
  EXPECT_EQ(render("gemma4", {msg("developer", "You are helpful."), user("Hi")}),
            "<bos><|turn>system\nYou are helpful.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n");
}

TEST(Gemma4Render, ThinkingOnPutsThinkTokenAtTheStartOfTheSystemTurn) {
  EXPECT_EQ(render("gemma4", {system("You are helpful."), user("Hi")}, {}, think(true)),
            "<bos><|turn>system\n<|think|>\nYou are helpful.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n");
  EXPECT_EQ(render("gemma4-large", {user("Hello")}, {}, think(true)),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHello<turn|>\n<|turn>model\n");
}

TEST(Gemma4Render, ThinkingOffLargeVariantAppendsEmptyThoughtChannel) {
  EXPECT_EQ(render("gemma4-large", {user("Hello")}),
            "<bos><|turn>user\nHello<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  EXPECT_EQ(render("gemma4-large", {user("Hello")}, {}, think(false)),
            "<bos><|turn>user\nHello<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  EXPECT_EQ(render("gemma4-small", {user("Hello")}, {}, think(false)),
            "<bos><|turn>user\nHello<turn|>\n<|turn>model\n");
}

TEST(Gemma4Render, MultiTurnStripsEarlierThinking) {
  std::vector<Message> chat = {user("What is 2+2?"), assistant("4", "Add two and two."), user("And 3+3?")};
  EXPECT_EQ(render("gemma4", chat, {}, think(true)),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n4<turn|>\n"
            "<|turn>user\nAnd 3+3?<turn|>\n<|turn>model\n");
  // Thought channels left inside the content of earlier turns are stripped too.
  chat[1] = assistant("<|channel>thought\nold<channel|>4");
  EXPECT_EQ(render("gemma4", chat),
            "<bos><|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n4<turn|>\n<|turn>user\nAnd 3+3?<turn|>\n"
            "<|turn>model\n");
}

TEST(Gemma4Render, ToolsWithOneCallAndItsResponse) {
  std::vector<Message> chat = {user("Weather in Paris?"),
                               assistant("", "", {call("get_weather", R"({"unit":"celsius","location":"Paris"})")}),
                               tool_result(R"({"temperature": 18})", "get_weather")};
  EXPECT_EQ(render("gemma4", chat, {weather_tool()}),
            "<bos><|turn>system\n" + kWeatherDecl +
                "<turn|>\n<|turn>user\nWeather in Paris?<turn|>\n<|turn>model\n<|tool_call>call:get_weather{location:"
                "<|\"|>Paris<|\"|>,unit:<|\"|>celsius<|\"|>}<tool_call|><|tool_response>response:get_weather{value:"
                "<|\"|>{\"temperature\": 18}<|\"|>}<tool_response|>");
}

TEST(Gemma4Render, ToolResponseWithThinkingOpensTheThoughtChannel) {
  std::vector<Message> chat = {user("Weather in Paris?"),
                               assistant("", "Need the weather tool.", {call("get_weather", R"({"location":"Paris"})")}),
                               tool_result("sunny", "get_weather")};
  auto r = make_renderer("gemma4");
  std::string prompt = r->render(chat, {weather_tool()}, think(true));
  EXPECT_EQ(prompt, "<bos><|turn>system\n<|think|>\n" + kWeatherDecl +
                        "<turn|>\n<|turn>user\nWeather in Paris?<turn|>\n<|turn>model\n<|channel>thought\nNeed the "
                        "weather tool.\n<channel|><|tool_call>call:get_weather{location:<|\"|>Paris<|\"|>}<tool_call|>"
                        "<|tool_response>response:get_weather{value:<|\"|>sunny<|\"|>}<tool_response|><|channel>"
                        "thought\n");
  EXPECT_TRUE(r->prompt_opens_thinking(prompt));
  EXPECT_FALSE(r->prompt_opens_thinking(render("gemma4", {user("Hi")})));
  EXPECT_FALSE(make_renderer("gemma4-large")->prompt_opens_thinking(render("gemma4-large", {user("Hi")})));
}

TEST(Gemma4Render, FullToolRoundTripThenNextUserTurn) {
  std::vector<Message> chat = {system("Be brief."),
                               user("Weather in Paris?"),
                               assistant("", "", {call("get_weather", R"({"location":"Paris"})")}),
                               tool_result("sunny", "get_weather"),
                               assistant("It is sunny."),
                               user("Thanks")};
  EXPECT_EQ(render("gemma4", chat, {weather_tool()}),
            "<bos><|turn>system\nBe brief." + kWeatherDecl +
                "<turn|>\n<|turn>user\nWeather in Paris?<turn|>\n<|turn>model\n<|tool_call>call:get_weather{location:"
                "<|\"|>Paris<|\"|>}<tool_call|><|tool_response>response:get_weather{value:<|\"|>sunny<|\"|>}"
                "<tool_response|>It is sunny.<turn|>\n<|turn>user\nThanks<turn|>\n<|turn>model\n");
}

TEST(Gemma4Render, PendingToolCallEndsWithToolResponseMarker) {
  std::vector<Message> chat = {user("Weather?"), assistant("", "", {call("get_weather", R"({"location":"Oslo"})")})};
  EXPECT_EQ(render("gemma4", chat, {weather_tool()}),
            "<bos><|turn>system\n" + kWeatherDecl +
                "<turn|>\n<|turn>user\nWeather?<turn|>\n<|turn>model\n<|tool_call>call:get_weather{location:<|\"|>"
                "Oslo<|\"|>}<tool_call|><|tool_response>");
}

TEST(Gemma4Render, NestedSchemaDeclaration) {
  EXPECT_EQ(
      render("gemma4", {user("Plan it")}, {event_tool()}),
      "<bos><|turn>system\n<|tool>declaration:create_event{description:<|\"|>Create a calendar event<|\"|>,parameters:"
      "{properties:{attendees:{description:<|\"|>People to invite<|\"|>,items:{properties:{email:{type:<|\"|>STRING<|"
      "\"|>},optional:{type:<|\"|>BOOLEAN<|\"|>}},required:[<|\"|>email<|\"|>],type:<|\"|>OBJECT<|\"|>},type:<|\"|>"
      "ARRAY<|\"|>},duration:{description:<|\"|>Minutes<|\"|>,nullable:true,type:<|\"|>NUMBER<|\"|>},priority:{type:<|"
      "\"|>INTEGER<|\"|>},Reminder:{properties:{minutes:{type:<|\"|>INTEGER<|\"|>}},required:[<|\"|>minutes<|\"|>],"
      "type:<|\"|>OBJECT<|\"|>},tags:{items:{type:<|\"|>STRING<|\"|>},type:<|\"|>ARRAY<|\"|>},title:{description:<|\"|>"
      "Event title<|\"|>,type:<|\"|>STRING<|\"|>}},required:[<|\"|>title<|\"|>,<|\"|>attendees<|\"|>],type:<|\"|>OBJECT"
      "<|\"|>}}<tool|><turn|>\n<|turn>user\nPlan it<turn|>\n<|turn>model\n");
}

TEST(Gemma4Render, NestedToolCallArguments) {
  std::vector<Message> chat = {
      user("Go"),
      assistant("", "",
                {call("create_event", R"({"title":"Sync","attendees":[{"email":"a@x.org","optional":false}],
                   "duration":30.5,"count":3,"note":null,"Reminder":{"minutes":10}})")}),
      tool_result("ok", "create_event")};
  EXPECT_EQ(render("gemma4", chat),
            "<bos><|turn>user\nGo<turn|>\n<|turn>model\n<|tool_call>call:create_event{attendees:[{email:<|\"|>a@x.org"
            "<|\"|>,optional:false}],count:3,duration:30.5,note:null,Reminder:{minutes:10},title:<|\"|>Sync<|\"|>}"
            "<tool_call|><|tool_response>response:create_event{value:<|\"|>ok<|\"|>}<tool_response|>");
}

TEST(Gemma4Render, WithoutGenerationPrompt) {
  RenderOptions o;
  o.add_generation_prompt = false;
  EXPECT_EQ(render("gemma4", {user("Hello"), assistant("Hi!")}, {}, o),
            "<bos><|turn>user\nHello<turn|>\n<|turn>model\nHi!<turn|>\n");
}

TEST(Gemma4Render, ToolResultNameFromToolCallId) {
  ToolCall a = call("get_weather", R"({"location":"Paris"})");
  a.id = "call_1";
  ToolCall b = call("get_time", R"({})");
  b.id = "call_2";
  Message r1 = tool_result("sunny");
  r1.tool_call_id = "call_1";
  Message r2 = tool_result("noon");
  r2.tool_call_id = "call_2";
  std::string prompt = render("gemma4", {user("Go"), assistant("", "", {a, b}), r1, r2});
  EXPECT_NE(prompt.find("response:get_weather{value:<|\"|>sunny<|\"|>}"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("response:get_time{value:<|\"|>noon<|\"|>}"), std::string::npos) << prompt;
  // A single call needs no name or id.
  prompt = render("gemma4", {user("Go"), assistant("", "", {a}), tool_result("sunny")});
  EXPECT_NE(prompt.find("response:get_weather{value:<|\"|>sunny<|\"|>}"), std::string::npos) << prompt;
}

TEST(Gemma4Render, BadInput) {
  EXPECT_THROW(render("gemma4", {msg("robot", "hi")}), InvalidInput);
  try {
    render("gemma4", {msg("robot", "hi")});
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("unknown role \"robot\""), std::string::npos) << e.what();
  }
  // Two calls, results carry neither a name nor an id: cannot tell which is which.
  std::vector<Message> ambiguous = {user("Go"),
                                    assistant("", "", {call("a", "{}"), call("b", "{}")}),
                                    tool_result("1"), tool_result("2")};
  EXPECT_THROW(render("gemma4", ambiguous), InvalidInput);
  // A tool result with no preceding tool call.
  EXPECT_THROW(render("gemma4", {user("Go"), tool_result("1", "a")}), InvalidInput);
  // Arguments that are not an object.
  Message bad = assistant("", "", {call("a", "[1,2]")});
  EXPECT_THROW(render("gemma4", {user("Go"), bad}), InvalidInput);
}

TEST(Gemma4Compact, FormatAndParseRoundTrip) {
  ordered_json args = ordered_json::parse(
      R"({"b":"x, y: {z}","a":[1,-2.5,true,null,{"k":"v"}],"c":{"d":{"e":false}},"n":1e-05})");
  std::string compact = gemma4::format_argument(args, false);
  EXPECT_EQ(compact,
            "{a:[1,-2.5,true,null,{k:<|\"|>v<|\"|>}],b:<|\"|>x, y: {z}<|\"|>,c:{d:{e:false}},n:1e-05}");
  auto back = gemma4::parse_arguments(compact);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(json(*back), json(args));
  // Quoted keys (escape_keys) parse too.
  back = gemma4::parse_arguments(gemma4::format_argument(args, true));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(json(*back), json(args));
}

TEST(Gemma4Compact, RejectsMalformedArguments) {
  for (const char* bad : {"{a:<|\"|>unterminated}", "{a:1", "{a 1}", "{a:bare}", "{a:1}}", "a:1", "{:1}", "{a:[1,}"})
    EXPECT_FALSE(gemma4::parse_arguments(bad).has_value()) << bad;
  EXPECT_TRUE(gemma4::parse_arguments("{ a : 1 , b : [ ] }").has_value());
  EXPECT_TRUE(gemma4::parse_arguments("{}").has_value());
}

}  // namespace
}  // namespace vatic::chat
