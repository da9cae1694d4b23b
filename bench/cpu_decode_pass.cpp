// One decode step's matmuls of the bundled demo model (10 layers of hidden 256, MLP 768, 4096-token head),
// T = 1, one thread, straight through the CPU kernels: the time of a whole pass over the ~8 M weights as the
// model touches them (L2 / L3 resident, each matrix once per step), without the rest of the engine.
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

std::vector<Mat> demo_mats(int bits) {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int l = 0; l < 10; l++)
    for (auto nk : {std::pair<int64_t, int64_t>{256, 256}, {64, 256}, {64, 256}, {256, 256}, {768, 256}, {768, 256},
                    {256, 768}})
      shapes.push_back(nk);
  shapes.push_back({4096, 256});
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

void BM_demo_pass(benchmark::State& st) {
  const int bits = static_cast<int>(st.range(0));
  auto mats = demo_mats(bits);
  std::vector<float> x(1024, 0.5f), y(4096);
  const auto& k = vatic::cpu::kernels();
  for (auto _ : st) {
    for (const auto& m : mats) {
      if (bits == 16) {
        vatic::cpu::GemmArgs a;
        a.x = x.data();
        a.ldx = m.K;
        a.T = 1;
        a.w = m.bf16.data();
        a.ldw = m.K;
        a.K = m.K;
        a.y = y.data();
        a.ldy = m.N;
        k.gemm_bf16(a, 0, m.N);
      } else {
        vatic::cpu::QGemmArgs a;
        a.x = x.data();
        a.ldx = m.K;
        a.T = 1;
        a.q = m.q.data();
        a.ldq = m.K * bits / 8;
        a.scales = m.s.data();
        a.biases = m.b.data();
        a.lds = m.K / 64;
        a.bits = bits;
        a.group = 64;
        a.K = m.K;
        a.y = y.data();
        a.ldy = m.N;
        k.qgemm(a, 0, m.N);
      }
    }
    benchmark::DoNotOptimize(y.data());
  }
  st.SetLabel(k.isa);
}
BENCHMARK(BM_demo_pass)->Arg(16)->Arg(8)->Arg(4)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
