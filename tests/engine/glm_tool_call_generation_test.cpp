// Required tool calls in GLM-4.7's syntax through the real generation loop with the GLM-4.7-Flash fixture
// model (random weights: only the grammar makes its output a tool call): every output parses with the GLM-4.7
// chat parser into calls of the allowed tools whose arguments validate against their schemas.
#include <gtest/gtest.h>

#include "chat/parser.h"
#include "engine/generator.h"
#include "formats/model_source.h"
#include "grammar/json_schema.h"
#include "grammar/schema_check.h"
#include "models/loader.h"
#include "test_device.h"
#include "tokenizer/tokenizer.h"

namespace vatic {
namespace {

namespace fs = std::filesystem;

struct Glm {
  std::unique_ptr<LanguageModel> lm;
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<const grammar::TokenVocab> vocab;
};

Glm& glm() {
  static Glm g = [] {
    const fs::path dir = fs::path(VATIC_FIXTURES_DIR) / "models" / "glm4-moe-lite-tiny";
    Glm x;
    x.lm = load_language_model(ModelSource::from_directory(dir), test_device());
    x.tok = std::make_unique<Tokenizer>(Tokenizer::load(dir));
    x.vocab = std::make_shared<grammar::TokenVocab>(
        grammar::TokenVocab::from_tokenizer(*x.tok, x.lm->info().vocab_size));
    return x;
  }();
  return g;
}

// Strings are bounded so the random model finishes its values.
const char* kWeather = R"({"type":"object","properties":{
  "city":{"type":"string","minLength":1,"maxLength":10},
  "unit":{"type":"string","enum":["celsius","fahrenheit"]},
  "days":{"type":"integer","minimum":1,"maximum":7},
  "note":{"anyOf":[{"type":"string","maxLength":6},{"type":"null"}]}},
  "required":["city","unit"],"additionalProperties":false})";
const char* kDraw = R"({"type":"object","properties":{
  "shape":{"oneOf":[
    {"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number","minimum":0,"maximum":5}},
     "required":["kind","r"],"additionalProperties":false},
    {"type":"object","properties":{"kind":{"const":"rect"},"w":{"type":"integer","minimum":1,"maximum":9},
     "h":{"type":"integer","minimum":1,"maximum":9}},"required":["kind","w","h"],"additionalProperties":false}]},
  "filled":{"type":"boolean"},
  "tags":{"type":"array","items":{"type":"string","maxLength":4},"maxItems":2}},
  "required":["shape","filled"]})";

TEST(GlmToolCallGeneration, GreedyAndSampledCallsParseAndValidate) {
  Glm& m = glm();
  std::vector<grammar::ToolSpec> specs = {{"get_weather", ordered_json::parse(kWeather)},
                                          {"draw", ordered_json::parse(kDraw)}};
  std::vector<chat::Tool> tools;
  for (const auto& s : specs) {
    chat::Tool t;
    t.name = s.name;
    t.parameters = s.parameters;
    tools.push_back(t);
  }
  const grammar::ToolCallSyntax syn{
      "<tool_call>", "", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};
  auto cg = std::make_shared<grammar::CompiledGrammar>(
      grammar::compile(grammar::tool_call_grammar(specs, syn, 2)), m.vocab);
  std::map<std::string, int> seen;
  for (int64_t seed = 0; seed <= 6; seed++) {
    Generator gen(*m.lm, nullptr);
    GenerateOptions o;
    o.max_tokens = 2000;
    o.grammar = cg;
    o.sampling.temperature = seed == 0 ? 0.0f : 1.0f;
    o.sampling.seed = seed;
    auto st = m.lm->new_state();
    std::vector<int32_t> ids;
    GenerateStats stats = gen.generate(*st, m.tok->encode("Use a tool.", true), o, [&](const TokenEvent& e) {
      ids.push_back(e.token);
      return true;
    });
    const std::string text = m.tok->decode(ids);
    SCOPED_TRACE(text);
    EXPECT_EQ(stats.done_reason, "stop");
    chat::ParserOptions po;
    po.think = false;
    po.starts_in_thinking = false;
    po.tools = tools;
    auto parser = chat::make_parser("glm-4.7", po);
    chat::ParsedChunk out = parser->feed(text);
    out.append(parser->finish());
    EXPECT_EQ(out.content, "");
    ASSERT_GE(out.tool_calls.size(), 1u);
    for (const auto& c : out.tool_calls) {
      const auto& schema = c.name == "draw" ? specs[1].parameters : specs[0].parameters;
      ASSERT_TRUE(c.name == "draw" || c.name == "get_weather") << c.name;
      seen[c.name]++;
      EXPECT_TRUE(schema_check::valid(c.arguments, schema, schema)) << c.name << " " << c.arguments.dump();
      EXPECT_TRUE(c.arguments.contains(c.name == "draw" ? "shape" : "city")) << c.arguments.dump();
    }
  }
  EXPECT_GT(seen["draw"] + seen["get_weather"], 6);
}

}  // namespace
}  // namespace vatic
