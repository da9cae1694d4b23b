// Tool calls with key/value arguments (GLM-4.7): the grammar's language, its refusals, and a round trip
// through the GLM-4.7 chat parser whose arguments must validate against the tool's schema.
#include <gtest/gtest.h>

#include <random>

#include "chat/glm47.h"
#include "chat/parser.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "schema_check.h"
#include "util/error.h"

using namespace vatic;
using namespace vatic::grammar;

namespace {

const ToolCallSyntax kGlmText{"<tool_call>", "", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
                              "</arg_value>"};

const char* kSearch = R"({"type":"object","properties":{
  "query":{"type":"string"},
  "limit":{"type":"integer","minimum":1,"maximum":20},
  "lang":{"enum":["en","fr"]},
  "safe":{"type":"boolean"}},"required":["query"]})";
const char* kNote = R"({"type":"object","properties":{
  "text":{"type":"string","maxLength":6},
  "tags":{"type":"array","items":{"type":"string","maxLength":4},"maxItems":3},
  "due":{"anyOf":[{"type":"string","pattern":"^[0-9]{2}:[0-9]{2}$"},{"type":"null"}]},
  "score":{"type":"number","minimum":0,"maximum":1},
  "meta":{"type":"object","properties":{"k":{"type":"string","maxLength":5}},"required":["k"],
          "additionalProperties":false}},
  "required":["text","meta"]})";
const char* kShape = R"({"type":"object","properties":{
  "shape":{"oneOf":[
    {"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"integer","minimum":0,"maximum":9}},
     "required":["kind","r"],"additionalProperties":false},
    {"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"integer","minimum":0,"maximum":9}},
     "required":["kind","side"],"additionalProperties":false}]},
  "label":{"type":["string","null"],"minLength":1,"maxLength":3}},
  "required":["shape","label"]})";

// Every byte a token, the markers as text tokens, and tokens that tempt the grammar's exclusions.
std::vector<std::string> glm_vocab() {
  std::vector<std::string> v = {"", ""};
  for (int c = 1; c < 128; c++) v.push_back(std::string(1, static_cast<char>(c)));
  for (const char* t :
       {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "</",
        "</arg_value", "</arg",        "null",      "NULL",       "Null",        "\nnull",       "null\n",
        "é",           "search",       "note",      "shape",      "query",       "limit",        "true",
        "false",       "\\u003c",      "\"<",       "12:30",      "circle"})
    v.push_back(t);
  return v;
}

struct Fixture {
  std::shared_ptr<CompiledGrammar> cg;
  std::vector<chat::Tool> tools;
  std::vector<ToolSpec> specs;
};

Fixture make(const std::vector<std::pair<std::string, const char*>>& tools, int max_calls = 2,
             const ToolCallSyntax& syn = kGlmText, std::vector<std::string> vocab = glm_vocab()) {
  Fixture f;
  for (const auto& [name, schema] : tools) {
    f.specs.push_back({name, ordered_json::parse(schema)});
    chat::Tool t;
    t.name = name;
    t.parameters = ordered_json::parse(schema);
    f.tools.push_back(t);
  }
  auto v = std::make_shared<TokenVocab>(TokenVocab::from_bytes(std::move(vocab)));
  f.cg = std::make_shared<CompiledGrammar>(compile(tool_call_grammar(f.specs, syn, max_calls)), v);
  return f;
}

// Feeds `text` one byte token at a time.
bool accepts(const Fixture& f, const std::string& text) {
  Matcher m(f.cg, {1});
  for (char c : text) {
    int32_t id = -1;
    for (int32_t i = 2; i < 129; i++)
      if (f.cg->vocab().bytes(i) == std::string(1, c)) id = i;
    if (id < 0 || !m.accept(id)) return false;
  }
  return m.is_complete();
}

std::vector<chat::ToolCall> parse(const std::vector<chat::Tool>& tools, const std::string& text,
                                  std::string* content = nullptr) {
  chat::ParserOptions o;
  o.think = false;
  o.starts_in_thinking = false;
  o.tools = tools;
  auto p = chat::make_parser("glm-4.7", o);
  chat::ParsedChunk out = p->feed(text);
  out.append(p->finish());
  if (content) *content = out.content;
  return out.tool_calls;
}

std::string call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& args) {
  std::string s = "<tool_call>" + name;
  for (const auto& [k, v] : args)
    s.append("<arg_key>").append(k).append("</arg_key><arg_value>").append(v).append("</arg_value>");
  return s + "</tool_call>";
}

TEST(KeyValueToolCalls, LanguageFollowsTheSchemaAndTheParser) {
  Fixture f = make({{"search", kSearch}});
  EXPECT_TRUE(accepts(f, call("search", {{"query", "cats"}})));
  EXPECT_TRUE(accepts(
      f, call("search",
              {{"query", "a < b </b> </arg_valu"}, {"limit", "20"}, {"lang", "fr"}, {"safe", "true"}})));
  EXPECT_TRUE(accepts(f, call("search", {{"query", "nulls"}})));
  EXPECT_TRUE(accepts(f, call("search", {{"query", "\nnull x"}})));
  EXPECT_TRUE(
      accepts(f, "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>x</arg_value>\n</tool_call>"));
  // Two calls, set apart by a newline.
  EXPECT_TRUE(accepts(f, call("search", {{"query", "a"}}) + "\n" + call("search", {{"query", "b"}})));
  // Strings reading "null" would come back as null.
  for (const char* v : {"null", "NuLL", "\nnull", "null\n", "\nNULL\n"})
    EXPECT_FALSE(accepts(f, call("search", {{"query", v}}))) << v;
  EXPECT_FALSE(accepts(f, call("search", {{"query", "a</arg_value>b"}})));  // the closing marker inside
  EXPECT_FALSE(accepts(f, call("search", {{"query", "a</tool_call>b"}})));  // the parser ends the call there
  EXPECT_FALSE(accepts(f, call("search", {})));                             // query is required
  EXPECT_FALSE(accepts(f, call("search", {{"query", "a"}, {"query", "b"}})));  // no duplicates
  EXPECT_FALSE(accepts(f, call("search", {{"limit", "2"}, {"query", "a"}})));  // the schema's order
  EXPECT_FALSE(accepts(f, call("search", {{"query", "a"}, {"other", "b"}})));  // no unknown keys
  EXPECT_FALSE(accepts(f, call("search", {{"query", "a"}, {"limit", "21"}})));
  EXPECT_FALSE(accepts(f, call("search", {{"query", "a"}, {"limit", "\"5\""}})));
  EXPECT_FALSE(accepts(f, call("search", {{"query", "a"}, {"lang", "\"en\""}})));  // untyped enum: raw
  EXPECT_FALSE(accepts(f, call("search", {{"query", "a"}, {"safe", "True"}})));
  EXPECT_FALSE(accepts(f, call("find", {{"query", "a"}})));
  EXPECT_FALSE(accepts(f, call("search", {{"query", "a"}}) + call("search", {{"query", "a"}}) +
                              call("search", {{"query", "a"}})));  // at most two calls

  Fixture n = make({{"note", kNote}});
  EXPECT_TRUE(accepts(n, call("note", {{"text", "hi"},
                                       {"tags", "[\"a\",\"bc\"]"},
                                       {"due", "12:30"},
                                       {"score", "0.5"},
                                       {"meta", "{\"k\":\"v\\u003c\"}"}})));
  EXPECT_TRUE(accepts(n, call("note", {{"text", ""}, {"due", "null"}, {"meta", "{\"k\":\"\"}"}})));
  EXPECT_FALSE(accepts(n, call("note", {{"text", "toolong!"}, {"meta", "{\"k\":\"\"}"}})));
  EXPECT_FALSE(
      accepts(n, call("note", {{"text", "Null"}, {"meta", "{\"k\":\"\"}"}})));  // bounded, still no null
  EXPECT_FALSE(accepts(n, call("note", {{"text", "a<b"}, {"meta", "{\"k\":\"\"}"}})));  // bounded raw: no '<'
  EXPECT_FALSE(accepts(n, call("note", {{"text", "a"}, {"meta", "{\"k\":\"<\"}"}})));   // '<' escaped in JSON
  EXPECT_FALSE(accepts(n, call("note", {{"text", "a"}, {"due", "1230"}, {"meta", "{\"k\":\"\"}"}})));
}

TEST(KeyValueToolCalls, SpecialTokenMarkers) {
  std::vector<std::string> vocab = glm_vocab();
  const int32_t first = static_cast<int32_t>(vocab.size());
  for (const char* m :
       {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"})
    vocab.push_back(TokenVocab::special_bytes(m));
  ToolCallSyntax syn;
  for (auto [field, m] : {std::pair<std::string*, const char*>{&syn.open, "<tool_call>"},
                          {&syn.close, "</tool_call>"},
                          {&syn.key_open, "<arg_key>"},
                          {&syn.key_close, "</arg_key>"},
                          {&syn.value_open, "<arg_value>"},
                          {&syn.value_close, "</arg_value>"}})
    *field = TokenVocab::special_bytes(m);
  Fixture f = make({{"search", kSearch}}, 1, syn, vocab);
  Matcher m(f.cg, {1});
  auto id = [&](const std::string& s) {
    for (int32_t i = 0; i < f.cg->vocab_size(); i++)
      if (f.cg->vocab().bytes(i) == s) return i;
    ADD_FAILURE() << s;
    return -1;
  };
  EXPECT_FALSE(m.allows(id("<tool_call>")));  // the text is not the special token
  for (int32_t t : {first, id("search"), first + 2, id("query"), first + 3, first + 4, id("</arg_value"),
                    first + 5, first + 1})
    ASSERT_TRUE(m.accept(t)) << t;
  EXPECT_TRUE(m.is_complete());
}

TEST(KeyValueToolCalls, RandomCallsParseToValidArguments) {
  Fixture f = make({{"search", kSearch}, {"note", kNote}, {"shape", kShape}}, 2);
  std::map<std::string, ordered_json> schemas;
  for (const auto& s : f.specs) schemas[s.name] = s.parameters;
  std::mt19937 rng(7);
  std::vector<uint64_t> bits;
  std::map<std::string, int> seen;
  int with_lt = 0;
  for (int walk = 0; walk < 150; walk++) {
    Matcher m(f.cg, {1});
    bits.assign(m.mask_words(), 0);
    std::string text;
    for (int step = 0; step < 3000; step++) {
      m.fill_mask(bits.data());
      std::vector<int32_t> allowed, long_tokens;
      for (int32_t t = 0; t < f.cg->vocab_size(); t++)
        if (test_bit(bits.data(), t)) {
          allowed.push_back(t);
          if (f.cg->vocab().bytes(t).size() > 1) long_tokens.push_back(t);
        }
      ASSERT_FALSE(allowed.empty()) << text;
      int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      if (!long_tokens.empty() && rng() % 3 == 0)  // markers and words more often than bytes
        t = long_tokens[std::uniform_int_distribution<size_t>(0, long_tokens.size() - 1)(rng)];
      if (test_bit(bits.data(), 1) && rng() % 2 == 0) t = 1;
      ASSERT_TRUE(m.accept(t));
      if (t == 1) break;
      text += f.cg->vocab().bytes(t);
    }
    ASSERT_TRUE(m.is_terminated()) << text;
    std::string content;
    auto calls = parse(f.tools, text, &content);
    SCOPED_TRACE(text);
    EXPECT_EQ(content, "");
    ASSERT_GE(calls.size(), 1u);
    ASSERT_LE(calls.size(), 2u);
    for (const auto& c : calls) {
      ASSERT_TRUE(schemas.count(c.name)) << c.name;
      seen[c.name]++;
      if (c.name == "search" && c.arguments["query"].get<std::string>().find("</") != std::string::npos)
        with_lt++;
      EXPECT_TRUE(schema_check::valid(c.arguments, schemas[c.name], schemas[c.name]))
          << c.name << " " << c.arguments.dump();
    }
  }
  for (const char* name : {"search", "note", "shape"}) EXPECT_GT(seen[name], 5) << name;
  EXPECT_GT(with_lt, 0);  // raw values did come near the markers
}

TEST(KeyValueToolCalls, ValuesOfEveryKindReadBackExactly) {
  Fixture f = make({{"note", kNote}, {"shape", kShape}});
  const std::string text = call("note", {{"text", "a b"},
                                         {"tags", "[\"x\"]"},
                                         {"due", "null"},
                                         {"score", "1"},
                                         {"meta", "{\"k\": \"\\u003c\"}"}}) +
                           call("shape", {{"shape", "{\"kind\":\"square\",\"side\":4}"}, {"label", "null"}});
  ASSERT_TRUE(accepts(f, text));
  auto calls = parse(f.tools, text);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].arguments, ordered_json::parse(R"({"text":"a b","tags":["x"],"due":null,"score":1,
                                                        "meta":{"k":"<"}})"));
  EXPECT_EQ(calls[1].arguments, ordered_json::parse(R"({"shape":{"kind":"square","side":4},"label":null})"));
}

void refused(const char* params, const std::string& why, const std::string& name = "t") {
  SCOPED_TRACE(params);
  try {
    tool_call_grammar({{name, ordered_json::parse(params)}}, kGlmText, 1);
    ADD_FAILURE() << "not refused";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(KeyValueToolCalls, SchemasTheParserCannotReadBackAreRefused) {
  refused(R"({"type":"object","properties":{"a":{"type":["string","integer"]}}})", "cannot be told apart");
  refused(R"({"type":"object","properties":{"a":{}}})", "needs a declared \"type\"");
  refused(R"({"type":"object","properties":{"a":{"anyOf":[{"type":"integer"},{"enum":["x"]}]}}})",
          "declared type does not name");
  refused(R"({"type":"object","properties":{"a":{"type":"string","pattern":"^[a-z]+$"}}})", "read");
  refused(R"({"type":"object","properties":{"a b ":{"type":"string"}}})", "parameter name");
  refused(R"({"anyOf":[{"type":"object"}]})", "anyOf");
  refused(R"({"type":"object","properties":{"a":{"type":"string"}},"required":["b"]})", "\"b\"");
  refused(R"({"type":"object"})", "tool name", "bad name");
  // Accepted: what the parser reads back exactly.
  for (const char* ok :
       {R"({"type":"object","properties":{"a":{"enum":["x", 1, null]}}})",
        R"({"type":"object","properties":{"a":{"$ref":"#/$defs/P"}},"$defs":{"P":{"type":"object"}}})",
        R"({"type":"object","properties":{"a":{"type":"string","pattern":"^[a-z]{5,}$"}}})",
        R"({"type":"object","properties":{"a":{"type":"string","format":"date"}}})",
        R"({"type":"object","properties":{"a":{"type":["integer","null"]}}})", "null"})
    EXPECT_NO_THROW(tool_call_grammar({{"t", ordered_json::parse(ok)}}, kGlmText, 1)) << ok;
}

}  // namespace
