// oneOf is compiled as anyOf, so it is accepted only when no value can match two alternatives; otherwise the
// schema is refused with a message naming oneOf and why.
#include <gtest/gtest.h>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "util/error.h"

using namespace vatic;
using namespace vatic::grammar;

namespace {

// Every printable ASCII byte a token.
bool accepts(const std::string& schema, const std::string& text) {
  std::vector<std::string> vocab = {"", ""};
  for (int c = 32; c < 127; c++) vocab.push_back(std::string(1, static_cast<char>(c)));
  auto v = std::make_shared<TokenVocab>(TokenVocab::from_bytes(vocab));
  auto cg = std::make_shared<CompiledGrammar>(compile(json_schema_grammar(ordered_json::parse(schema))), v);
  Matcher m(cg, {1});
  for (char c : text)
    if (!m.accept(static_cast<int32_t>(c - 32 + 2))) return false;
  return m.is_complete();
}

std::string refusal(const std::string& schema) {
  try {
    json_schema_grammar(ordered_json::parse(schema));
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

TEST(OneOf, ProvablyExclusiveAlternativesAreAccepted) {
  const char* discriminated = R"({"oneOf":[
    {"type":"object","properties":{"kind":{"const":"cat"},"lives":{"type":"integer"}},"required":["kind","lives"]},
    {"type":"object","properties":{"kind":{"enum":["dog","wolf"]},"bark":{"type":"boolean"}},"required":["kind"]}],
    "discriminator":{"propertyName":"kind"}})";
  EXPECT_TRUE(accepts(discriminated, R"({"kind":"cat","lives":9})"));
  EXPECT_TRUE(accepts(discriminated, R"({"kind":"wolf","bark":true})"));
  EXPECT_FALSE(accepts(discriminated, R"({"kind":"cat","bark":true})"));
  // Through $ref, as generators write discriminated unions.
  const char* refs = R"({"$defs":{
    "A":{"type":"object","properties":{"t":{"const":"a"},"x":{"type":"string"}},"required":["t"]},
    "B":{"type":"object","properties":{"t":{"const":"b"}},"required":["t"]}},
    "oneOf":[{"$ref":"#/$defs/A"},{"$ref":"#/$defs/B"}]})";
  EXPECT_TRUE(accepts(refs, R"({"t":"b"})"));
  EXPECT_TRUE(accepts(refs, R"({"t":"a","x":"y"})"));
  // A discriminator one side requires and the other declares with other values.
  const char* half = R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]},
                                  {"type":"object","properties":{"k":{"const":"b"},"x":{"type":"integer"}}}]})";
  EXPECT_TRUE(accepts(half, R"({"k":"a"})"));
  EXPECT_TRUE(accepts(half, R"({"x":1})"));
  EXPECT_FALSE(accepts(half, R"({"k":"c"})"));
  // Untagged unions: each side requires a property the other never writes (pydantic without a discriminator),
  // or one the other forbids.
  const char* untagged = R"({"oneOf":[
    {"type":"object","properties":{"name":{"type":"string"},"meows":{"type":"integer"}},"required":["name","meows"]},
    {"type":"object","properties":{"name":{"type":"string"},"barks":{"type":"boolean"}},"required":["name","barks"]}]})";
  EXPECT_TRUE(accepts(untagged, R"({"name":"x","barks":true})"));
  EXPECT_FALSE(accepts(untagged, R"({"name":"x"})"));
  EXPECT_EQ(refusal(R"({"oneOf":[{"type":"object","required":["a"],"additionalProperties":{"type":"integer"}},
                                 {"type":"object","properties":{"b":{}},"additionalProperties":false}]})"),
            "");
  // Disjoint number ranges.
  EXPECT_TRUE(accepts(R"({"oneOf":[{"type":"integer","maximum":0},{"type":"integer","minimum":1}]})", "-3"));
  EXPECT_TRUE(
      accepts(R"({"oneOf":[{"type":"number","exclusiveMaximum":0},{"type":"number","minimum":0}]})", "0"));
  // Different kinds of value.
  const char* kinds = R"({"oneOf":[{"type":"integer"},{"type":"string"},{"type":"null"},
                                   {"type":"array","items":{"type":"integer"}}]})";
  for (const char* ok : {"1", R"("a")", "null", "[1,2]"}) EXPECT_TRUE(accepts(kinds, ok)) << ok;
  EXPECT_FALSE(accepts(kinds, "1.5"));
  EXPECT_TRUE(accepts(R"({"oneOf":[{"type":"string","maxLength":3},{"type":"null"}]})", "null"));
  // Disjoint literal sets.
  EXPECT_TRUE(accepts(R"({"oneOf":[{"enum":["a","b"]},{"const":"c"},{"enum":[1,2]}]})", R"("c")"));
  EXPECT_TRUE(accepts(R"({"oneOf":[{"enum":["a","b"]},{"type":"integer"}]})", "7"));
}

TEST(OneOf, OverlappingAlternativesAreRefusedSayingWhy) {
  struct Case {
    const char* schema;
    const char* why;
  };
  const Case cases[] = {
      {R"({"oneOf":[{"type":"number"},{"type":"integer"}]})", "both admit integers"},
      {R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]})", "both admit strings"},
      {R"({"oneOf":[{"type":["string","null"]},{"type":"null"}]})", "both admit null"},
      {R"({"oneOf":[{"enum":["a","b"]},{"enum":["b","c"]}]})", "the same value"},
      {R"({"oneOf":[{"const":"a"},{"type":"string"}]})", "both admit strings"},
      {R"({"oneOf":[{"type":"object","properties":{"a":{"type":"string"}}},
                    {"type":"object","properties":{"b":{"type":"string"}}}]})",
       "objects"},
      // The other side may write any property, so it may write what the first one requires.
      {R"({"oneOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},
                    {"type":"object","properties":{"b":{"type":"string"}},"required":["b"],
                     "additionalProperties":true}]})",
       "objects"},
      {R"({"oneOf":[{"type":"integer","maximum":1},{"type":"integer","minimum":1}]})", "both admit integers"},
      {R"({"oneOf":[{"type":"number","maximum":1},{"type":"number","exclusiveMinimum":0}]})", "integers"},
      {R"({"oneOf":[{"type":"integer"},{}]})", "integers"},
  };
  for (const auto& c : cases) {
    const std::string why = refusal(c.schema);
    EXPECT_NE(why.find("\"oneOf\""), std::string::npos) << c.schema << ": " << why;
    EXPECT_NE(why.find(c.why), std::string::npos) << c.schema << ": " << why;
    EXPECT_NE(why.find("alternatives 0 and 1"), std::string::npos) << why;
  }
  // anyOf with the same alternatives is fine: any match is valid.
  EXPECT_EQ(refusal(R"({"anyOf":[{"type":"number"},{"type":"integer"}]})"), "");
  // Nested: the pointer says where.
  EXPECT_NE(
      refusal(R"({"type":"object","properties":{"v":{"oneOf":[{"type":"number"},{"type":"integer"}]}}})")
          .find("#/properties/v"),
      std::string::npos);
}

}  // namespace
