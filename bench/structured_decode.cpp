// Decode speed with and without a grammar on a model pair (default: the bundled demo pair, models/demo).
//
//   bench_structured_decode [TARGET_DIR [DRAFT_DIR [TOKENS [REPS]]]]
//
// For no grammar, a JSON schema whose output is mostly free text (one string of 900 to 1000 characters) and one
// that is mostly structure (at least 12 objects of short fields, enums, numbers), it decodes TOKENS tokens (default 256; the structured one may end
// sooner) with plain decoding and with speculation (adaptive depth), REPS times (default 3), and prints the best
// tokens per second of each, and the constrained / unconstrained ratio.
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "engine/generator.h"
#include "formats/model_source.h"
#include "grammar/json_schema.h"
#include "models/loader.h"
#include "tokenizer/tokenizer.h"

using namespace vatic;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  fs::path src = fs::read_symlink("/proc/self/exe").parent_path().parent_path().parent_path();
  fs::path target = argc > 1 ? fs::path(argv[1]) : src / "models/demo/gemma4-demo";
  fs::path draft = argc > 2 ? fs::path(argv[2]) : src / "models/demo/gemma4-demo-assistant";
  const int tokens = argc > 3 ? std::atoi(argv[3]) : 256;
  const int reps = argc > 4 ? std::max(1, std::atoi(argv[4])) : 3;
  if (!fs::exists(target)) {
    std::fprintf(stderr, "model not found: %s\n", target.c_str());
    return 1;
  }
  auto lm = load_language_model(ModelSource::from_directory(target));
  auto ds = ModelSource::from_directory(draft);
  auto drafter = load_drafter(*lm, &ds);
  Tokenizer tok = Tokenizer::load(target);
  auto vocab = std::make_shared<grammar::TokenVocab>(grammar::TokenVocab::from_tokenizer(tok, lm->info().vocab_size));
  const std::vector<int32_t> prompt = tok.encode("It is a truth universally acknowledged, that", true);

  struct Case {
    const char* name;
    std::string schema;
  };
  const std::vector<Case> cases = {
      {"unconstrained", ""},
      {"free-text schema",
       R"({"type":"object","properties":{"story":{"type":"string","minLength":900,"maxLength":1000}},"required":["story"]})"},
      {"structured schema",
       R"({"type":"array","items":{"type":"object","properties":{"name":{"type":"string","maxLength":12},
          "age":{"type":"integer","minimum":0,"maximum":99},"mood":{"enum":["happy","vexed"]},"rich":{"type":"boolean"}},
          "required":["name","age","mood","rich"],"additionalProperties":false},"minItems":12})"},
  };
  // Rounds interleave the cases, so a change in the machine's load touches them all alike.
  std::vector<std::shared_ptr<const grammar::CompiledGrammar>> grammars;
  for (const auto& c : cases) {
    std::shared_ptr<const grammar::CompiledGrammar> g;
    if (!c.schema.empty()) {
      auto cg = std::make_shared<grammar::CompiledGrammar>(
          grammar::compile(grammar::json_schema_grammar(ordered_json::parse(c.schema))), vocab);
      cg->precompute_all();
      g = cg;
    }
    grammars.push_back(g);
  }
  std::vector<std::array<double, 2>> best(cases.size(), {0, 0});
  std::vector<std::array<GenerateStats, 2>> keep(cases.size());
  for (int r = 0; r < reps; r++)
    for (size_t ci = 0; ci < cases.size(); ci++)
      for (int spec = 0; spec < 2; spec++) {
        Generator gen(*lm, spec ? drafter.get() : nullptr);
        GenerateOptions o;
        o.max_tokens = tokens;
        o.ignore_eos = cases[ci].schema.empty();
        o.grammar = grammars[ci];
        auto st = lm->new_state();
        GenerateStats s = gen.generate(*st, prompt, o, [](const TokenEvent&) { return true; });
        const double tps = s.decode_seconds > 0 ? double(s.generated) / s.decode_seconds : 0;
        if (tps > best[ci][spec]) best[ci][spec] = tps, keep[ci][spec] = s;
      }
  std::printf("%-18s %-12s %8s %10s %8s %6s\n", "case", "decoding", "tokens", "tok/s", "ratio", "accept");
  for (size_t ci = 0; ci < cases.size(); ci++)
    for (int spec = 0; spec < 2; spec++)
      std::printf("%-18s %-12s %8lld %10.1f %7.1f%% %6.2f\n", cases[ci].name, spec ? "speculative" : "plain",
                  static_cast<long long>(keep[ci][spec].generated), best[ci][spec],
                  100.0 * best[ci][spec] / std::max(best[0][spec], 1e-9), keep[ci][spec].acceptance_length());
  return 0;
}
