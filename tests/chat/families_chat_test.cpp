// Llama 3, Qwen3 and Gemma 3 chat formats: prompts as the official templates write them, and output parsing
// that gives the same result for any split of the output.
#include <random>

#include <gtest/gtest.h>

#include "chat/format.h"
#include "chat/parser.h"
#include "chat/renderer.h"
#include "chat_test_util.h"
#include "util/error.h"

namespace vatic::chat {
namespace {

using namespace test;

std::string render(std::string_view name, const std::vector<Message>& m, const std::vector<Tool>& tools = {},
                   std::optional<bool> think = std::nullopt) {
  RenderOptions o;
  o.think = think;
  return make_renderer(name)->render(m, tools, o);
}

ParserOptions popts(std::vector<Tool> tools = {}) {
  ParserOptions o;
  o.tools = std::move(tools);
  return o;
}

// Whole, in 1/2/3/7-byte chunks and in 200 random splits: all the same.
ParsedChunk parse(std::string_view name, const ParserOptions& o, std::string_view text) {
  auto p = make_parser(name, o);
  ParsedChunk whole = parse_all(*p, text, 0);
  for (std::size_t chunk : {1, 2, 3, 7}) {
    auto q = make_parser(name, o);
    ParsedChunk split = parse_all(*q, text, chunk);
    EXPECT_EQ(split.content, whole.content) << "chunk size " << chunk;
    EXPECT_EQ(split.thinking, whole.thinking) << "chunk size " << chunk;
    EXPECT_EQ(split.tool_calls, whole.tool_calls) << "chunk size " << chunk;
  }
  std::mt19937 rng(42);
  for (int round = 0; round < 200; ++round) {
    auto q = make_parser(name, o);
    ParsedChunk split;
    for (std::size_t i = 0; i < text.size();) {
      std::size_t n = std::uniform_int_distribution<std::size_t>(1, 12)(rng);
      split.append(q->feed(text.substr(i, n)));
      i += n;
    }
    split.append(q->finish());
    EXPECT_EQ(split.content, whole.content) << "round " << round;
    EXPECT_EQ(split.thinking, whole.thinking) << "round " << round;
    EXPECT_EQ(split.tool_calls, whole.tool_calls) << "round " << round;
  }
  return whole;
}

// ---------------------------------------------------------------------------------------------------------------
// Llama 3.1+

const char* kLlamaSystem =
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
    "Today Date: 26 Jul 2024\n\n";

TEST(Llama3Renderer, SystemAndTurns) {
  EXPECT_EQ(render("llama3", {system("  You are helpful. "), user("Hi"), assistant(" Hello! "), user("Bye")}),
            std::string(kLlamaSystem) +
                "You are helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // Without a system message the system block is still there, empty.
  EXPECT_EQ(render("llama3", {user("Hi")}),
            std::string(kLlamaSystem) +
                "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(Llama3Renderer, ToolsCallsAndResults) {
  std::string p =
      render("llama3",
             {user("Weather in Paris?"), assistant("", "", {call("get_weather", R"({"location": "Paris"})")}),
              tool_result("{\"temp\": 21}", "get_weather")},
             {weather_tool()});
  const std::string want_head =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting "
      "Knowledge Date: "
      "December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven "
      "the "
      "following functions, please respond with a JSON for a function call with its proper arguments that "
      "best "
      "answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
      "dictionary of "
      "argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    "
      "\"function\": {\n"
      "        \"name\": \"get_weather\",";
  EXPECT_EQ(p.substr(0, want_head.size()), want_head);
  const std::string want_tail =
      "}\n\nWeather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": "
      "\"get_weather\", "
      "\"parameters\": {\"location\": \"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n"
      "{\"temp\": 21}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
  ASSERT_GE(p.size(), want_tail.size());
  EXPECT_EQ(p.substr(p.size() - want_tail.size()), want_tail);
  EXPECT_THROW(render("llama3", {system("x")}, {weather_tool()}), InvalidInput);
}

TEST(Llama3Parser, ContentStreamsAndToolCallsAreJson) {
  auto r = parse("llama3", popts({weather_tool()}), "It is sunny {not json} today.");
  EXPECT_EQ(r.content, "It is sunny {not json} today.");
  EXPECT_TRUE(r.tool_calls.empty());
  r = parse("llama3", popts({weather_tool()}),
            " {\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json(r.tool_calls[0].arguments), json::parse(R"({"location": "Paris"})"));
  r = parse("llama3", popts({weather_tool()}),
            "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"s\": \"x;y}\"}}; {\"name\": \"b\", "
            "\"arguments\": {}}");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].arguments["s"], "x;y}");
  EXPECT_EQ(r.tool_calls[1].name, "b");
  // Not a call after all: everything comes back as content, unchanged.
  r = parse("llama3", popts({weather_tool()}), "{\"answer\": 42}");
  EXPECT_EQ(r.content, "{\"answer\": 42}");
  EXPECT_TRUE(r.tool_calls.empty());
  // Without tools, JSON output is content and streams.
  auto p = make_parser("llama3", popts());
  EXPECT_EQ(p->feed("{\"name\"").content, "{\"name\"");
}

// ---------------------------------------------------------------------------------------------------------------
// Qwen3

TEST(Qwen3Renderer, SystemTurnsAndThinkingSwitch) {
  EXPECT_EQ(render("qwen3", {system("You are helpful."), user("Hi")}),
            "<|im_start|>system\nYou are "
            "helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render("qwen3", {user("Hi")}, {}, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // Reasoning before the last user query is dropped; after it, it is kept.
  EXPECT_EQ(
      render("qwen3", {user("Hi"), assistant("Hello!", "greet"), user("Weather?")}),
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nWeather?"
      "<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(
      render("qwen3", {user("Hi"), assistant("Hello!", "greet")}),
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\ngreet\n</think>\n\nHello!<|im_end|>\n"
      "<|im_start|>assistant\n");
  // Reasoning inline in the content is split out the same way.
  EXPECT_EQ(
      render("qwen3", {user("Hi"), assistant("<think>\ngreet\n</think>\n\nHello!")}),
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\ngreet\n</think>\n\nHello!<|im_end|>\n"
      "<|im_start|>assistant\n");
}

TEST(Qwen3Renderer, ToolsCallsAndResults) {
  std::string p = render("qwen3",
                         {system("Be brief."), user("Weather in Paris?"),
                          assistant("", "", {call("get_weather", R"({"location": "Paris"})")}),
                          tool_result("sunny"), tool_result("21C")},
                         {weather_tool()});
  const std::string head =
      "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the "
      "user "
      "query.\n\nYou are provided with function signatures within <tools></tools> XML "
      "tags:\n<tools>\n{\"type\": "
      "\"function\", \"function\": {\"name\": \"get_weather\", ";
  EXPECT_EQ(p.substr(0, head.size()), head);
  const std::string tail =
      "}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
      "\"Paris\"}}\n"
      "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</"
      "tool_response>\n<tool_response>\n21C\n"
      "</tool_response><|im_end|>\n<|im_start|>assistant\n";
  ASSERT_GE(p.size(), tail.size());
  EXPECT_EQ(p.substr(p.size() - tail.size()), tail);
}

TEST(Qwen3Parser, ThinkingContentAndToolCalls) {
  auto r = parse(
      "qwen3", popts(),
      "<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"location\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"t\", "
      "\"arguments\": "
      "\"{\\\"a\\\": 1}\"}\n</tool_call>");
  EXPECT_EQ(r.thinking, "The user wants weather.");
  EXPECT_EQ(r.content, "Let me check.");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(json(r.tool_calls[0].arguments), json::parse(R"({"location": "Paris"})"));
  EXPECT_EQ(json(r.tool_calls[1].arguments), json::parse(R"({"a": 1})"));
  r = parse("qwen3", popts(), "Plain answer with <b>tags</b> and <thinking> words.");
  EXPECT_EQ(r.content, "Plain answer with <b>tags</b> and <thinking> words.");
  EXPECT_EQ(r.thinking, "");
  r = parse("qwen3", popts(), "Sure. <tool_call>\nnot json\n</tool_call> done");
  EXPECT_EQ(r.content, "Sure. <tool_call>\nnot json\n</tool_call> done");
  EXPECT_TRUE(r.tool_calls.empty());
}

TEST(Qwen3Parser, RendererOpensNoThinking) {
  EXPECT_FALSE(make_renderer("qwen3")->prompt_opens_thinking(render("qwen3", {user("Hi")})));
  ParserOptions o;
  o.starts_in_thinking = true;  // a prompt that ended inside <think>
  auto r = parse("qwen3", o, "hmm\n</think>\n\nYes.");
  EXPECT_EQ(r.thinking, "hmm");
  EXPECT_EQ(r.content, "Yes.");
}

// ---------------------------------------------------------------------------------------------------------------
// Gemma 3

TEST(Gemma3Renderer, SystemGoesIntoTheFirstUserTurn) {
  EXPECT_EQ(
      render("gemma3", {system("Be brief."), user(" Hi "), assistant("Hello!"), user("Bye")}),
      "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
      "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render("gemma3", {user("Hi")}),
            "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_THROW(render("gemma3", {user("a"), user("b")}), InvalidInput);
  EXPECT_THROW(render("gemma3", {user("a")}, {weather_tool()}), InvalidInput);
  EXPECT_THROW(render("gemma3", {user("a"), assistant("", "", {call("f", "{}")}), tool_result("x")}),
               InvalidInput);
}

TEST(Gemma3Parser, ContentOnlyAndUtf8Whole) {
  auto r = parse("gemma3", popts(), "Grüße, <think>not special</think> 👋");
  EXPECT_EQ(r.content, "Grüße, <think>not special</think> 👋");
  auto p = make_parser("gemma3", popts());
  EXPECT_EQ(p->feed("a\xF0\x9F").content, "a");  // the emoji is incomplete
  EXPECT_EQ(p->feed("\x91\x8B").content, "\xF0\x9F\x91\x8B");
}

}  // namespace
}  // namespace vatic::chat
