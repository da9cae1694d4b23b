// The matmuls of the bundled demo model as its forward runs them (10 layers of hidden 256, MLP 768 or 1536, the
// per-layer-input projections, the 4096-token head: 11.6 M weights, 23 MB in bf16), one thread, straight through
// the CPU kernels: T = 1 is a decode step, T = 128 / 512 a prompt (the head included), without the rest of the
// engine. bf16 at T = 1 does not fit a shared 32 MB L3 beside other work: it mostly measures DRAM streaming.
// bench_cpu_decode_pass --benchmark_repetitions=5 ; VATIC_CPU_ISA picks the instruction set.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/simd.h"

namespace {

struct Mat {
  int64_t N, K;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> q;
  std::vector<uint16_t> s, b;
};

std::vector<Mat> make_mats(int bits, const std::vector<std::pair<int64_t, int64_t>>& shapes);

std::vector<Mat> demo_mats(int bits) {
  // The demo model's decode step as the engine runs it (docs/performance.md): per layer q, k, v (layers 0-5 own
  // their KV; 4 and 9 are full-attention layers of head_dim 128), o, gate, up, down (double-wide MLP on the four
  // KV-shared layers 6-9), the per-layer-input gate and projection; then the per-layer-input model projection and
  // the tied 4096-token head.
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int l = 0; l < 10; l++) {
    const int64_t q = l == 4 || l == 9 ? 512 : 256, kv = q / 4, mlp = l >= 6 ? 1536 : 768;
    shapes.push_back({q, 256});
    if (l < 6) {
      shapes.push_back({kv, 256});
      shapes.push_back({kv, 256});
    }
    for (auto nk : {std::pair<int64_t, int64_t>{256, q}, {mlp, 256}, {mlp, 256}, {256, mlp}, {64, 256}, {256, 64}})
      shapes.push_back(nk);
  }
  shapes.push_back({640, 256});
  shapes.push_back({4096, 256});
  return make_mats(bits, shapes);
}

std::vector<Mat> make_mats(int bits, const std::vector<std::pair<int64_t, int64_t>>& shapes) {
  std::mt19937 rng(1);
  std::vector<Mat> m;
  for (auto [N, K] : shapes) {
    Mat a{N, K, {}, {}, {}, {}};
    if (bits == 16) {
      a.bf16.resize(N * K);
      for (auto& v : a.bf16) v = static_cast<uint16_t>(0x3c00 + (rng() & 0x3ff));
    } else {
      a.q.resize(N * K * bits / 8);
      for (auto& v : a.q) v = static_cast<uint8_t>(rng());
      a.s.resize(N * K / 64);
      a.b.resize(N * K / 64);
      for (auto& v : a.s) v = static_cast<uint16_t>(0x3c00 + (rng() & 0xff));
      for (auto& v : a.b) v = static_cast<uint16_t>(0xbc00 + (rng() & 0xff));
    }
    m.push_back(std::move(a));
  }
  return m;
}

// All matrices of one forward over T tokens (T = 1: a decode step; T = 2..5: the verification of 1..4 drafts;
// T = 128 / 512: a prompt, the head included).
void run_pass(const std::vector<Mat>& mats, int bits, int64_t T, const float* x, float* y) {
  const auto& k = vatic::cpu::kernels();
  for (const auto& m : mats) {
    if (bits == 16) {
      vatic::cpu::GemmArgs a;
      a.x = x;
      a.ldx = m.K;
      a.T = T;
      a.w = m.bf16.data();
      a.ldw = m.K;
      a.K = m.K;
      a.y = y;
      a.ldy = m.N;
      k.gemm_bf16(a, 0, m.N);
    } else {
      vatic::cpu::QGemmArgs a;
      a.x = x;
      a.ldx = m.K;
      thread_local std::vector<float> prepared;  // the activations in the layout the kernel reads, as the backend does
      if (const int64_t width = k.qgemm_x(x, m.K, T, m.K, bits, 64, prepared)) {
        a.x = prepared.data();
        a.ldx = width;
      }
      a.T = T;
      a.q = m.q.data();
      a.ldq = m.K * bits / 8;
      a.scales = m.s.data();
      a.biases = m.b.data();
      a.lds = m.K / 64;
      a.bits = bits;
      a.group = 64;
      a.K = m.K;
      a.y = y;
      a.ldy = m.N;
      k.qgemm(a, 0, m.N);
    }
  }
}

void BM_demo_pass(benchmark::State& st) {
  const int bits = static_cast<int>(st.range(0));
  const int64_t T = st.range(1);
  auto mats = demo_mats(bits);
  std::vector<float> x(static_cast<size_t>(T) * 1536, 0.5f), y(static_cast<size_t>(T) * 4096);
  int64_t macs = 0;
  for (const auto& m : mats) macs += m.N * m.K * T;
  for (auto _ : st) {
    run_pass(mats, bits, T, x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(macs), benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(vatic::cpu::kernels().isa);
}
// One 768 × 256 MLP matrix, again and again: it stays in L2, so this is the kernel's compute rate.
void BM_cached_matrix(benchmark::State& st) {
  const int bits = static_cast<int>(st.range(0));
  const int64_t T = st.range(1);
  auto mats = make_mats(bits, {{768, 256}});
  std::vector<float> x(static_cast<size_t>(T) * 256, 0.5f), y(static_cast<size_t>(T) * 768);
  for (auto _ : st) {
    run_pass(mats, bits, T, x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * 768 * 256 * static_cast<double>(T), benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(vatic::cpu::kernels().isa);
}
// A 64 MB weight block of E2B width (K = 1536; as in its tied 262144-token head, most of an E2B decode step's bytes
// at int8): read from DRAM every pass, so this is the kernel's streaming rate. GB/s counts the weight bytes.
void BM_dram_matrix(benchmark::State& st) {
  const int bits = static_cast<int>(st.range(0));
  const int64_t K = 1536, N = (int64_t{64} << 20) / (K * bits / 8);
  auto mats = make_mats(bits, {{N, K}});
  std::vector<float> x(static_cast<size_t>(K), 0.5f), y(static_cast<size_t>(N));
  for (auto _ : st) {
    run_pass(mats, bits, 1, x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double bytes = static_cast<double>(N * K * bits / 8 + (bits == 16 ? 0 : N * K / 64 * 4));
  st.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(vatic::cpu::kernels().isa);
}
BENCHMARK(BM_dram_matrix)->ArgNames({"bits"})->Arg(16)->Arg(8)->Arg(4)->Unit(benchmark::kMillisecond);

BENCHMARK(BM_cached_matrix)->ArgNames({"bits", "T"})->ArgsProduct({{16, 8, 4}, {1, 2, 5}})->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_demo_pass)
    ->ArgNames({"bits", "T"})
    ->ArgsProduct({{16, 8, 4}, {1}})
    ->ArgsProduct({{16, 8, 4}, {2, 3, 5}})
    ->ArgsProduct({{16, 8, 4}, {128, 512}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
