// Token-mask cost of constrained decoding over a real vocabulary.
//
//   bench_grammar_mask [TOKENIZER_JSON] [ROUNDS]
//
// TOKENIZER_JSON defaults to the Gemma 3 tokenizer (262k tokens) that ctest fetches into
// <build>/.cache/tokenizers (tests/tokenizer/fetch_tokenizers.sh). For each schema the program times the
// vocabulary preprocessing (once), the schema compilation and node precomputation, then follows a document
// that satisfies the schema, tokenized by the tokenizer, and times fill_mask at every step (best of ROUNDS
// rounds, default 5, per step): p50, p99 and max.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

using namespace vatic;
using namespace vatic::grammar;
using Clock = std::chrono::steady_clock;

static double us_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  fs::path path = argc > 1 ? fs::path(argv[1])
                           : fs::read_symlink("/proc/self/exe").parent_path().parent_path() /
                                 ".cache/tokenizers/gemma3/tokenizer.json";
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  if (!fs::exists(path)) {
    std::fprintf(stderr, "tokenizer not found: %s (pass a tokenizer.json path)\n", path.c_str());
    return 1;
  }
  auto t0 = Clock::now();
  Tokenizer tok = Tokenizer::load(path);
  const double load_ms = us_since(t0) / 1000;
  t0 = Clock::now();
  auto vocab = std::make_shared<TokenVocab>(TokenVocab::from_tokenizer(tok, tok.vocab_size()));
  std::printf("tokenizer %s: %d tokens, load %.0f ms, grammar vocabulary %.0f ms\n", path.filename().c_str(),
              tok.vocab_size(), load_ms, us_since(t0) / 1000);

  struct Case {
    const char* name;
    std::string schema;  // "json" = JSON mode
    std::string doc;
  };
  std::vector<Case> cases = {
      {"json mode", "json",
       "{\n  \"title\": \"Pride and Prejudice\",\n  \"author\": \"Jane Austen\",\n  \"year\": 1813,\n  "
       "\"tags\": [\"novel\", "
       "\"romance\", \"classic\"],\n  \"rating\": 4.5,\n  \"characters\": [{\"name\": \"Elizabeth Bennet\", "
       "\"age\": 20}, "
       "{\"name\": \"Fitzwilliam Darcy\", \"age\": 28}]\n}"},
      {"person",
       R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
        "email":{"type":"string","format":"email"},"tags":{"type":"array","items":{"type":"string"},"maxItems":5}},
        "required":["name","age","email"],"additionalProperties":false})",
       "{\"name\": \"Elizabeth Bennet\", \"age\": 20, \"email\": \"lizzy@longbourn.org\", \"tags\": "
       "[\"witty\", \"proud\"]}"},
      {"tool call", R"({"type":"object","properties":{"location":{"type":"string","description":"City"},
        "unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14},
        "date":{"type":"string","format":"date"}},"required":["location","unit"]})",
       "{\"location\": \"San Francisco, CA\", \"unit\": \"celsius\", \"days\": 3, \"date\": \"2026-12-01\"}"},
      {"recursive tree", R"({"$defs":{"node":{"type":"object","properties":{"label":{"type":"string"},
        "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["label"]}},"$ref":"#/$defs/node"})",
       "{\"label\": \"root\", \"children\": [{\"label\": \"left\", \"children\": []}, {\"label\": "
       "\"right\"}]}"},
  };
  std::vector<int32_t> stops;
  if (auto e = tok.eos_id()) stops.push_back(*e);
  for (const auto& c : cases) {
    t0 = Clock::now();
    Grammar g =
        c.schema == "json" ? json_object_grammar() : json_schema_grammar(ordered_json::parse(c.schema));
    auto cg = std::make_shared<CompiledGrammar>(compile(g), vocab);
    const double compile_ms = us_since(t0) / 1000;
    t0 = Clock::now();
    cg->precompute_all();
    const double pre_ms = us_since(t0) / 1000;
    std::vector<int32_t> ids = tok.encode(c.doc, false);
    std::vector<double> best(ids.size() + 1, 1e30);
    std::vector<uint64_t> bits((vocab->size() + 63) / 64);
    size_t followed = 0;
    for (int r = 0; r < rounds; r++) {
      Matcher m(cg, stops);
      size_t i = 0;
      for (; i <= ids.size(); i++) {
        auto t = Clock::now();
        m.fill_mask(bits.data());
        best[i] = std::min(best[i], us_since(t));
        if (i == ids.size() || !m.accept(ids[i])) break;
      }
      followed = i;
    }
    best.resize(followed + 1);
    std::vector<double> s = best;
    std::sort(s.begin(), s.end());
    auto pct = [&](double p) {
      return s[std::min(s.size() - 1, static_cast<size_t>(p * (s.size() - 1) + 0.5))];
    };
    std::printf(
        "%-16s nodes %5d  compile %7.1f ms  precompute %8.1f ms  steps %3zu/%3zu  mask p50 %6.1f us  p99 "
        "%6.1f us  max %6.1f us\n",
        c.name, cg->automaton().nodes(), compile_ms, pre_ms, followed, ids.size(), pct(0.5), pct(0.99),
        s.back());
  }
  return 0;
}
