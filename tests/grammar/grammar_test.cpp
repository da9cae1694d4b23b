#include <gtest/gtest.h>

#include <random>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "util/error.h"

using namespace vatic;
using namespace vatic::grammar;

namespace {

// A small vocabulary with tokens that span several JSON terminals.
std::vector<std::string> small_vocab() {
  std::vector<std::string> v = {
      "",     "",     "{",     "}",       "[",      "]",      "\"",   ",",  ":",   " ",    "\n",     "  ",
      "\",",  "\":",  "\"}",   "{\"",     "\": \"", "\", \"", "\"]",  "],", "},",  "true", "false",  "null",
      "0",    "1",    "2",     "3",       "9",      "10",     "-",    ".",  "e",   "a",    "b",      "c",
      "ab",   "abc",  "name",  "age",     "\\",     "\\n",    "\\\"", "n",  "u",   "x",    "é",      "\xC3",
      "\xA9", "2024", "-0",    "12",      "5.",     "T",      "Z",    "@",  "com", "\": ", "\"name", "\"age",
      "tags", "red",  "green", "\"red\"", " {",     "}\n",    "\t"};
  for (char c = 'a'; c <= 'z'; c++) v.push_back(std::string(1, c));
  for (char c = '0'; c <= '9'; c++) v.push_back(std::string(1, c));
  for (const char* s : {"-", ":", ".", "@", "+", "_", "F", "f", "A", "E", "D", "8"}) v.push_back(s);
  return v;
}

std::shared_ptr<CompiledGrammar> compile_schema(const std::string& schema,
                                                const std::vector<std::string>& vocab) {
  auto v = std::make_shared<TokenVocab>(TokenVocab::from_bytes(vocab));
  Grammar g = schema == "json" ? json_object_grammar() : json_schema_grammar(ordered_json::parse(schema));
  return std::make_shared<CompiledGrammar>(compile(g), v);
}

bool accepts_text(Matcher& m, const std::string& text, const TokenVocab& v) {
  // Feeds `text` one byte token at a time (the vocabulary holds every byte used in the tests).
  int n = 0;
  for (char c : text) {
    int32_t id = -1;
    for (int32_t i = 0; i < v.size(); i++)
      if (v.bytes(i) == std::string(1, c)) id = i;
    if (id < 0 || !m.accept(id)) {
      m.rollback(n);
      return false;
    }
    n++;
  }
  bool ok = m.is_complete();
  m.rollback(n);
  return ok;
}

// Every bit of the mask agrees with stepping the token directly.
void check_mask(Matcher& m) {
  std::vector<uint64_t> bits(m.mask_words());
  m.fill_mask(bits.data());
  for (int32_t t = 0; t < m.grammar().vocab_size(); t++)
    ASSERT_EQ(test_bit(bits.data(), t), m.allows(t))
        << "token " << t << " '" << m.grammar().vocab().bytes(t) << "'";
}

std::string random_walk(Matcher& m, std::mt19937& rng, int max_tokens, bool check) {
  std::string out;
  std::vector<uint64_t> bits(m.mask_words());
  for (int i = 0; i < max_tokens; i++) {
    if (check) check_mask(m);
    m.fill_mask(bits.data());
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < m.grammar().vocab_size(); t++)
      if (test_bit(bits.data(), t)) allowed.push_back(t);
    EXPECT_FALSE(allowed.empty());
    if (allowed.empty()) break;
    int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    // Finish sooner: take the stop token when allowed, most of the time.
    if (test_bit(bits.data(), 1) && rng() % 4 != 0) t = 1;
    EXPECT_TRUE(m.accept(t));
    if (t == 1) break;
    out += m.grammar().vocab().bytes(t);
  }
  return out;
}

}  // namespace

TEST(Grammar, JsonModeAcceptsObjectsOnly) {
  auto g = compile_schema("json", small_vocab());
  Matcher m(g, {1});
  EXPECT_TRUE(accepts_text(m, "{}", g->vocab()));
  EXPECT_TRUE(accepts_text(m, "{\"a\": [1, 2.5e3, true, null, \"x\\n\"]}", g->vocab()));
  EXPECT_TRUE(accepts_text(m, "{\n  \"a\": {}\n}", g->vocab()));
  EXPECT_FALSE(accepts_text(m, "[]", g->vocab()));
  EXPECT_FALSE(accepts_text(m, "{\"a\":}", g->vocab()));
  EXPECT_FALSE(accepts_text(m, "{\"a\": 01}", g->vocab()));
  EXPECT_FALSE(accepts_text(m, "{} ", g->vocab()));
}

TEST(Grammar, StopTokenOnlyWhenComplete) {
  auto g = compile_schema("json", small_vocab());
  Matcher m(g, {1});
  EXPECT_FALSE(m.allows(1));
  ASSERT_TRUE(m.accept(2));  // {
  ASSERT_TRUE(m.accept(3));  // }
  EXPECT_TRUE(m.is_complete());
  EXPECT_TRUE(m.allows(1));
  std::vector<uint64_t> bits(m.mask_words());
  m.fill_mask(bits.data());
  for (int32_t t = 0; t < g->vocab_size(); t++) EXPECT_EQ(test_bit(bits.data(), t), t == 1) << t;
  ASSERT_TRUE(m.accept(1));
  EXPECT_TRUE(m.is_terminated());
  m.rollback(2);
  EXPECT_FALSE(m.is_complete());
  EXPECT_TRUE(m.allows(3));
}

TEST(Grammar, MultiTerminalTokens) {
  auto g =
      compile_schema(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
                             "required":["name","age"]})",
                     small_vocab());
  Matcher m(g, {1});
  auto id = [&](const std::string& s) {
    for (int32_t i = 0; i < g->vocab_size(); i++)
      if (g->vocab().bytes(i) == s) return i;
    ADD_FAILURE() << "no token " << s;
    return -1;
  };
  for (const char* t : {"{\"", "name", "\": \"", "ab", "\",", " ", "\"age", "\": ", "12", "}"}) {
    check_mask(m);
    ASSERT_TRUE(m.accept(id(t))) << t;
  }
  EXPECT_TRUE(m.is_complete());
  m.rollback(10);
  EXPECT_FALSE(m.allows(id("\"age")));  // name comes first and is required
  ASSERT_TRUE(m.accept(id("{\"")));
  EXPECT_FALSE(m.allows(id("age")));
}

TEST(Grammar, MasksMatchDirectSteppingOnRandomWalks) {
  const std::vector<std::string> schemas = {
      "json",
      R"({"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"enum":["red","green"]},
         "minItems":1,"maxItems":3},"n":{"type":["integer","null"]}},"required":["name"]})",
      R"({"type":"array","prefixItems":[{"type":"boolean"},{"const":12}],"items":false,"minItems":1})",
      R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":-3,"maximum":120},
         "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"})",
      R"({"type":"string","pattern":"^[a-c]+-\\d{2,3}$"})",
      R"({"type":"string","format":"date"})",
      R"({"type":"string","format":"email"})",
      R"({"type":"number","minimum":-2,"exclusiveMaximum":10})",
      R"({"type":"string","minLength":2,"maxLength":4})",
      R"({"anyOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},{"type":"array"}]})",
  };
  std::mt19937 rng(7);
  for (const auto& s : schemas) {
    SCOPED_TRACE(s);
    auto g = compile_schema(s, small_vocab());
    for (int run = 0; run < 6; run++) {
      Matcher m(g, {1});
      random_walk(m, rng, 40, true);
    }
  }
}

TEST(Grammar, RollbackRestoresMasks) {
  auto g = compile_schema("json", small_vocab());
  Matcher m(g, {1});
  std::mt19937 rng(3);
  std::vector<std::vector<uint64_t>> masks;
  std::vector<uint64_t> bits(m.mask_words());
  std::vector<int32_t> taken;
  for (int i = 0; i < 20 && !m.is_complete(); i++) {
    m.fill_mask(bits.data());
    masks.push_back(bits);
    std::vector<int32_t> allowed;
    for (int32_t t = 2; t < g->vocab_size(); t++)
      if (test_bit(bits.data(), t)) allowed.push_back(t);
    int32_t t = allowed[rng() % allowed.size()];
    ASSERT_TRUE(m.accept(t));
    taken.push_back(t);
  }
  for (size_t i = taken.size(); i-- > 0;) {
    m.rollback(1);
    m.fill_mask(bits.data());
    EXPECT_EQ(bits, masks[i]) << "after rolling back to " << i;
  }
}

TEST(Grammar, PatternsAndFormats) {
  auto g = compile_schema(R"({"type":"string","pattern":"^[a-c]+-\\d{2,3}$"})", small_vocab());
  Matcher m(g, {1});
  EXPECT_TRUE(accepts_text(m, "\"ab-12\"", g->vocab()));
  EXPECT_TRUE(accepts_text(m, "\"c-999\"", g->vocab()));
  EXPECT_FALSE(accepts_text(m, "\"ab-1\"", g->vocab()));
  EXPECT_FALSE(accepts_text(m, "\"x-12\"", g->vocab()));
  auto d = compile_schema(R"({"type":"string","format":"date"})", small_vocab());
  Matcher md(d, {1});
  EXPECT_TRUE(accepts_text(md, "\"2024-02-29\"", d->vocab()));
  EXPECT_FALSE(accepts_text(md, "\"2023-02-29\"", d->vocab()));
  EXPECT_FALSE(accepts_text(md, "\"2023-04-31\"", d->vocab()));
  EXPECT_TRUE(accepts_text(md, "\"2000-02-29\"", d->vocab()));
  EXPECT_FALSE(accepts_text(md, "\"1900-02-29\"", d->vocab()));
  auto u = compile_schema(R"({"type":"string","pattern":"a.c"})", small_vocab());
  Matcher mu(u, {1});
  EXPECT_TRUE(accepts_text(mu, "\"xxabcxx\"", u->vocab()));  // unanchored, as JSON Schema says
  EXPECT_TRUE(accepts_text(mu, "\"a\\\"c\"", u->vocab()));   // a quote inside is escaped
  EXPECT_FALSE(accepts_text(mu, "\"ac\"", u->vocab()));
}

TEST(Grammar, ArrayCounts) {
  auto g = compile_schema(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2})",
                          small_vocab());
  Matcher m(g, {1});
  EXPECT_FALSE(accepts_text(m, "[]", g->vocab()));
  EXPECT_FALSE(accepts_text(m, "[ ]", g->vocab()));
  EXPECT_TRUE(accepts_text(m, "[1]", g->vocab()));
  EXPECT_TRUE(accepts_text(m, "[1, 2]", g->vocab()));
  EXPECT_FALSE(accepts_text(m, "[1, 2, 3]", g->vocab()));
}

TEST(Grammar, IntegerAndNumberRanges) {
  auto g = compile_schema(R"({"type":"integer","minimum":-12,"exclusiveMaximum":105})", small_vocab());
  Matcher m(g, {1});
  for (int v = -30; v <= 130; v++)
    EXPECT_EQ(accepts_text(m, std::to_string(v), g->vocab()), v >= -12 && v < 105) << v;
  auto n = compile_schema(R"({"type":"number","exclusiveMinimum":0,"maximum":3})", small_vocab());
  Matcher mn(n, {1});
  EXPECT_FALSE(accepts_text(mn, "0", n->vocab()));
  EXPECT_FALSE(accepts_text(mn, "0.0", n->vocab()));
  EXPECT_TRUE(accepts_text(mn, "0.01", n->vocab()));
  EXPECT_TRUE(accepts_text(mn, "3", n->vocab()));
  EXPECT_TRUE(accepts_text(mn, "3.00", n->vocab()));
  EXPECT_FALSE(accepts_text(mn, "3.01", n->vocab()));
  EXPECT_FALSE(accepts_text(mn, "-1", n->vocab()));
  EXPECT_TRUE(accepts_text(mn, "2.999", n->vocab()));
}

TEST(Grammar, RefusesWhatItCannotHonour) {
  auto refused = [](const std::string& schema, const std::string& word) {
    try {
      json_schema_grammar(ordered_json::parse(schema));
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted " << schema;
  };
  refused(R"({"type":"object","patternProperties":{"^a":{}}})", "patternProperties");
  refused(R"({"type":"integer","multipleOf":3})", "multipleOf");
  refused(R"({"not":{"type":"string"}})", "not");
  refused(R"({"type":"array","uniqueItems":true})", "uniqueItems");
  refused(R"({"type":"string","format":"uri"})", "uri");
  refused(R"({"type":"string","pattern":"(?=a)b"})", "lookaround");
  refused(R"({"type":"string","pattern":"(a)\\1"})", "\\1");
  refused(R"({"type":"numbr"})", "numbr");
  refused(R"({"$ref":"#/$defs/missing"})", "missing");
  refused(R"({"type":"number","minimum":0.5})", "minimum");
  refused(R"({"type":"array","minItems":3,"maxItems":2})", "maxItems");
  refused(R"({"if":{"type":"string"},"then":{}})", "if");
  refused(R"([1,2])", "object or a boolean");
  refused(R"({"allOf":[{"type":"string"},{"minLength":2}]})", "allOf");
  std::string deep = R"({"type":"string"})";
  for (int i = 0; i < 200; i++) deep = R"({"type":"array","items":)" + deep + "}";
  refused(deep, "deeper");
}

TEST(Grammar, RecursionWithoutOutputIsRefused) {
  auto v = std::make_shared<TokenVocab>(TokenVocab::from_bytes(small_vocab()));
  Grammar g =
      json_schema_grammar(ordered_json::parse(R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})"));
  EXPECT_THROW(CompiledGrammar(compile(g), v), InvalidInput);
}

TEST(Grammar, ToolCallsWithSpecialTokenMarkers) {
  std::vector<std::string> vocab = small_vocab();
  const int32_t open = static_cast<int32_t>(vocab.size()), close = open + 1;
  vocab.push_back(TokenVocab::special_bytes("<|tool_call>"));
  vocab.push_back(TokenVocab::special_bytes("<tool_call|>"));
  for (const char* t :
       {"call", ":", "call:", "get", "_", "time", "tz", "U", "T", "C", "UTC", "<|tool_call>", "<"})
    vocab.push_back(t);
  auto v = std::make_shared<TokenVocab>(TokenVocab::from_bytes(vocab));
  Grammar g = tool_call_grammar(
      {{"get_time",
        ordered_json::parse(R"({"type":"object","properties":{"tz":{"enum":["UTC"]}},"required":["tz"]})")}},
      {TokenVocab::special_bytes("<|tool_call>"), "call:", TokenVocab::special_bytes("<tool_call|>")}, 2);
  auto cg = std::make_shared<CompiledGrammar>(compile(g), v);
  Matcher m(cg, {1});
  auto id = [&](const std::string& s) {
    for (int32_t i = 0; i < cg->vocab_size(); i++)
      if (cg->vocab().bytes(i) == s) return i;
    ADD_FAILURE() << s;
    return -1;
  };
  check_mask(m);
  EXPECT_FALSE(m.allows(id("<|tool_call>")));  // the marker is the special token, not its text
  EXPECT_FALSE(m.allows(id("<")));
  ASSERT_TRUE(m.accept(open));
  for (const char* t : {"call:", "get", "_", "time", "{\"", "tz", "\":", "\"", "UTC", "\"}"}) {
    check_mask(m);
    ASSERT_TRUE(m.accept(id(t))) << t;
  }
  EXPECT_FALSE(m.allows(1));
  ASSERT_TRUE(m.accept(close));
  EXPECT_TRUE(m.is_complete());
  EXPECT_TRUE(m.allows(open));  // a second call may follow
  check_mask(m);
}
