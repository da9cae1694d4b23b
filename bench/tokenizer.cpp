// Tokenizer benchmarks: load time of the Gemma 3 tokenizer.json (33 MB, 262k vocab, 515k merges) and encode /
// decode throughput on English text (the GPL-3 license text).
//
// The reference tokenizers come from tests/tokenizer/fetch_tokenizers.sh (ctest fetches them); they are
// looked up in $VATIC_CACHE/tokenizers or <build>/.cache/tokenizers. Override the text with VATIC_BENCH_TEXT.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;

fs::path cache_dir() {
  if (const char* c = std::getenv("VATIC_CACHE"); c && *c) return fs::path(c) / "tokenizers";
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return exe.parent_path().parent_path() / ".cache" / "tokenizers";  // <build>/bench/bench_tokenizer
}

fs::path tokenizer_path(const std::string& name) { return cache_dir() / name / "tokenizer.json"; }

std::string english_text() {
  const char* p = std::getenv("VATIC_BENCH_TEXT");
  std::ifstream f(p && *p ? p : "/usr/share/common-licenses/GPL-3");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const vatic::Tokenizer* get(const std::string& name) {
  static std::unique_ptr<vatic::Tokenizer> gemma, qwen;
  auto& slot = name == "gemma3" ? gemma : qwen;
  if (!slot && fs::exists(tokenizer_path(name)))
    slot = std::make_unique<vatic::Tokenizer>(vatic::Tokenizer::load(tokenizer_path(name)));
  return slot.get();
}

void BM_LoadGemma3(benchmark::State& state) {
  auto path = tokenizer_path("gemma3");
  if (!fs::exists(path)) {
    state.SkipWithError("gemma3 tokenizer.json not fetched (run ctest -R tokenizer_fetch_reference)");
    return;
  }
  for (auto _ : state) {
    auto t = vatic::Tokenizer::load(path);
    benchmark::DoNotOptimize(t.vocab_size());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(fs::file_size(path)));
}

void encode_bench(benchmark::State& state, const std::string& name) {
  const vatic::Tokenizer* t = get(name);
  if (!t) {
    state.SkipWithError("tokenizer.json not fetched (run ctest -R tokenizer_fetch_reference)");
    return;
  }
  std::string text = english_text();
  std::size_t tokens = 0;
  for (auto _ : state) {
    auto ids = t->encode(text, false);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["text_bytes"] = static_cast<double>(text.size());
}

void decode_bench(benchmark::State& state, const std::string& name) {
  const vatic::Tokenizer* t = get(name);
  if (!t) {
    state.SkipWithError("tokenizer.json not fetched (run ctest -R tokenizer_fetch_reference)");
    return;
  }
  std::string text = english_text();
  auto ids = t->encode(text, false);
  for (auto _ : state) benchmark::DoNotOptimize(t->decode(ids));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text.size()));
}

void BM_EncodeGemma3(benchmark::State& state) { encode_bench(state, "gemma3"); }
void BM_EncodeQwen3(benchmark::State& state) { encode_bench(state, "qwen3"); }
void BM_DecodeGemma3(benchmark::State& state) { decode_bench(state, "gemma3"); }
void BM_DecodeQwen3(benchmark::State& state) { decode_bench(state, "qwen3"); }

}  // namespace

BENCHMARK(BM_LoadGemma3)->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BM_EncodeGemma3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeQwen3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeGemma3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeQwen3)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
