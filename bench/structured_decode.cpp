// Decode speed with and without a grammar on a model pair (default: the bundled demo pair, models/demo).
//
//   bench_structured_decode [TARGET_DIR [DRAFT_DIR [TOKENS [REPS]]]]
//
// For no grammar, a JSON schema whose output is mostly free text (one string of 900 to 1000 characters) and
// one that is mostly structure (at least 12 objects of short fields, enums, numbers), it decodes TOKENS
// tokens (default 256; the structured one may end sooner) with plain decoding and with speculation (depth 3),
// REPS times (default 3), and prints the best tokens per second of each, and the constrained / unconstrained
// ratio. Speculation drafts a fixed 3 tokens a round.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "backend/backend.h"
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
  auto lm = load_language_model(ModelSource::from_directory(target), default_device());
  auto ds = ModelSource::from_directory(draft);
  auto drafter = load_drafter(*lm, &ds);
  Tokenizer tok = Tokenizer::load(target);
  auto vocab =
      std::make_shared<grammar::TokenVocab>(grammar::TokenVocab::from_tokenizer(tok, lm->info().vocab_size));
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
  std::vector<std::vector<int32_t>> produced(cases.size());
  std::vector<std::array<GenerateStats, 2>> keep(cases.size());
  for (int r = 0; r < reps; r++)
    for (size_t ci = 0; ci < cases.size(); ci++)
      for (int spec = 0; spec < 2; spec++) {
        Generator gen(*lm, spec ? drafter.get() : nullptr);
        GenerateOptions o;
        o.max_tokens = tokens;
        o.ignore_eos = cases[ci].schema.empty();
        o.grammar = grammars[ci];
        o.draft_depth = spec ? 3 : 0;  // fixed: the adaptive policy follows the machine's load, which would
                                       // blur the comparison
        auto st = lm->new_state();
        std::vector<int32_t> ids;
        GenerateStats s = gen.generate(*st, prompt, o, [&](const TokenEvent& e) {
          ids.push_back(e.token);
          return true;
        });
        if (!spec) produced[ci] = ids;
        const double tps = s.decode_seconds > 0 ? double(s.generated) / s.decode_seconds : 0;
        if (tps > best[ci][spec]) best[ci][spec] = tps, keep[ci][spec] = s;
      }
  std::printf("%-18s %-12s %8s %10s %8s %6s\n", "case", "decoding", "tokens", "tok/s", "ratio", "accept");
  for (size_t ci = 0; ci < cases.size(); ci++)
    for (int spec = 0; spec < 2; spec++)
      std::printf("%-18s %-12s %8lld %10.1f %7.1f%% %6.2f\n", cases[ci].name, spec ? "speculative" : "plain",
                  static_cast<long long>(keep[ci][spec].generated), best[ci][spec],
                  100.0 * best[ci][spec] / std::max(best[0][spec], 1e-9), keep[ci][spec].acceptance_length());

  // The grammar's own cost per token, free of the machine's load on the model: replay each constrained output
  // through a matcher and time mask + masked sampling against plain sampling of the same logits (greedy).
  const int64_t V = lm->info().vocab_size;
  std::vector<float> logits(V);
  for (int64_t i = 0; i < V; i++) logits[i] = static_cast<float>((i * 2654435761u) % 1000) / 100.0f;
  Sampler sampler(SamplerOptions{}, V);
  std::printf("\n%-18s %8s %14s %14s %12s\n", "case", "tokens", "plain sample", "grammar+sample", "overhead");
  for (size_t ci = 1; ci < cases.size(); ci++) {
    double plain = 1e30, masked = 1e30;
    for (int r = 0; r < reps; r++) {
      auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < produced[ci].size(); i++) sampler.distribution(logits.data());
      auto t1 = std::chrono::steady_clock::now();
      grammar::Matcher m(grammars[ci], lm->info().eos_ids);
      std::vector<uint64_t> mask(m.mask_words());
      for (int32_t t : produced[ci]) {
        m.fill_mask(mask.data());
        sampler.distribution(logits.data(), {}, mask.data());
        if (!m.accept(t)) break;
      }
      auto t2 = std::chrono::steady_clock::now();
      const double n = std::max<double>(1, produced[ci].size());
      plain = std::min(plain, std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
      masked = std::min(masked, std::chrono::duration<double, std::micro>(t2 - t1).count() / n);
    }
    std::printf("%-18s %8zu %11.1f us %11.1f us %9.1f us\n", cases[ci].name, produced[ci].size(), plain,
                masked, masked - plain);
  }
  return 0;
}
