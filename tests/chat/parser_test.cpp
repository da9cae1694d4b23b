#include <random>

#include <gtest/gtest.h>

#include "chat/glm47.h"
#include "chat/parser.h"
#include "chat_test_util.h"
#include "util/error.h"

namespace vatic::chat {
namespace {

using namespace test;

ParserOptions opts(std::optional<bool> think, std::optional<bool> starts_in_thinking = std::nullopt,
                   std::vector<Tool> tools = {}) {
  ParserOptions o;
  o.think = think;
  o.starts_in_thinking = starts_in_thinking;
  o.tools = std::move(tools);
  return o;
}

// Parses `text` whole and in 1-, 2-, 3- and 7-byte chunks; all splits must give the same result.
ParsedChunk parse(std::string_view parser, const ParserOptions& o, std::string_view text) {
  auto p = make_parser(parser, o);
  ParsedChunk whole = parse_all(*p, text, 0);
  for (std::size_t chunk : {1, 2, 3, 7}) {
    auto q = make_parser(parser, o);
    ParsedChunk split = parse_all(*q, text, chunk);
    EXPECT_EQ(split.content, whole.content) << "chunk size " << chunk;
    EXPECT_EQ(split.thinking, whole.thinking) << "chunk size " << chunk;
    EXPECT_EQ(split.tool_calls, whole.tool_calls) << "chunk size " << chunk;
  }
  return whole;
}

json args_of(const ToolCall& tc) { return json(tc.arguments); }

// ---------------------------------------------------------------------------------------------------------------
// Gemma 4

TEST(Gemma4Parser, SeparatesThinkingFromContent) {
  auto r = parse("gemma4", opts(true), "<|channel>thought\nLet me think.\nTwo and two.\n<channel|>\n\nThe answer is 4.");
  EXPECT_EQ(r.thinking, "Let me think.\nTwo and two.");
  EXPECT_EQ(r.content, "The answer is 4.");
  EXPECT_TRUE(r.tool_calls.empty());
}

TEST(Gemma4Parser, ThoughtChannelIsDroppedWhenThinkingIsOff) {
  for (auto think : {std::optional<bool>(false), std::optional<bool>()}) {
    auto r = parse("gemma4", opts(think), "<|channel>thought\n<channel|>Hello!");
    EXPECT_EQ(r.thinking, "");
    EXPECT_EQ(r.content, "Hello!");
  }
}

TEST(Gemma4Parser, OutputStartingInsideThinking) {
  auto r = parse("gemma4", opts(true, true), "The tool said sunny.\n<channel|>It is sunny in Paris.");
  EXPECT_EQ(r.thinking, "The tool said sunny.");
  EXPECT_EQ(r.content, "It is sunny in Paris.");
}

TEST(Gemma4Parser, PlainContentIsUntouched) {
  auto r = parse("gemma4", opts(false), "  Hello <b>world</b> <|channel \n");
  EXPECT_EQ(r.content, "  Hello <b>world</b> <|channel \n");
}

TEST(Gemma4Parser, ExtractsToolCallWithCompactArguments) {
  auto r = parse("gemma4", opts(true),
                 "<|channel>thought\nNeed weather.<channel|>I'll check.\n<|tool_call>call:get_weather{location:<|\"|>"
                 "Paris, FR<|\"|>,days:3,metric:true,ratio:0.5,opts:{hourly:false,fields:[<|\"|>temp<|\"|>,<|\"|>wind"
                 "<|\"|>]},none:null}<tool_call|><|tool_response>");
  EXPECT_EQ(r.thinking, "Need weather.");
  EXPECT_EQ(r.content, "I'll check.");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(args_of(r.tool_calls[0]), json::parse(R"({"location":"Paris, FR","days":3,"metric":true,"ratio":0.5,
             "opts":{"hourly":false,"fields":["temp","wind"]},"none":null})"));
}

TEST(Gemma4Parser, SeveralToolCalls) {
  auto r = parse("gemma4", opts(false),
                 "<|tool_call>call:get_weather{location:<|\"|>Paris<|\"|>}<tool_call|>\n<|tool_call>call:get_time{}"
                 "<tool_call|><tool_call|>");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(args_of(r.tool_calls[0]), json::parse(R"({"location":"Paris"})"));
  EXPECT_EQ(r.tool_calls[1].name, "get_time");
  EXPECT_EQ(args_of(r.tool_calls[1]), json::object());
}

TEST(Gemma4Parser, MalformedToolCallStaysContent) {
  const std::string text = "A <|tool_call>call:get_weather{location:Paris}<tool_call|> B";
  auto r = parse("gemma4", opts(false), text);
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(r.tool_calls.empty());
  r = parse("gemma4", opts(false), "<|tool_call>get_weather{}<tool_call|>");
  EXPECT_EQ(r.content, "<|tool_call>get_weather{}<tool_call|>");
}

TEST(Gemma4Parser, UnterminatedToolCallAtEnd) {
  auto r = parse("gemma4", opts(false), "<|tool_call>call:f{a:1}");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(args_of(r.tool_calls[0]), json::parse(R"({"a":1})"));
  r = parse("gemma4", opts(false), "Hi <|tool_call>call:f{a:");
  EXPECT_EQ(r.content, "Hi <|tool_call>call:f{a:");
  EXPECT_TRUE(r.tool_calls.empty());
}

TEST(Gemma4Parser, HoldsBackOnlyAPossibleMarker) {
  auto p = make_parser("gemma4", opts(true));
  EXPECT_EQ(p->feed("Hello wor").content, "Hello wor");
  EXPECT_EQ(p->feed("ld <|tool").content, "ld");
  ParsedChunk c = p->feed("_call>call:f{}<tool_c");
  EXPECT_TRUE(c.empty());
  c = p->feed("all|>");
  ASSERT_EQ(c.tool_calls.size(), 1u);
  EXPECT_EQ(c.tool_calls[0].name, "f");
  auto q = make_parser("gemma4", opts(true));
  EXPECT_EQ(q->feed("<|chan").content, "");
  c = q->feed("nel>thought\nabc <chan");
  EXPECT_EQ(c.thinking, "abc");
  EXPECT_EQ(c.content, "");
  c = q->feed("nel|> x");
  EXPECT_EQ(c.content, "x");
  EXPECT_TRUE(q->finish().empty());
}

// ---------------------------------------------------------------------------------------------------------------
// GLM-4.7

TEST(Glm47Parser, OutputStartsInsideThinkingByDefault) {
  auto r = parse("glm-4.7", opts(std::nullopt), "Let me think.\nStill thinking.\n</think>\nThe answer.");
  EXPECT_EQ(r.thinking, "Let me think.\nStill thinking.");
  EXPECT_EQ(r.content, "The answer.");
  r = parse("glm-4.7", opts(true), "\nShort.</think>Done");
  EXPECT_EQ(r.thinking, "Short.");
  EXPECT_EQ(r.content, "Done");
}

TEST(Glm47Parser, ThinkingOff) {
  auto r = parse("glm-4.7", opts(false), "Hello! <b>x</b>");
  EXPECT_EQ(r.thinking, "");
  EXPECT_EQ(r.content, "Hello! <b>x</b>");
  // The model may still open a thinking block itself.
  r = parse("glm-4.7", opts(false), "<think>hmm</think>Hi");
  EXPECT_EQ(r.thinking, "hmm");
  EXPECT_EQ(r.content, "Hi");
}

TEST(Glm47Parser, ExtractsToolCallsTypedBySchema) {
  auto r = parse("glm-4.7", opts(true, std::nullopt, {weather_tool(), event_tool()}),
                 "I should call tools.</think>Checking.\n<tool_call>get_weather\n<arg_key>location</arg_key>\n"
                 "<arg_value>Paris</arg_value>\n<arg_key>unit</arg_key><arg_value>celsius</arg_value>\n</tool_call>\n"
                 "<tool_call>create_event<arg_key>title</arg_key><arg_value>123</arg_value><arg_key>attendees</arg_key>"
                 "<arg_value>[{\"email\": \"a@x.org\"}]</arg_value><arg_key>duration</arg_key><arg_value>30.5"
                 "</arg_value><arg_key>priority</arg_key><arg_value>2</arg_value><arg_key>extra</arg_key><arg_value>"
                 "{\"k\": true}</arg_value><arg_key>note</arg_key><arg_value>free text</arg_value></tool_call>");
  EXPECT_EQ(r.thinking, "I should call tools.");
  EXPECT_EQ(r.content, "Checking.");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments.dump(), R"({"location":"Paris","unit":"celsius"})");
  EXPECT_EQ(r.tool_calls[1].name, "create_event");
  EXPECT_EQ(r.tool_calls[1].arguments.dump(),
            R"({"title":"123","attendees":[{"email":"a@x.org"}],"duration":30.5,"priority":2,"extra":{"k":true},)"
            R"("note":"free text"})");
}

TEST(Glm47Parser, UndeclaredToolValuesAreJsonWhenTheyParse) {
  auto call = glm47::parse_call("lookup<arg_key>n</arg_key><arg_value>42</arg_value><arg_key>s</arg_key>"
                                "<arg_value>abc</arg_value><arg_key>b</arg_key><arg_value>true</arg_value>",
                                {});
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->arguments.dump(), R"({"n":42,"s":"abc","b":true})");
  call = glm47::parse_call("  now  ", {});
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->name, "now");
  EXPECT_EQ(call->arguments.dump(), "{}");
}

TEST(Glm47Parser, MalformedToolCallStaysContent) {
  const std::string bad = "See <tool_call>get_weather<arg_key>location</arg_key>Paris</tool_call> ok";
  auto r = parse("glm-4.7", opts(false), bad);
  EXPECT_EQ(r.content, bad);
  EXPECT_TRUE(r.tool_calls.empty());
  r = parse("glm-4.7", opts(false), "<tool_call>two words</tool_call>");
  EXPECT_EQ(r.content, "<tool_call>two words</tool_call>");
}

TEST(Glm47Parser, UnterminatedToolCallAtEnd) {
  auto r = parse("glm-4.7", opts(false), "<tool_call>get_weather<arg_key>location</arg_key><arg_value>Paris</arg_value>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments.dump(), R"({"location":"Paris"})");
  r = parse("glm-4.7", opts(false), "<tool_call>get_weather<arg_key>location</arg_key><arg_value>Par");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content, "<tool_call>get_weather<arg_key>location</arg_key><arg_value>Par");
}

TEST(Glm47Parser, HoldsBackOnlyAPossibleMarker) {
  auto p = make_parser("glm-4.7", opts(true));
  EXPECT_EQ(p->feed("abc</th").thinking, "abc");
  ParsedChunk c = p->feed("ink>Hi <tool");
  EXPECT_EQ(c.content, "Hi");
  c = p->feed("_cal");
  EXPECT_TRUE(c.empty());
  c = p->feed("x");  // not a marker after all
  EXPECT_EQ(c.content, " <tool_calx");
}

TEST(Parsers, PiecesAreWholeUtf8Characters) {
  for (const char* name : {"gemma4", "glm-4.7"}) {
    auto p = make_parser(name, opts(false));
    EXPECT_EQ(p->feed("caf\xC3").content, "caf") << name;
    EXPECT_EQ(p->feed("\xA9 \xE2\x82").content, "\xC3\xA9 ") << name;
    EXPECT_EQ(p->feed("\xAC!").content, "\xE2\x82\xAC!") << name;
  }
}

TEST(Parsers, LongToolCallInSmallChunks) {
  std::string value(200000, 'x');
  auto r = parse("glm-4.7", opts(false),
                 "<tool_call>write<arg_key>text</arg_key><arg_value>" + value + "</arg_value></tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments["text"], value);
  r = parse("gemma4", opts(false), "<|tool_call>call:write{text:<|\"|>" + value + "<|\"|>}<tool_call|>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments["text"], value);
}

TEST(Parsers, RandomSplitsGiveTheSameResult) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"gemma4",
       "<|channel>thought\nPlan: call it.\n<channel|>\nSure. <|tool_call>call:f{a:<|\"|>x<|\"|>,b:[1,2]}<tool_call|>"
       "<|tool_response> then <|tool_call>bad<tool_call|> <|chan end \n"},
      {"glm-4.7",
       " Plan.\n</think>\nSure. <tool_call>f<arg_key>a</arg_key><arg_value>x</arg_value></tool_call> then "
       "<tool_call>bad one</tool_call> <tool_ end \n"}};
  std::mt19937 rng(1234);
  for (const auto& [name, text] : cases) {
    auto whole_parser = make_parser(name, opts(true));
    ParsedChunk whole = parse_all(*whole_parser, text, 0);
    for (int round = 0; round < 200; ++round) {
      auto p = make_parser(name, opts(true));
      ParsedChunk split;
      std::size_t i = 0;
      while (i < text.size()) {
        std::size_t n = std::uniform_int_distribution<std::size_t>(1, 12)(rng);
        split.append(p->feed(std::string_view(text).substr(i, n)));
        i += n;
      }
      split.append(p->finish());
      ASSERT_EQ(split.content, whole.content) << name << " round " << round;
      ASSERT_EQ(split.thinking, whole.thinking) << name << " round " << round;
      ASSERT_EQ(split.tool_calls, whole.tool_calls) << name << " round " << round;
    }
    EXPECT_EQ(whole.tool_calls.size(), 1u) << name;
    EXPECT_NE(whole.content.find("bad"), std::string::npos) << name;
  }
}

TEST(Parsers, UnknownNameListsValidOnes) {
  try {
    make_parser("chatml");
    FAIL() << "expected InvalidInput";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("gemma4, glm-4.7, llama3, qwen3, gemma3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vatic::chat
