// The CPU backend's attention for one decoded token (T = 1) over a KV cache of S positions, as Gemma 4 E2B's layers
// run it: 8 query heads over one KV head, head_dim 256 (sliding layers, at most 512 keys) or 512 (full-attention
// layers), f32 keys and values. GB/s counts the key and value bytes the token reads. The backend's threads
// (OMP_NUM_THREADS) are used as in decoding: one KV head is split across them. cold:1 evicts the keys and values
// from the caches before each call (256 MB written outside the timing), as a step's weight reads do. Wall time.
// bench_cpu_attention --benchmark_repetitions=5 ; VATIC_CPU_ISA picks the instruction set.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "tensor/tensor.h"

namespace {

vatic::Tensor random_f32(const vatic::Shape& shape, uint32_t seed) {
  vatic::Tensor t = vatic::Tensor::empty(shape, vatic::DType::F32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); i++) p[i] = d(rng);
  return t;
}

void BM_decode_attention(benchmark::State& st) {
  const int64_t D = st.range(0), S = st.range(1), Hq = 8;
  const bool cold = st.range(2) != 0;
  std::vector<float> flush(cold ? size_t{64} << 20 : 0);
  vatic::Backend& be = vatic::cpu_backend();
  vatic::Tensor q = random_f32({1, Hq, D}, 1), k = random_f32({S, 1, D}, 2), v = random_f32({S, 1, D}, 3);
  std::vector<int32_t> kp(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; s++) kp[s] = static_cast<int32_t>(s);
  vatic::Tensor q_pos = vatic::Tensor::from_ints({static_cast<int32_t>(S - 1)}, {1});
  vatic::Tensor k_pos = vatic::Tensor::from_ints(kp, {S});
  vatic::Tensor out = vatic::Tensor::empty({1, Hq, D}, vatic::DType::F32);
  vatic::AttentionParams p;
  p.scale = 1.0f / 16.0f;
  for (auto _ : st) {
    if (cold) {  // the keys and values out of the caches, as a decode step's weight reads leave them
      st.PauseTiming();
      for (size_t i = 0; i < flush.size(); i += 16) flush[i] += 1.0f;
      benchmark::DoNotOptimize(flush.data());
      st.ResumeTiming();
    }
    be.attention(q, k, v, q_pos, k_pos, p, out);
    benchmark::DoNotOptimize(out.raw());
  }
  st.counters["GB/s"] = benchmark::Counter(2.0 * static_cast<double>(S * D) * 4.0,
                                           benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK(BM_decode_attention)
    ->ArgNames({"D", "S", "cold"})
    ->ArgsProduct({{256}, {512}, {0, 1}})
    ->ArgsProduct({{512}, {512, 2048, 8192}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
