// Every backend operation on every registered device against the CPU backend (as ggml's test-backend-ops does):
// random inputs with odd sizes, strided views, every dtype an op takes and quantized weights. The CPU backend itself
// is checked against double references in backend_ops_test.cpp; here the CPU is the reference for the others. The
// mixture-of-experts ops (matmul_experts, combine_rows, route) are also checked on the CPU against naive references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "ops/ops.h"
#include "tensor/tensor.h"

namespace vatic {
namespace {

std::mt19937& rng() {
  static std::mt19937 g(4242);
  return g;
}
// A check that draws from its own stream: the tests after it get the data they always had.
struct OwnRandom {
  std::mt19937 saved = rng();
  explicit OwnRandom(uint32_t seed) { rng().seed(seed); }
  ~OwnRandom() { rng() = saved; }
};

Tensor random_host(const Shape& shape, DType dtype = DType::F32, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape, dtype);
  std::normal_distribution<float> d(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); i++) {
    const float v = d(rng());
    switch (dtype) {
      case DType::F32: t.data<float>()[i] = v; break;
      case DType::BF16: t.data<uint16_t>()[i] = f32_to_bf16(v); break;
      case DType::F16: t.data<uint16_t>()[i] = f32_to_f16(v); break;
      case DType::F8_E4M3: t.data<uint8_t>()[i] = static_cast<uint8_t>(rng()() & 0x7e); break;  // no NaN codes
      case DType::I32: t.data<int32_t>()[i] = static_cast<int32_t>(rng()() % 1000); break;
      default: ADD_FAILURE() << "unsupported dtype";
    }
  }
  return t;
}

// A quantized Linear [N, K] (or stacked [E, N, K] when E > 0) with random codes, scales and biases.
Linear random_quantized(int64_t E, int64_t N, int64_t K, int bits, int group) {
  const int64_t R = std::max<int64_t>(E, 1) * N;
  Linear l;
  l.bits = bits;
  l.group = group;
  l.weight = Tensor::empty({R, K * bits / 32}, DType::U32);
  for (int64_t i = 0; i < l.weight.numel(); i++) l.weight.data<uint32_t>()[i] = static_cast<uint32_t>(rng()());
  std::uniform_real_distribution<float> sd(0.001f, 0.05f), bd(-0.5f, 0.5f);
  l.scales = Tensor::empty({R, K / group}, DType::BF16);
  l.biases = Tensor::empty({R, K / group}, DType::BF16);
  for (int64_t i = 0; i < l.scales.numel(); i++) {
    l.scales.data<uint16_t>()[i] = f32_to_bf16(sd(rng()));
    l.biases.data<uint16_t>()[i] = f32_to_bf16(bd(rng()));
  }
  if (E > 0) {
    l.weight = l.weight.reshape({E, N, K * bits / 32});
    l.scales = l.scales.reshape({E, N, K / group});
    l.biases = l.biases.reshape({E, N, K / group});
  }
  return l;
}

Linear dense(const Tensor& w) {
  Linear l;
  l.weight = w;
  return l;
}

Tensor on(Device d, const Tensor& host) { return ops::to_device(host, d); }
Linear on(Device d, const Linear& l) {
  Linear r = l;
  r.weight = on(d, l.weight);
  if (l.quantized()) {
    r.scales = on(d, l.scales);
    r.biases = on(d, l.biases);
  }
  return r;
}

// Element-wise comparison of two host tensors of one shape, scaled by the reference's magnitude.
void expect_close(const Tensor& got_any, const Tensor& want_any, double rel, const std::string& what) {
  Tensor got = ops::to_host(got_any), want = ops::to_host(want_any);
  ASSERT_EQ(got.shape(), want.shape()) << what;
  Tensor g = ops::to_f32(got), w = ops::to_f32(want);
  if (got.dtype() == DType::I32) {
    for (int64_t i = 0; i < got.numel(); i++)
      ASSERT_EQ(got.data<int32_t>()[i], want.data<int32_t>()[i]) << what << " at " << i;
    return;
  }
  double mag = 0;
  for (int64_t i = 0; i < w.numel(); i++)
    if (std::isfinite(w.data<float>()[i])) mag = std::max(mag, std::fabs(double(w.data<float>()[i])));
  for (int64_t i = 0; i < w.numel(); i++) {
    const float a = g.data<float>()[i], b = w.data<float>()[i];
    if (std::isinf(b)) {
      ASSERT_EQ(a, b) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(a, b, rel * std::max(mag, 1e-3)) << what << " at " << i << " of " << w.numel();
  }
}

std::vector<Device> others() {
  std::vector<Device> d;
  for (Device x : available_devices())
    if (!x.is_cpu()) d.push_back(x);
  return d;
}

// Runs `body(device)` for every device that is not the CPU; skips (saying so) when there is none.
#define FOR_EACH_DEVICE(...)                                                                                    \
  do {                                                                                                          \
    auto devs_ = others();                                                                                      \
    if (devs_.empty()) GTEST_SKIP() << "no device besides the CPU in this build and on this machine";          \
    for (Device dev : devs_) {                                                                                  \
      SCOPED_TRACE(dev.str());                                                                                  \
      backend_for(dev).bind_thread();                                                                           \
      (__VA_ARGS__)(dev);                                                                                       \
    }                                                                                                           \
  } while (0)

TEST(DeviceOps, CopyStridedAndConverting) {
  FOR_EACH_DEVICE([](Device dev) {
    for (DType from : {DType::F32, DType::BF16, DType::F16, DType::I32})
      for (DType to : {DType::F32, DType::BF16, DType::F16, DType::I32}) {
        if ((from == DType::I32) != (to == DType::I32)) continue;
        Tensor src = random_host({7, 13, 5}, from);
        Tensor view = src.transpose(0, 2).slice(1, 2, 11);  // [5, 9, 7], strided
        Tensor want = Tensor::empty(view.shape(), to);
        cpu_backend().copy(view, want);
        Tensor dsrc = on(dev, src);
        Tensor got = backend_for(dev).empty(view.shape(), to);
        backend_for(dev).copy(dsrc.transpose(0, 2).slice(1, 2, 11), got);
        expect_close(got, want, 0, std::string("copy ") + dtype_name(from) + "->" + dtype_name(to));
        // Into a strided destination.
        Tensor dbig = backend_for(dev).empty({9, 11}, to);
        backend_for(dev).fill(dbig, 0);
        Tensor s2 = on(dev, random_host({9, 4}, from));
        backend_for(dev).copy(s2, dbig.slice(1, 3, 7));
        Tensor hbig = Tensor::empty({9, 11}, to);
        cpu_backend().fill(hbig, 0);
        cpu_backend().copy(ops::to_host(s2), hbig.slice(1, 3, 7));
        expect_close(dbig, hbig, 0, "copy into strided");
      }
    Tensor f8 = random_host({33}, DType::F8_E4M3);
    Tensor want = Tensor::empty({33}, DType::F32);
    cpu_backend().copy(f8, want);
    Tensor got = backend_for(dev).empty({33}, DType::F32);
    backend_for(dev).copy(on(dev, f8), got);
    expect_close(got, want, 0, "f8 -> f32");
  });
}

// A weight made by the op just before (the assistant's head multiplies by the embedding rows it has just gathered)
// is read after that op has finished, also where decode GEMVs load their weights early (on CUDA, unless
// VATIC_GEMV_EARLY=0): each round gathers rows and converts them into one reused bf16 buffer (the form the decode
// GEMV's fast path reads), so a GEMV that loaded it early would see the rows of the round before.
TEST(DeviceOps, AWeightComputedJustBeforeIsReadAfterIt) {
  FOR_EACH_DEVICE([](Device dev) {
    OwnRandom own(77);
    const int64_t V = 512, K = 256, n = 64;
    Tensor table = random_host({V, K}, DType::BF16, 0.1f);
    Linear dtable = dense(on(dev, table));
    Tensor gathered = backend_for(dev).empty({n, K}, DType::F32);
    Tensor rows = backend_for(dev).empty({n, K}, DType::BF16);
    Tensor want_gathered = Tensor::empty({n, K}, DType::F32);
    Tensor want_rows = Tensor::empty({n, K}, DType::BF16);
    for (int round = 0; round < 8; round++) {
      SCOPED_TRACE(fmt::format("round {}", round));
      std::vector<int32_t> picked(n);
      for (int64_t i = 0; i < n; i++) picked[i] = static_cast<int32_t>((i * 37 + round * 101) % V);
      Tensor ids = Tensor::from_ints(picked, {n});
      Tensor x = random_host({1, K});
      cpu_backend().embedding(dense(table), ids, 1.0f, want_gathered);
      cpu_backend().copy(want_gathered, want_rows);
      Tensor want = Tensor::empty({1, n}, DType::F32);
      cpu_backend().matmul(x, Linear{want_rows, {}, {}, 0, 0, true}, want, false);
      Tensor dx = on(dev, x);  // uploaded before the rows are made, so the GEMV follows their conversion directly
      backend_for(dev).embedding(dtable, on(dev, ids), 1.0f, gathered);
      backend_for(dev).copy(gathered, rows);
      Tensor got = backend_for(dev).empty({1, n}, DType::F32);
      backend_for(dev).matmul(dx, Linear{rows, {}, {}, 0, 0, true}, got, false);
      expect_close(got, want, 2e-5, "matmul by rows made just before");
      // Bits too: the same rows read long after they were made, in a launch of their own.
      backend_for(dev).synchronize();
      Tensor again = backend_for(dev).empty({1, n}, DType::F32);
      backend_for(dev).matmul(dx, Linear{rows, {}, {}, 0, 0, true}, again, false);
      expect_close(got, again, 0.0, "the same GEMV after a synchronization");
    }
  });
}

TEST(DeviceOps, DenseMatmul) {
  FOR_EACH_DEVICE([](Device dev) {
    struct Size {
      int64_t T, N, K;
    };
    for (DType wt : {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3})
      for (Size s : {Size{1, 1, 8}, Size{1, 37, 67}, Size{3, 130, 256}, Size{8, 33, 128}, Size{9, 19, 40},
                     Size{37, 70, 96}, Size{130, 5, 513}}) {
        SCOPED_TRACE(fmt::format("{} T={} N={} K={}", dtype_name(wt), s.T, s.N, s.K));
        Tensor wbuf = random_host({s.N + 2, s.K}, wt, 0.1f);
        Linear w = dense(wbuf.slice(0, 2, 2 + s.N));
        Tensor xbuf = random_host({s.T, s.K + 3});
        Tensor x = xbuf.slice(1, 3, 3 + s.K);  // strided rows
        for (bool acc : {false, true}) {
          Tensor y0 = random_host({s.T, s.N + 1});
          Tensor want = y0.slice(1, 1, 1 + s.N);
          Tensor dy0 = on(dev, y0);
          Tensor got = dy0.slice(1, 1, 1 + s.N);
          cpu_backend().matmul(x, w, want, acc);
          Linear dw = dense(on(dev, wbuf).slice(0, 2, 2 + s.N));
          backend_for(dev).matmul(on(dev, xbuf).slice(1, 3, 3 + s.K), dw, got, acc);
          expect_close(got, want, 2e-5, acc ? "accumulate" : "overwrite");
        }
      }
  });
}

// The decode GEMV's fast path takes aligned, contiguous rows: bf16 and 4/8-bit weights over row counts that pick
// each of its layouts (2 or 4 rows per warp, K split over 1, 2 or 4 warps) and every input-row count up to 8.
TEST(DeviceOps, DecodeMatmulLayouts) {
  FOR_EACH_DEVICE([](Device dev) {
    struct Size {
      int64_t N, K;
    };
    for (Size s : {Size{1, 64}, Size{7, 1536}, Size{130, 256}, Size{1537, 6144}, Size{4101, 512}, Size{20000, 128}})
      for (int bits : {0, 8, 4}) {
        Linear w = bits ? random_quantized(0, s.N, s.K, bits, 64) : dense(random_host({s.N, s.K}, DType::BF16, 0.1f));
        Linear dw = on(dev, w);
        for (int64_t T : {1, 2, 3, 5, 8}) {
          SCOPED_TRACE(fmt::format("bits {} T={} N={} K={}", bits, T, s.N, s.K));
          Tensor x = random_host({T, s.K});
          for (bool acc : {false, true}) {
            Tensor want = random_host({T, s.N});
            Tensor got = on(dev, want);
            cpu_backend().matmul(x, w, want, acc);
            backend_for(dev).matmul(on(dev, x), dw, got, acc);
            expect_close(got, want, 2e-5, acc ? "accumulate" : "overwrite");
          }
        }
      }
  });
}

// Greedy speculative decoding equals plain decoding only if a verification's rows (T = 2..8) carry the very bits
// a decode step (T = 1) computes: every decode-width path (matmul, gate and up, gate times multiplier, several
// matrices of one input) must give each row the same sum whatever T is.
TEST(DeviceOps, DecodeRowsEqualVerifyRowsBitForBit) {
  FOR_EACH_DEVICE([](Device dev) {
    Backend& be = backend_for(dev);
    struct Size {
      int64_t N, K;
    };
    auto bits_of = [](const Tensor& t) {
      const Tensor h = ops::to_host(t);
      return std::vector<uint32_t>(h.data<uint32_t>(), h.data<uint32_t>() + h.numel());
    };
    // 4101 x 5376: a decode launch takes four rows per warp where a verification of quantized rows takes two, and
    // the K split is chosen from the decode launch's rows either way. 8192 x 4096 (2^25 weights): quantized rows
    // over the input's 8-bit digits on CUDA (not run on the CPU, where it would only repeat the others slowly).
    for (Size s : {Size{7, 1536}, Size{130, 256}, Size{1537, 6144}, Size{4101, 512}, Size{4101, 5376}, Size{8192, 4096}})
      for (int bits : {0, 8, 4}) {
        const bool large = s.N * s.K >= (int64_t(1) << 25);
        if (large && (dev.is_cpu() || bits == 0)) continue;
        std::optional<OwnRandom> own;  // the tests after this one keep the data they always had
        if (large) own.emplace(static_cast<uint32_t>(100 + bits));
        auto make = [&] {
          return bits ? random_quantized(0, s.N, s.K, bits, 64) : dense(random_host({s.N, s.K}, DType::BF16, 0.1f));
        };
        const Linear g = on(dev, make()), u = on(dev, make()), w2 = on(dev, make());
        const Tensor x = on(dev, random_host({8, s.K})), m = on(dev, random_host({8, s.N}));
        // Each op over the first T rows of x, one [T, N] output per matrix.
        auto run = [&](int op, int64_t T) {
          const Tensor xt = x.slice(0, 0, T), mt = m.slice(0, 0, T);
          std::vector<Tensor> y = {be.empty({T, s.N}, DType::F32), be.empty({T, s.N}, DType::F32)};
          if (op == 0) be.matmul(xt, g, y[0], false);
          if (op == 1) be.matmul_gated(xt, g, &u, nullptr, Unary::GeluTanh, y[0]);
          if (op == 2) be.matmul_gated(xt, g, nullptr, &mt, Unary::Silu, y[0]);
          if (op == 3) be.matmul_many(xt, {&g, &w2}, y);
          return std::vector<std::vector<uint32_t>>{bits_of(y[0]), op == 3 ? bits_of(y[1]) : std::vector<uint32_t>{}};
        };
        for (int op = 0; op < 4; op++) {
          const auto all = run(op, 8);
          for (int64_t T : {1, 2, 5}) {
            SCOPED_TRACE(fmt::format("bits {} N={} K={} op {} T={}", bits, s.N, s.K, op, T));
            const auto some = run(op, T);
            for (size_t o = 0; o < some.size(); o++)
              for (size_t i = 0; i < some[o].size(); i++) ASSERT_EQ(some[o][i], all[o][i]) << "output " << o << " at " << i;
          }
        }
      }
  });
}

TEST(DeviceOps, QuantizedMatmulAndEmbedding) {
  FOR_EACH_DEVICE([](Device dev) {
    // x · wᵀ on the device against the CPU's f32 sums.
    auto expect_matmul_as_cpu = [&](const Linear& w, const Tensor& x) {
      const int64_t T = x.dim(0), N = w.out_features();
      Tensor want = Tensor::empty({T, N}, DType::F32);
      cpu_backend().matmul(x, w, want, false);
      Tensor got = backend_for(dev).empty({T, N}, DType::F32);
      backend_for(dev).matmul(on(dev, x), on(dev, w), got, false);
      expect_close(got, want, 2e-5, "matmul");
    };
    for (int bits : {8, 4})
      for (int group : {32, 64})
        for (int64_t T : {1, 5, 8, 20}) {
          const int64_t N = 45, K = 192;
          SCOPED_TRACE(fmt::format("int{} g{} T={}", bits, group, T));
          Linear w = random_quantized(0, N, K, bits, group);
          expect_matmul_as_cpu(w, random_host({T, K}));
          // Rows of the same weight as an embedding table, scaled.
          Tensor ids = Tensor::from_ints({3, 0, 44, 3, 17}, {5});
          Tensor ewant = Tensor::empty({5, K}, DType::F32);
          cpu_backend().embedding(w, ids, 0.5f, ewant);
          Tensor egot = backend_for(dev).empty({5, K}, DType::F32);
          backend_for(dev).embedding(on(dev, w), on(dev, ids), 0.5f, egot);
          expect_close(egot, ewant, 1e-6, "embedding");
        }
    // A matrix large enough for the quantized GEMV over the input's 8-bit digits (CUDA): against the CPU's f32 sums.
    if (!dev.is_cpu())
      for (int bits : {8, 4})
        for (int64_t T : {1, 8}) {
          const int64_t N = 8192, K = 4096;
          SCOPED_TRACE(fmt::format("large int{} T={}", bits, T));
          OwnRandom own(static_cast<uint32_t>(200 + bits + T));
          const Linear w = random_quantized(0, N, K, bits, 64);
          expect_matmul_as_cpu(w, random_host({T, K}));
        }
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      Tensor table = random_host({50, 33}, dt);
      Tensor ids = Tensor::from_ints({49, 0, 7}, {3});
      Tensor want = Tensor::empty({3, 33}, DType::F32);
      cpu_backend().embedding(dense(table), ids, 2.0f, want);
      Tensor got = backend_for(dev).empty({3, 33}, DType::F32);
      backend_for(dev).embedding(dense(on(dev, table)), on(dev, ids), 2.0f, got);
      expect_close(got, want, 1e-6, std::string("embedding ") + dtype_name(dt));
    }
    // An id outside the vocabulary is an error at the next synchronisation, not a crash.
    Tensor table = on(dev, random_host({10, 8}));
    Tensor got = backend_for(dev).empty({1, 8}, DType::F32);
    backend_for(dev).embedding(dense(table), on(dev, Tensor::from_ints({10}, {1})), 1.0f, got);
    EXPECT_THROW(ops::to_host(got), InvalidInput);
    EXPECT_NO_THROW(ops::to_host(got));  // the error is reported once
  });
}

TEST(DeviceOps, NormsRopeElementwise) {
  FOR_EACH_DEVICE([](Device dev) {
    Backend& be = backend_for(dev);
    Backend& cpu = cpu_backend();
    for (int64_t D : {1, 7, 256, 1536}) {
      Tensor x = random_host({3, 2, D}), w = random_host({D});
      for (bool with_w : {false, true}) {
        Tensor want = Tensor::empty(x.shape(), DType::F32), got = be.empty(x.shape(), DType::F32);
        Tensor dw = on(dev, w);
        cpu.rms_norm(x, with_w ? &w : nullptr, 1e-6f, want);
        be.rms_norm(on(dev, x), with_w ? &dw : nullptr, 1e-6f, got);
        expect_close(got, want, 2e-6, "rms_norm");
      }
    }
    for (int64_t D : {40, 2048}) {
      // A pre-norm residual step in one op: the sum, and its norm with the bits of add then rms_norm.
      OwnRandom own(static_cast<uint32_t>(D));
      Tensor x = random_host({3, D}), f = random_host({3, D}), w = random_host({D});
      Tensor dx = on(dev, x), df = on(dev, f), dw = on(dev, w);
      Tensor y = be.empty({3, D}, DType::F32), n = be.empty({3, D}, DType::F32);
      be.add_norm(dx, df, &dw, 1e-6f, y, n);
      Tensor y2 = be.empty({3, D}, DType::F32), n2 = be.empty({3, D}, DType::F32);
      be.add(dx, df, y2);
      be.rms_norm(y2, &dw, 1e-6f, n2);
      expect_close(y, y2, 0, "add_norm sum");
      expect_close(n, n2, 0, "add_norm norm against add then rms_norm");
      Tensor want_y = Tensor::empty({3, D}, DType::F32), want_n = Tensor::empty({3, D}, DType::F32);
      cpu.add_norm(x, f, &w, 1e-6f, want_y, want_n);
      expect_close(n, want_n, 2e-6, "add_norm");
    }
    {
      // Rows in wider tensors, read and written in place (GLM norms the latent part of a cache entry).
      OwnRandom own(7);
      Tensor x = random_host({5, 70}), w = random_host({40});
      Tensor want = Tensor::empty({5, 100}, DType::F32), plain = Tensor::empty({5, 40}, DType::F32);
      cpu.rms_norm(x.slice(1, 10, 50), &w, 1e-6f, want.slice(1, 20, 60));
      cpu.rms_norm(ops::contiguous(x.slice(1, 10, 50)), &w, 1e-6f, plain);
      expect_close(ops::contiguous(want.slice(1, 20, 60)), plain, 0, "rms_norm of rows in place on the CPU");
      Tensor got = on(dev, Tensor::empty({5, 100}, DType::F32)), dw = on(dev, w);  // zeros around the rows stay
      be.rms_norm(on(dev, x).slice(1, 10, 50), &dw, 1e-6f, got.slice(1, 20, 60));
      expect_close(got, want, 2e-6, "rms_norm of rows in place");
    }
    for (bool interleaved : {false, true}) {
      // A strided slice of the head dim, as GLM ropes the last 64 of 192 dims in place.
      Tensor x = random_host({5, 3, 40});
      Tensor pos = Tensor::from_ints({0, 7, 300, 4095, 32000}, {5});
      std::vector<float> f(8);
      for (int i = 0; i < 8; i++) f[i] = std::pow(10000.0f, -2.0f * i / 16.0f);
      Tensor inv = Tensor::from_floats(f, {8});
      Tensor dx = on(dev, x);
      cpu.rope(x.slice(2, 24, 40), pos, inv, interleaved);
      be.rope(dx.slice(2, 24, 40), on(dev, pos), on(dev, inv), interleaved);
      expect_close(dx, x, 2e-6, interleaved ? "rope interleaved" : "rope neox");
    }
    Tensor a = random_host({6, 35}), b = random_host({35}), b2 = random_host({6, 35});
    auto check2 = [&](const char* what, auto&& f) {
      Tensor want = Tensor::empty(a.shape(), DType::F32), got = be.empty(a.shape(), DType::F32);
      f(cpu, a, want, false);
      f(be, on(dev, a), got, true);
      expect_close(got, want, 2e-6, what);
    };
    check2("add", [&](Backend& k, const Tensor& x, const Tensor& y, bool d) { k.add(x, d ? on(dev, b) : b, y); });
    check2("add rows", [&](Backend& k, const Tensor& x, const Tensor& y, bool d) { k.add(x, d ? on(dev, b2) : b2, y); });
    check2("mul", [&](Backend& k, const Tensor& x, const Tensor& y, bool d) { k.mul(x, d ? on(dev, b) : b, y); });
    check2("scale", [&](Backend& k, const Tensor& x, const Tensor& y, bool) { k.scale(x, -0.7f, y); });
    check2("softcap", [&](Backend& k, const Tensor& x, const Tensor& y, bool) { k.softcap(x, 1.5f, y); });
    check2("softmax", [&](Backend& k, const Tensor& x, const Tensor& y, bool) { k.softmax(x, y); });
    for (Unary op : {Unary::GeluTanh, Unary::Silu, Unary::Sigmoid, Unary::Tanh, Unary::Exp}) {
      check2("unary", [&](Backend& k, const Tensor& x, const Tensor& y, bool) { k.unary(op, x, y); });
      check2("gated", [&](Backend& k, const Tensor& x, const Tensor& y, bool d) { k.gated(op, x, d ? on(dev, b2) : b2, y); });
      // The two halves of a fused gate/up product, read in place (rows of unit stride, row stride 70), against the
      // same values made contiguous on the CPU.
      OwnRandom own(static_cast<uint32_t>(op));
      Tensor gu = random_host({6, 70});
      Tensor want = Tensor::empty({6, 35}, DType::F32), got = be.empty({6, 35}, DType::F32);
      cpu.gated(op, ops::contiguous(gu.slice(1, 0, 35)), ops::contiguous(gu.slice(1, 35, 70)), want);
      Tensor dgu = on(dev, gu);
      be.gated(op, dgu.slice(1, 0, 35), dgu.slice(1, 35, 70), got);
      expect_close(got, want, 2e-6, "gated halves");
      Tensor cpu_halves = Tensor::empty({6, 35}, DType::F32);
      cpu.gated(op, gu.slice(1, 0, 35), gu.slice(1, 35, 70), cpu_halves);
      expect_close(cpu_halves, want, 0, "gated halves on the CPU");
      Tensor mixed = be.empty({6, 35}, DType::F32);  // one half in place, the other contiguous
      be.gated(op, dgu.slice(1, 0, 35), ops::contiguous(dgu.slice(1, 35, 70)), mixed);
      expect_close(mixed, want, 2e-6, "gated, one half in place");
    }
    // Top-k with ties (lower index first) over rows as wide as a vocabulary.
    for (int64_t N : {5, 128, 130, 2048, 4096, 4097, 20000, 262144})
      for (int k : {1, static_cast<int>(std::min<int64_t>(N, 8)), static_cast<int>(std::min<int64_t>(N, 32))}) {
      Tensor t = random_host({3, N});
      for (int64_t i = 0; i < N; i += 3) t.data<float>()[i] = 0.25f;  // many ties
      // The largest value twice in one row, far apart (the lower index wins), and at the last column of another.
      t.data<float>()[N - 1] = t.data<float>()[N / 7 + 1] = 50.0f;
      t.data<float>()[2 * N - 1] = 60.0f;
      Tensor wv = Tensor::empty({3, k}, DType::F32), wi = Tensor::empty({3, k}, DType::I32);
      cpu.topk(t, k, wv, wi);
      Tensor gv = be.empty({3, k}, DType::F32), gi = be.empty({3, k}, DType::I32);
      be.topk(on(dev, t), k, gv, gi);
      expect_close(gv, wv, 0, "topk values");
      expect_close(gi, wi, 0, "topk indices");
    }
  });
}

// The fused ops against the CPU, whose versions compose the unfused ones: a residual add with the next norm, a
// head norm with its rotation, and the gated GEMV (gate and up, or gate and a given multiplier) in every weight
// layout the decode path takes, at widths the chunked kernel fills unevenly, and past 8 rows (the composed path).
TEST(DeviceOps, FusedNormsAndGatedMatmul) {
  FOR_EACH_DEVICE([](Device dev) {
    Backend& be = backend_for(dev);
    Backend& cpu = cpu_backend();
    for (int64_t D : {7, 256, 1536})
      for (bool with_w : {false, true}) {
        Tensor x = random_host({3, D}), f = random_host({3, D}), w = random_host({D}), w2 = random_host({D});
        Tensor dw = on(dev, w), dw2 = on(dev, w2);
        for (float s : {1.0f, 0.5f}) {
          Tensor wy = Tensor::empty(x.shape(), DType::F32), wn = Tensor::empty(x.shape(), DType::F32);
          Tensor gy = be.empty(x.shape(), DType::F32), gn = be.empty(x.shape(), DType::F32);
          cpu.add_rms_norm_norm(x, f, with_w ? &w : nullptr, 1e-6f, s, wy, &w2, wn);
          be.add_rms_norm_norm(on(dev, x), on(dev, f), with_w ? &dw : nullptr, 1e-6f, s, gy, with_w ? &dw2 : nullptr,
                               gn);
          expect_close(gy, wy, 2e-6, "add_rms_norm_norm residual");
          if (with_w) expect_close(gn, wn, 2e-6, "add_rms_norm_norm norm");
          // Without a next weight the second output is the weight-less norm.
          if (!with_w) {
            Tensor plain = Tensor::empty(x.shape(), DType::F32);
            cpu.rms_norm(wy, nullptr, 1e-6f, plain);
            expect_close(gn, plain, 2e-6, "add_rms_norm_norm weight-less norm");
          }
        }
      }
    for (int64_t D : {64, 256, 512})
      for (bool interleaved : {false, true}) {
        Tensor x = random_host({4, 3, D}), w = random_host({D});
        Tensor pos = Tensor::from_ints({0, 9, 4095, 32000}, {4});
        const int64_t n = D / 2 - (D == 512 ? 64 : 0);  // partial rotation, as Gemma 4's proportional rope
        std::vector<float> fr(n);
        for (int64_t i = 0; i < n; i++) fr[i] = std::pow(10000.0f, -2.0f * i / D);
        Tensor inv = Tensor::from_floats(fr, {n});
        Tensor want = Tensor::empty(x.shape(), DType::F32), got = be.empty(x.shape(), DType::F32);
        Tensor dw = on(dev, w);
        cpu.rms_norm_rope(x, &w, 1e-6f, pos, inv, interleaved, want);
        be.rms_norm_rope(on(dev, x), &dw, 1e-6f, on(dev, pos), on(dev, inv), interleaved, got);
        expect_close(got, want, 2e-6, fmt::format("rms_norm_rope D={} {}", D, interleaved ? "interleaved" : "neox"));
      }
    struct Size {
      int64_t N, K;
    };
    for (Size s : {Size{1, 64}, Size{7, 1536}, Size{1537, 512}, Size{6144, 1536}})
      for (int bits : {0, 8, 4}) {
        auto make = [&] {
          return bits ? random_quantized(0, s.N, s.K, bits, 64) : dense(random_host({s.N, s.K}, DType::BF16, 0.1f));
        };
        Linear g = make(), u = make();
        Linear dg = on(dev, g), du = on(dev, u);
        // A prompt of 300 rows at the widest size: more output tiles of 128 × 128 than an H100 or H200 has
        // multiprocessors, so its bf16 parts take three accumulating GEMMs where the shorter ones take one stacked
        // GEMM whose products the activation sums.
        for (int64_t T : {1, 2, 3, 8, 9, 300})
          for (Unary act : {Unary::GeluTanh, Unary::Silu}) {
            if (T == 300 && (s.N != 6144 || bits || act != Unary::GeluTanh)) continue;
            SCOPED_TRACE(fmt::format("bits {} T={} N={} K={} act {}", bits, T, s.N, s.K, static_cast<int>(act)));
            Tensor x = random_host({T, s.K}), m = random_host({T, s.N});
            Tensor want = Tensor::empty({T, s.N}, DType::F32), got = be.empty({T, s.N}, DType::F32);
            cpu.matmul_gated(x, g, &u, nullptr, act, want);
            be.matmul_gated(on(dev, x), dg, &du, nullptr, act, got);
            expect_close(got, want, 2e-5, "gate and up");
            Tensor dm = on(dev, m);
            cpu.matmul_gated(x, g, nullptr, &m, act, want);
            be.matmul_gated(on(dev, x), dg, nullptr, &dm, act, got);
            expect_close(got, want, 2e-5, "gate and multiplier");
          }
      }
    // Several matrices of one input in one op: a query, key and value projection of unequal heights (each
    // output's rows end inside a warp's share), one to three of them, and a mix of encodings (composed).
    for (int bits : {0, 8, 4})
      for (int64_t T : {1, 3, 8, 9}) {
        const int64_t K = 1536;
        auto make = [&](int64_t N, int b) {
          return b ? random_quantized(0, N, K, b, 64) : dense(random_host({N, K}, DType::BF16, 0.1f));
        };
        std::vector<Linear> ws = {make(2048, bits), make(257, bits), make(255, bits)};
        if (T == 9) ws[2] = make(255, bits ? 0 : 8);
        std::vector<Linear> dws;
        for (const Linear& w : ws) dws.push_back(on(dev, w));
        Tensor x = random_host({T, K});
        for (size_t count = 1; count <= 3; count++) {
          SCOPED_TRACE(fmt::format("matmul_many bits {} T={} count {}", bits, T, count));
          std::vector<const Linear*> cw, dw;
          std::vector<Tensor> want, got;
          for (size_t i = 0; i < count; i++) {
            cw.push_back(&ws[i]);
            dw.push_back(&dws[i]);
            want.push_back(Tensor::empty({T, ws[i].out_features()}, DType::F32));
            got.push_back(be.empty({T, ws[i].out_features()}, DType::F32));
          }
          for (size_t i = 0; i < count; i++) cpu.matmul(x, ws[i], want[i], false);
          be.matmul_many(on(dev, x), dw, got);
          for (size_t i = 0; i < count; i++) expect_close(got[i], want[i], 2e-5, fmt::format("output {}", i));
        }
      }
    // Matrices that are blocks of rows of one tensor (views, not copies): each output as the CPU computes it.
    for (int64_t T : {3, 9, 40}) {
      SCOPED_TRACE(fmt::format("row blocks of one tensor T={}", T));
      const int64_t K = 256, Nq = 512, Nk = 128, I = 384;
      Tensor qkv = random_host({Nq + 2 * Nk, K}, DType::BF16, 0.1f), gu = random_host({2 * I, K}, DType::BF16, 0.1f);
      Tensor dqkv = on(dev, qkv), dgu = on(dev, gu);
      const int64_t r[4] = {0, Nq, Nq + Nk, Nq + 2 * Nk};
      std::vector<Linear> cw, dw;
      for (int i = 0; i < 3; i++) {
        cw.push_back(dense(qkv.slice(0, r[i], r[i + 1])));
        dw.push_back(dense(dqkv.slice(0, r[i], r[i + 1])));
      }
      Tensor x = random_host({T, K});
      std::vector<Tensor> got;
      for (int i = 0; i < 3; i++) got.push_back(be.empty({T, r[i + 1] - r[i]}, DType::F32));
      be.matmul_many(on(dev, x), {&dw[0], &dw[1], &dw[2]}, got);
      for (int i = 0; i < 3; i++) {
        Tensor want = Tensor::empty({T, r[i + 1] - r[i]}, DType::F32);
        cpu.matmul(x, cw[i], want, false);
        expect_close(got[i], want, 2e-5, fmt::format("projection {}", i));
      }
      const Linear g = dense(gu.slice(0, 0, I)), u = dense(gu.slice(0, I, 2 * I));
      const Linear dg = dense(dgu.slice(0, 0, I)), du = dense(dgu.slice(0, I, 2 * I));
      Tensor want = Tensor::empty({T, I}, DType::F32), gated = be.empty({T, I}, DType::F32);
      cpu.matmul_gated(x, g, &u, nullptr, Unary::GeluTanh, want);
      be.matmul_gated(on(dev, x), dg, &du, nullptr, Unary::GeluTanh, gated);
      expect_close(gated, want, 2e-5, "gate and up of one tensor");
    }
    // A layer's queries (8 heads), keys (2) and weight-less values (2) in one op: each as its own op computes it
    // on this device, bit for bit. Its inputs come from a copy of the generator, so that the other checks' inputs
    // stay what they were.
    const std::mt19937 kept = rng();
    for (int64_t D : {64, 256, 512})
      for (bool interleaved : {false, true}) {
        Tensor w = random_host({D});
        Tensor pos = Tensor::from_ints({0, 9, 4095, 32000}, {4});
        const int64_t n = D / 2 - (D == 512 ? 64 : 0);
        std::vector<float> fr(n);
        for (int64_t i = 0; i < n; i++) fr[i] = std::pow(10000.0f, -2.0f * i / D);
        Tensor inv = Tensor::from_floats(fr, {n});
        Tensor dw = on(dev, w);
        Tensor k = random_host({4, 2, D}), v = random_host({4, 2, D}), wk = random_host({D});
        Tensor dk = on(dev, k), dv = on(dev, v), dwk = on(dev, wk), dpos = on(dev, pos), dinv = on(dev, inv);
        Tensor q8 = on(dev, random_host({4, 8, D}));
        Tensor yq = be.empty(q8.shape(), DType::F32), yk = be.empty(k.shape(), DType::F32),
               yv = be.empty(v.shape(), DType::F32);
        be.rms_norm_rope_many({{&q8, &dw, true, &yq}, {&dk, &dwk, true, &yk}, {&dv, nullptr, false, &yv}}, 1e-6f, dpos,
                              dinv, interleaved);
        Tensor wq = be.empty(q8.shape(), DType::F32), wkk = be.empty(k.shape(), DType::F32),
               wv = be.empty(v.shape(), DType::F32);
        be.rms_norm_rope(q8, &dw, 1e-6f, dpos, dinv, interleaved, wq);
        be.rms_norm_rope(dk, &dwk, 1e-6f, dpos, dinv, interleaved, wkk);
        be.rms_norm(dv, nullptr, 1e-6f, wv);
        expect_close(yq, wq, 0, "rms_norm_rope_many queries");
        expect_close(yk, wkk, 0, "rms_norm_rope_many keys");
        expect_close(yv, wv, 0, "rms_norm_rope_many values");
        // ... and as the CPU computes them.
        Tensor cv = Tensor::empty(v.shape(), DType::F32);
        cpu.rms_norm(v, nullptr, 1e-6f, cv);
        expect_close(yv, cv, 2e-6, "rms_norm_rope_many values against the CPU");
        // Into a cache: the keys and values land in the slots kv_write gives them, with their positions marked,
        // and the queries are as before; a ring of 11 slots (distinct slots for these positions) and a flat cache.
        for (int64_t C : {int64_t(11), int64_t(32001)}) {
          if (C > 11 && D != 64) continue;
          const bool ring = C == 11;
          auto cache = [&] {
            KvSlots s{be.empty({C, 2, D}, DType::F32), be.empty({C, 2, D}, DType::F32),
                      on(dev, Tensor::from_ints(std::vector<int32_t>(static_cast<size_t>(C), -1), {C})), ring};
            be.fill(s.keys, 0.0f);
            be.fill(s.values, 0.0f);
            return s;
          };
          KvSlots fused = cache(), composed = cache();
          Tensor yq2 = be.empty(q8.shape(), DType::F32), yk2 = be.empty(k.shape(), DType::F32),
                 yv2 = be.empty(v.shape(), DType::F32);
          be.rms_norm_rope_many({{&q8, &dw, true, &yq2}, {&dk, &dwk, true, &yk2}, {&dv, nullptr, false, &yv2}}, 1e-6f,
                                dpos, dinv, interleaved, &fused);
          be.kv_write(yk, yv, dpos, composed.keys, composed.values, composed.slot_pos, ring);
          SCOPED_TRACE(fmt::format("into a cache of {} slots", C));
          expect_close(yq2, yq, 0, "rms_norm_rope_many queries beside a cache write");
          expect_close(fused.keys, composed.keys, 0, "keys in their slots");
          expect_close(fused.values, composed.values, 0, "values in their slots");
          expect_close(fused.slot_pos, composed.slot_pos, 0, "slot positions");
        }
      }
    rng() = kept;
  });
}

// Multi-head latent attention's step between its projections, and a mixture's output with the residual add and
// the next norm, each in one op: bit for bit what the composed ops give on the same device, and close to the CPU.
// The entries' inputs are columns of wider tensors, rotated at one set of positions and written at another (as the
// MTP drafter's are), into a flat cache and a ring.
TEST(DeviceOps, LatentEntryAndMixtureResidual) {
  FOR_EACH_DEVICE([](Device dev) {
    Backend& be = backend_for(dev);
    Backend& cpu = cpu_backend();
    const int64_t T = 4, H = 3, nope = 5;
    for (int64_t L : {int64_t(7), int64_t(512)})
      for (int64_t R : {int64_t(8), int64_t(64)})
        for (bool interleaved : {false, true})
          for (bool ring : {false, true}) {
            SCOPED_TRACE(fmt::format("L={} R={} {} {}", L, R, interleaved ? "interleaved" : "neox",
                                     ring ? "ring" : "flat"));
            const int64_t C = 11;
            Tensor wide = random_host({T, L + R + 3}), qfull = random_host({T, H, nope + R}), w = random_host({L});
            Tensor pos = Tensor::from_ints({0, 9, 4095, 32000}, {T});
            Tensor slots_at = ring ? Tensor::from_ints({12, 13, 25, 30}, {T}) : Tensor::from_ints({3, 0, 7, 5}, {T});
            std::vector<float> fr(static_cast<size_t>(R / 2));
            for (int64_t i = 0; i < R / 2; i++) fr[static_cast<size_t>(i)] = std::pow(10000.0f, -2.0f * i / R);
            Tensor inv = Tensor::from_floats(fr, {R / 2});
            auto run = [&](Backend& b, Device d, bool composed) {
              auto put = [&](const Tensor& t) { return d.is_cpu() ? t : on(d, t); };
              KvSlots s{b.empty({C, 1, L + R}, DType::F32), b.empty({C, 1, 0}, DType::F32),
                        put(Tensor::from_ints(std::vector<int32_t>(static_cast<size_t>(C), -1), {C})), ring};
              b.fill(s.keys, 0.0f);
              Tensor qo = b.empty({T, H, L + R}, DType::F32);
              b.fill(qo, 0.0f);
              const Tensor kv = put(wide).slice(1, 1, 1 + L + R), q = put(qfull).slice(2, nope, nope + R),
                           dw = put(w), out = qo.slice(2, L, L + R);
              if (composed)
                b.Backend::latent_entry(kv, &dw, 1e-6f, q, out, put(pos), put(slots_at), put(inv), interleaved, s);
              else
                b.latent_entry(kv, &dw, 1e-6f, q, out, put(pos), put(slots_at), put(inv), interleaved, s);
              return std::vector<Tensor>{s.keys, s.slot_pos, qo};
            };
            const std::vector<Tensor> fused = run(be, dev, false), composed = run(be, dev, true),
                                      host = run(cpu, Device::CPU, true);
            expect_close(fused[0], composed[0], 0, "entries in their slots");
            expect_close(fused[1], composed[1], 0, "slot positions");
            expect_close(fused[2], composed[2], 0, "rotated query parts");
            expect_close(fused[0], host[0], 2e-6, "entries against the CPU");
            expect_close(fused[1], host[1], 0, "slot positions against the CPU");
            expect_close(fused[2], host[2], 2e-6, "rotated query parts against the CPU");
          }
    for (int64_t D : {int64_t(7), int64_t(2048)})
      for (int64_t rows_n : {int64_t(1), int64_t(3)})
        for (bool shared : {false, true})
          for (bool with_w : {false, true}) {
            SCOPED_TRACE(fmt::format("combine_add_norm D={} T={} shared {} weight {}", D, rows_n, shared, with_w));
            const int64_t k = 4;
            Tensor rows = random_host({rows_n * k, D}), wts = random_host({rows_n, k}), sh = random_host({rows_n, D}),
                   x = random_host({rows_n, D}), w = random_host({D});
            Tensor drows = on(dev, rows), dwts = on(dev, wts), dsh = on(dev, sh), dx = on(dev, x), dw = on(dev, w);
            Tensor fy = be.empty(x.shape(), DType::F32), fn = be.empty(x.shape(), DType::F32);
            Tensor cy = be.empty(x.shape(), DType::F32), cn = be.empty(x.shape(), DType::F32);
            Tensor hy = Tensor::empty(x.shape(), DType::F32), hn = Tensor::empty(x.shape(), DType::F32);
            be.combine_add_norm(drows, dwts, shared ? &dsh : nullptr, dx, with_w ? &dw : nullptr, 1e-6f, fy, fn);
            be.Backend::combine_add_norm(drows, dwts, shared ? &dsh : nullptr, dx, with_w ? &dw : nullptr, 1e-6f, cy,
                                         cn);
            cpu.combine_add_norm(rows, wts, shared ? &sh : nullptr, x, with_w ? &w : nullptr, 1e-6f, hy, hn);
            expect_close(fy, cy, 0, "residual");
            expect_close(fn, cn, 0, "norm");
            expect_close(fy, hy, 2e-6, "residual against the CPU");
            expect_close(fn, hn, 2e-6, "norm against the CPU");
          }
  });
}

// A Gemma 4 mixture layer's norms in three ops: several norms of one row (the router's input and the
// experts'), both branches normed, summed, normed again and added to the residual (with the next norm), and
// the attention's residual add with several norms of its result. Each equal bit for bit to the ops it
// replaces on the same device, and close to the CPU's; widths below 1,024 (a norm block of 128 threads),
// above the fused GEMV's residual row held in registers (2,048), and above every row held (6,144).
TEST(DeviceOps, MixtureNorms) {
  FOR_EACH_DEVICE([](Device dev) {
    Backend& be = backend_for(dev);
    Backend& cpu = cpu_backend();
    OwnRandom seeded(7);
    for (int64_t D : {int64_t(7), int64_t(1536), int64_t(2816), int64_t(7000)})
      for (int64_t T : {int64_t(1), int64_t(3)}) {
        SCOPED_TRACE(fmt::format("rms_norm_many D={} T={}", D, T));
        Tensor wide = random_host({T, D + 5}), w1 = random_host({D}), w2 = random_host({D});
        Tensor dwide = on(dev, wide), dw1 = on(dev, w1), dw2 = on(dev, w2);
        for (bool strided : {false, true}) {
          const Tensor x = strided ? wide.slice(1, 2, 2 + D) : ops::contiguous(wide.slice(1, 2, 2 + D));
          const Tensor dx = strided ? dwide.slice(1, 2, 2 + D) : ops::contiguous(dwide.slice(1, 2, 2 + D));
          auto outs = [&](Backend& b, const Tensor* wa, const Tensor* wb, std::vector<Tensor>& ys) {
            ys = {b.empty({T, D}, DType::F32), b.empty({T, D}, DType::F32), b.empty({T, D}, DType::F32)};
            return std::vector<ScaledNorm>{{wa, 0.0625f, &ys[0]}, {wb, 1.0f, &ys[1]}, {nullptr, 1.0f, &ys[2]}};
          };
          std::vector<Tensor> fy, cy, hy;
          be.rms_norm_many(dx, 1e-6f, outs(be, &dw1, &dw2, fy));
          be.Backend::rms_norm_many(dx, 1e-6f, outs(be, &dw1, &dw2, cy));
          cpu.rms_norm_many(x, 1e-6f, outs(cpu, &w1, &w2, hy));
          for (size_t i = 0; i < 3; i++) {
            expect_close(fy[i], cy[i], 0, fmt::format("norm {} against the composed ops", i));
            expect_close(fy[i], hy[i], 2e-6, fmt::format("norm {} against the CPU", i));
          }
        }
      }
    for (int64_t D : {int64_t(7), int64_t(1536), int64_t(2816), int64_t(7000)})
      for (int64_t T : {int64_t(1), int64_t(3)})
        for (int variant = 0; variant < 3; variant++) {  // weights and the next norm; weight-less, scaled; no next
          SCOPED_TRACE(fmt::format("combine_post_norms D={} T={} variant {}", D, T, variant));
          const int64_t k = 8;
          const bool weights = variant != 1, next = variant < 2;
          const float s = variant == 1 ? 0.75f : 1.0f;
          Tensor rows = random_host({T * k, D}), wts = random_host({T, k}), dense = random_host({T, D}),
                 x = random_host({T, D}), wa = random_host({D}), wb = random_host({D}), w = random_host({D}),
                 wn = random_host({D});
          auto run = [&](Backend& b, bool host, bool composed) {
            auto put = [&](const Tensor& t) { return host ? t : on(dev, t); };
            const Tensor r = put(rows), g = put(wts), d = put(dense), xx = put(x), a = put(wa), bb = put(wb),
                         ww = put(w), nn = put(wn);
            Tensor y = b.empty({T, D}, DType::F32), n = b.empty({T, D}, DType::F32);
            const Tensor *pa = weights ? &a : nullptr, *pb = weights ? &bb : nullptr, *pw = weights ? &ww : nullptr;
            if (composed)
              b.Backend::combine_post_norms(r, g, d, pa, pb, xx, pw, 1e-6f, s, y, &nn, next ? &n : nullptr);
            else
              b.combine_post_norms(r, g, d, pa, pb, xx, pw, 1e-6f, s, y, &nn, next ? &n : nullptr);
            return std::vector<Tensor>{y, n};
          };
          const std::vector<Tensor> fused = run(be, false, false), composed = run(be, false, true),
                                    host = run(cpu, true, true);
          expect_close(fused[0], composed[0], 0, "residual");
          expect_close(fused[0], host[0], 2e-6, "residual against the CPU");
          if (next) {
            expect_close(fused[1], composed[1], 0, "next norm");
            expect_close(fused[1], host[1], 2e-6, "next norm against the CPU");
          }
        }
    // The attention's residual add and the three norms of its result (dense input, router input, experts'
    // input).
    for (int64_t D : {int64_t(7), int64_t(1536), int64_t(2816), int64_t(7000)})
      for (int64_t T : {int64_t(1), int64_t(3)})
        for (bool weighted : {true, false}) {
          SCOPED_TRACE(fmt::format("add_rms_norm_many D={} T={} weighted {}", D, T, weighted));
          const float s = weighted ? 1.0f : 0.75f;
          Tensor x = random_host({T, D}), f = random_host({T, D}), w = random_host({D}),
                 w1 = random_host({D}), w2 = random_host({D});
          auto run = [&](Backend& b, bool host, bool composed) {
            auto put = [&](const Tensor& t) { return host ? t : on(dev, t); };
            const Tensor xx = put(x), ff = put(f), ww = put(w), a = put(w1), c = put(w2);
            std::vector<Tensor> ys = {b.empty({T, D}, DType::F32), b.empty({T, D}, DType::F32),
                                      b.empty({T, D}, DType::F32), b.empty({T, D}, DType::F32)};
            const std::vector<ScaledNorm> outs = {
                {&a, 1.0f, &ys[1]}, {&c, 0.0625f, &ys[2]}, {nullptr, weighted ? 1.0f : 0.5f, &ys[3]}};
            const Tensor* pw = weighted ? &ww : nullptr;
            if (composed)
              b.Backend::add_rms_norm_many(xx, ff, pw, 1e-6f, s, ys[0], outs);
            else
              b.add_rms_norm_many(xx, ff, pw, 1e-6f, s, ys[0], outs);
            return ys;
          };
          const std::vector<Tensor> fused = run(be, false, false), composed = run(be, false, true),
                                    host = run(cpu, true, true);
          for (size_t i = 0; i < fused.size(); i++) {
            expect_close(fused[i], composed[i], 0, fmt::format("output {} against the composed ops", i));
            expect_close(fused[i], host[i], 2e-6, fmt::format("output {} against the CPU", i));
          }
        }
  });
}

// An output projection with the residual add (and the next norm) after it, in one op: against the CPU's
// composition, in every weight layout the decode path takes, past 8 rows (composed) and at widths the GEMV fills
// unevenly; and a row's result does not depend on how many rows go with it (decode and verification agree bit for
// bit). One-row launches take the GEMV and then the norm kernel; with VATIC_FUSED_NORMS=1 the GEMV's last block
// finishes the row instead (run this test with it set too): several launches in a row check that it leaves its
// completion counter ready for the next, and rows of 2,816 that its slices and the norm kernel's registers agree.
TEST(DeviceOps, ProjectionWithResidualNorm) {
  FOR_EACH_DEVICE([](Device dev) {
    Backend& be = backend_for(dev);
    Backend& cpu = cpu_backend();
    const std::mt19937 kept = rng();  // the later tests' inputs stay what they were
    struct Size {
      int64_t N, K;
    };
    for (Size sz : {Size{7, 64}, Size{256, 2048}, Size{1536, 2048}, Size{1537, 512}, Size{2816, 256}})
      for (int bits : {0, 8, 4}) {
        const Linear W = bits ? random_quantized(0, sz.N, sz.K, bits, 64)
                              : dense(random_host({sz.N, sz.K}, DType::BF16, 0.1f));
        const Linear dW = on(dev, W);
        Tensor w = random_host({sz.N}), w2 = random_host({sz.N});
        Tensor dw = on(dev, w), dw2 = on(dev, w2);
        for (int64_t T : {8, 1, 3, 9})
          for (int variant = 0; variant < 3; variant++) {  // add_rms_norm; with the next norm; weight-less, scaled
            SCOPED_TRACE(fmt::format("N={} K={} bits {} T={} variant {}", sz.N, sz.K, bits, T, variant));
            Tensor a = random_host({T, sz.K}), x = random_host({T, sz.N});
            const bool next = variant > 0, weights = variant < 2;
            const float s = variant == 2 ? 0.5f : 1.0f;
            Tensor wy = Tensor::empty({T, sz.N}, DType::F32), wn = Tensor::empty({T, sz.N}, DType::F32);
            cpu.matmul_add_rms_norm(a, W, x, weights ? &w : nullptr, 1e-6f, s, wy, weights ? &w2 : nullptr,
                                    next ? &wn : nullptr);
            Tensor da = on(dev, a), dx = on(dev, x);
            Tensor gy = be.empty({T, sz.N}, DType::F32), gn = be.empty({T, sz.N}, DType::F32);
            be.matmul_add_rms_norm(da, dW, dx, weights ? &dw : nullptr, 1e-6f, s, gy, weights ? &dw2 : nullptr,
                                   next ? &gn : nullptr);
            expect_close(gy, wy, 2e-5, "residual");
            if (next) expect_close(gn, wn, 2e-5, "next norm");
            if (T == 1 || T > 8) continue;
            // The first row alone gives the same bits as within T rows.
            Tensor y1 = be.empty({1, sz.N}, DType::F32), n1 = be.empty({1, sz.N}, DType::F32);
            be.matmul_add_rms_norm(da.slice(0, 0, 1), dW, dx.slice(0, 0, 1), weights ? &dw : nullptr, 1e-6f, s, y1,
                                   weights ? &dw2 : nullptr, next ? &n1 : nullptr);
            expect_close(y1, gy.slice(0, 0, 1), 0, "one row against the same row among T");
            if (next) expect_close(n1, gn.slice(0, 0, 1), 0, "one row's next norm against the same row among T");
          }
      }
    rng() = kept;
  });
}

TEST(DeviceOps, Attention) {
  FOR_EACH_DEVICE([](Device dev) {
    struct Case {
      int64_t T, S, Hq, Hkv, D, Dv;
      int window, empty_every;
      bool v_in_k;  // values as the first Dv columns of the keys (GLM's latent cache)
      float amp = 1.0f;  // queries and keys scaled by it: scores of about amp² standard deviations, a peaked softmax
    };
    for (Case c : {Case{1, 1, 1, 1, 16, 16, 0, 0, false}, Case{1, 70, 8, 1, 256, 256, 0, 0, false},
                   Case{4, 19, 4, 2, 33, 17, 0, 0, false}, Case{5, 40, 8, 2, 512, 512, 8, 0, false},
                   Case{3, 30, 6, 3, 48, 48, 0, 4, false}, Case{2, 50, 20, 1, 576, 512, 0, 0, true},
                   Case{7, 300, 4, 1, 64, 64, 33, 5, false},
                   // Prompts (more than 8 queries): windows, empty slots, GLM's latent cache, head dim 1024.
                   Case{40, 40, 8, 2, 256, 256, 0, 0, false}, Case{37, 90, 4, 1, 512, 512, 16, 5, false},
                   Case{9, 9, 2, 2, 1024, 64, 0, 0, false}, Case{33, 70, 20, 1, 576, 512, 0, 3, true},
                   Case{100, 100, 2, 1, 64, 64, 7, 0, false}, Case{48, 60, 4, 2, 64, 18, 20, 0, false},
                   // Prompts of many query tiles (from four a multiprocessor, 528 on an H100 or H200, in pairs,
                   // first with last; an odd count leaves a middle tile alone), after a cached prefix, in a window.
                   Case{300, 300, 8, 1, 256, 256, 0, 3, false}, Case{290, 320, 20, 1, 576, 512, 0, 0, true},
                   Case{512, 512, 8, 2, 256, 256, 100, 0, false}, Case{1090, 1100, 8, 1, 64, 64, 0, 7, false},
                   Case{530, 560, 20, 1, 576, 512, 200, 0, true},
                   // Large scores (standard deviation 9; the products' rounding shows most where the softmax peaks).
                   Case{300, 300, 8, 1, 256, 256, 0, 0, false, 3.0f}, Case{100, 130, 8, 2, 512, 512, 0, 0, false, 3.0f},
                   Case{64, 64, 20, 1, 576, 512, 0, 0, true, 3.0f},
                   // Long contexts with few queries: the keys are split over blocks (some splits see no key).
                   Case{1, 4000, 8, 1, 256, 256, 0, 3, false}, Case{1, 1000, 8, 1, 512, 512, 512, 0, false},
                   Case{1, 2000, 20, 1, 576, 512, 0, 0, true}, Case{1, 3000, 2, 1, 64, 64, 10, 0, false},
                   // Long caches whose key heads serve 4 or 8 query heads, several queries, windows, empty slots.
                   Case{3, 2500, 8, 2, 256, 256, 0, 7, false}, Case{2, 3000, 8, 1, 512, 512, 0, 0, false},
                   Case{1, 4100, 16, 2, 128, 128, 1000, 0, false}, Case{8, 2048, 8, 2, 512, 512, 600, 3, false},
                   Case{2, 9000, 8, 1, 512, 512, 0, 5, false}, Case{1, 5000, 4, 1, 256, 256, 3000, 0, false},
                   Case{3, 2400, 4, 2, 256, 256, 0, 0, false},
                   // Sliding-window rings and short caches of more query heads (the cluster kernel's other shape).
                   Case{2, 528, 16, 8, 256, 256, 512, 3, false}, Case{1, 256, 32, 4, 512, 512, 0, 0, false},
                   Case{3, 528, 32, 16, 256, 256, 100, 0, false}}) {
      SCOPED_TRACE(fmt::format("T={} S={} Hq={} Hkv={} D={} Dv={} window={}", c.T, c.S, c.Hq, c.Hkv, c.D, c.Dv,
                               c.window));
      Tensor qbuf = random_host({c.T, c.Hq, c.D + 2}, DType::F32, c.amp);
      Tensor q = qbuf.slice(2, 2, 2 + c.D);
      Tensor k = random_host({c.S, c.Hkv, c.D}, DType::F32, c.amp);
      Tensor vbuf = random_host({c.S, c.Hkv, c.Dv});
      Tensor v = c.v_in_k ? k.slice(2, 0, c.Dv) : vbuf;
      std::vector<int32_t> kp(c.S), qp(c.T);
      for (int64_t s = 0; s < c.S; s++) kp[s] = c.empty_every && s % c.empty_every == 1 ? -1 : static_cast<int32_t>(s);
      for (int64_t t = 0; t < c.T; t++) qp[t] = static_cast<int32_t>(c.S - c.T + t);
      Tensor kpos = Tensor::from_ints(kp, {c.S}), qpos = Tensor::from_ints(qp, {c.T});
      AttentionParams p;
      p.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
      p.window = c.window;
      Tensor want = Tensor::empty({c.T, c.Hq, c.Dv}, DType::F32);
      cpu_backend().attention(q, k, v, qpos, kpos, p, want);
      Tensor dk = on(dev, k);
      Tensor dv = c.v_in_k ? dk.slice(2, 0, c.Dv) : on(dev, vbuf);
      Tensor got = backend_for(dev).empty({c.T, c.Hq, c.Dv}, DType::F32);
      backend_for(dev).attention(on(dev, qbuf).slice(2, 2, 2 + c.D), dk, dv, on(dev, qpos), on(dev, kpos), p, got);
      expect_close(got, want, 2e-5, "attention");
    }
  });
}

TEST(DeviceOps, AttentionDecodeRowsEqualVerifyRowsBitForBit) {
  // Greedy speculative decoding equals plain decoding only if a query verified among 2-8 others gets the bits it
  // gets alone (as the GEMV's rows do): however the keys are split, the split must not depend on the query count.
  FOR_EACH_DEVICE([](Device dev) {
    struct Case {
      int64_t S, Hq, D;
      int window;
      int64_t Dv = 0;  // 0: D; else the values are the keys' first Dv columns (GLM's latent cache)
    };
    for (Case c : {Case{544, 8, 256, 512}, Case{4000, 8, 512, 0}, Case{1200, 20, 64, 0}, Case{300, 2, 128, 0},
                   Case{3000, 4, 256, 700}, Case{2100, 8, 128, 0}, Case{256, 16, 512, 0}, Case{528, 32, 256, 512},
                   Case{40, 8, 64, 0}, Case{6000, 2, 256, 0}, Case{8192, 8, 256, 4000}, Case{200, 20, 576, 0, 512},
                   Case{3000, 20, 576, 0, 512}}) {
      SCOPED_TRACE(fmt::format("S={} Hq={} D={} window={} Dv={}", c.S, c.Hq, c.D, c.window, c.Dv));
      const int64_t T = 8;
      Tensor q = on(dev, random_host({T, c.Hq, c.D}));
      Tensor k = on(dev, random_host({c.S, 1, c.D}));
      Tensor v = c.Dv ? k.slice(2, 0, c.Dv) : on(dev, random_host({c.S, 1, c.D}));
      const int64_t Dv = c.Dv ? c.Dv : c.D;
      std::vector<int32_t> kp(c.S), qp(T);
      for (int64_t s = 0; s < c.S; s++) kp[s] = static_cast<int32_t>(s);
      for (int64_t t = 0; t < T; t++) qp[t] = static_cast<int32_t>(c.S - T + t);
      Tensor kpos = on(dev, Tensor::from_ints(kp, {c.S}));
      Tensor qpos = on(dev, Tensor::from_ints(qp, {T}));
      AttentionParams p;
      p.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
      p.window = c.window;
      Backend& be = backend_for(dev);
      Tensor all = be.empty({T, c.Hq, Dv}, DType::F32);
      be.attention(q, k, v, qpos, kpos, p, all);
      const Tensor all_host = ops::to_host(all);
      for (int64_t t = 0; t < T; t++) {
        Tensor one = be.empty({1, c.Hq, Dv}, DType::F32);
        be.attention(q.slice(0, t, t + 1), k, v, qpos.slice(0, t, t + 1), kpos, p, one);
        const Tensor h = ops::to_host(one);
        for (int64_t i = 0; i < c.Hq * Dv; i++)
          ASSERT_EQ(h.data<float>()[i], all_host.data<float>()[t * c.Hq * Dv + i]) << "query " << t << ", " << i;
      }
    }
  });
}

// ---- mixture of experts: the CPU against naive references, then every device against the CPU ----

struct MoeCase {
  Tensor x;          // [X, K]
  Linear w;          // [E, N, K]
  Tensor experts;    // I32 [R]
};

MoeCase moe_case(int64_t X, int64_t per, int64_t E, int64_t N, int64_t K, int bits) {
  MoeCase c;
  c.x = random_host({X, K});
  c.w = bits ? random_quantized(E, N, K, bits, 32) : dense(random_host({E, N, K}, DType::BF16, 0.1f));
  std::vector<int32_t> ex(static_cast<size_t>(X * per));
  for (auto& e : ex) e = static_cast<int32_t>(rng()() % E);
  c.experts = Tensor::from_ints(ex, {X * per});
  return c;
}

TEST(MoeOps, CpuMatmulExpertsEqualsPerRowMatmul) {
  for (int bits : {0, 8, 4})
    for (int64_t per : {1, 3}) {
      MoeCase c = moe_case(6, per, 5, 17, 64, bits);
      const int64_t R = c.experts.numel();
      Tensor y = Tensor::empty({R, 17}, DType::F32);
      cpu_backend().matmul_experts(c.x, c.w, c.experts, y);
      for (int64_t r = 0; r < R; r++) {
        Tensor one = Tensor::empty({1, 17}, DType::F32);
        cpu_backend().matmul(c.x.slice(0, r / per, r / per + 1), c.w.select(c.experts.data<int32_t>()[r]), one, false);
        for (int64_t n = 0; n < 17; n++) EXPECT_FLOAT_EQ(y.data<float>()[r * 17 + n], one.data<float>()[n]);
      }
    }
}

TEST(MoeOps, CpuCombineRows) {
  Tensor rows = random_host({6, 5}), w = random_host({2, 3});
  Tensor out = Tensor::empty({2, 5}, DType::F32);
  cpu_backend().combine_rows(rows, w, out);
  for (int64_t t = 0; t < 2; t++)
    for (int64_t d = 0; d < 5; d++) {
      double s = 0;
      for (int64_t j = 0; j < 3; j++) s += double(w.data<float>()[t * 3 + j]) * rows.data<float>()[(t * 3 + j) * 5 + d];
      EXPECT_NEAR(out.data<float>()[t * 5 + d], s, 1e-5);
    }
}

TEST(MoeOps, CpuRouteSoftmaxAndGroupedSigmoid) {
  // Softmax routing with renormalisation and per-expert scales.
  Tensor a = Tensor::from_floats({0.1f, 2.0f, -1.0f, 1.5f, 0.3f, 2.0f}, {1, 6});
  Tensor es = Tensor::from_floats({1, 2, 3, 4, 5, 6}, {6});
  RouteParams p;
  p.k = 3;
  p.expert_scale = &es;
  Tensor w = Tensor::empty({1, 3}, DType::F32), e = Tensor::empty({1, 3}, DType::I32);
  cpu_backend().route(a, p, w, e);
  EXPECT_EQ(e.data<int32_t>()[0], 1);  // the tie between experts 1 and 5 goes to the lower index
  EXPECT_EQ(e.data<int32_t>()[1], 5);
  EXPECT_EQ(e.data<int32_t>()[2], 3);
  const double e1 = std::exp(2.0), e3 = std::exp(1.5), sum = 2 * e1 + e3;
  EXPECT_NEAR(w.data<float>()[0], e1 / sum * 2, 1e-6);
  EXPECT_NEAR(w.data<float>()[1], e1 / sum * 6, 1e-6);
  EXPECT_NEAR(w.data<float>()[2], e3 / sum * 4, 1e-6);
  // Grouped sigmoid: 4 groups of 2, keep 1 group; the bias picks, the unbiased sigmoid weighs.
  Tensor b = Tensor::from_floats({0, 0, 0, 0, 0, 0, 5, 0}, {8});
  Tensor a2 = Tensor::from_floats({3, 3, 0, 0, 0, 0, -2, 0}, {1, 8});
  RouteParams g;
  g.kind = RouteParams::Sigmoid;
  g.k = 2;
  g.bias = &b;
  g.groups = 4;
  g.groups_kept = 1;
  g.scale = 2.5f;
  Tensor w2 = Tensor::empty({1, 2}, DType::F32), e2 = Tensor::empty({1, 2}, DType::I32);
  cpu_backend().route(a2, g, w2, e2);
  EXPECT_EQ(e2.data<int32_t>()[0], 6);  // group 3 scores 5 + sigmoid(-2) + sigmoid(0) > group 0's 2·sigmoid(3)
  EXPECT_EQ(e2.data<int32_t>()[1], 7);
  const double s6 = 1 / (1 + std::exp(2.0)), s7 = 0.5;
  EXPECT_NEAR(w2.data<float>()[0], s6 / (s6 + s7) * 2.5, 1e-6);
  EXPECT_NEAR(w2.data<float>()[1], s7 / (s6 + s7) * 2.5, 1e-6);
}

TEST(DeviceOps, MixtureOfExperts) {
  FOR_EACH_DEVICE([](Device dev) {
    // K = 1,440: 180 chunks of 8 inputs, several rounds of a bf16 routed GEMV's chunks for every lane.
    for (int64_t K : {128, 1440})
      for (int bits : {0, 8, 4})
        for (int64_t per : {1, 4}) {
          SCOPED_TRACE(fmt::format("K {} bits {} per {}", K, bits, per));
          MoeCase c = moe_case(7, per, 6, 33, K, bits);
          const int64_t R = c.experts.numel();
          Tensor want = Tensor::empty({R, 33}, DType::F32);
          cpu_backend().matmul_experts(c.x, c.w, c.experts, want);
          Tensor got = backend_for(dev).empty({R, 33}, DType::F32);
          backend_for(dev).matmul_experts(on(dev, c.x), on(dev, c.w), on(dev, c.experts), got);
          expect_close(got, want, 2e-5, "matmul_experts");
          Tensor wts = random_host({7, per});
          Tensor cw = Tensor::empty({7, 33}, DType::F32);
          cpu_backend().combine_rows(want, wts, cw);
          Tensor cg = backend_for(dev).empty({7, 33}, DType::F32);
          backend_for(dev).combine_rows(got, on(dev, wts), cg);
          expect_close(cg, cw, 2e-5, "combine_rows");
          // The gate and up halves of one stacked matrix through the gated op: the composed ops' bits on this
          // device, and close to the CPU (from a copy of the generator, so that the routing cases' inputs
          // stay as they were).
          const std::mt19937 kept = rng();
          MoeCase gu = moe_case(7, per, 6, 66, K, bits);
          Backend& be = backend_for(dev);
          const Linear dgu = on(dev, gu.w);
          const Tensor dx = on(dev, gu.x), dex = on(dev, gu.experts);
          for (Unary act : {Unary::Silu, Unary::GeluTanh}) {
            Tensor fused = be.empty({R, 33}, DType::F32), composed = be.empty({R, 33}, DType::F32);
            Tensor host = Tensor::empty({R, 33}, DType::F32);
            be.matmul_experts_gated(dx, dgu.rows(0, 33), dgu.rows(33, 66), dex, act, fused);
            be.Backend::matmul_experts_gated(dx, dgu.rows(0, 33), dgu.rows(33, 66), dex, act, composed);
            cpu_backend().matmul_experts_gated(gu.x, gu.w.rows(0, 33), gu.w.rows(33, 66), gu.experts, act,
                                               host);
            expect_close(fused, composed, 0, "matmul_experts_gated against the composed ops");
            expect_close(fused, host, 2e-5, "matmul_experts_gated against the CPU");
          }
          rng() = kept;
        }
    for (int kind : {0, 1})
      for (int64_t E : {64, 1000}) {  // one-pass ranking, and k rounds for routers of more than 512 experts
        SCOPED_TRACE(fmt::format("route kind {} E {}", kind, E));
        const int64_t T = 9;
        Tensor a = random_host({T, E}, DType::F32, 2.0f);
        for (int64_t i = 0; i < T * E; i += 7) a.data<float>()[i] = 0.5f;  // ties
        Tensor bias = random_host({E}, DType::F32, 0.1f), es = random_host({E});
        RouteParams p;
        p.kind = kind ? RouteParams::Sigmoid : RouteParams::Softmax;
        p.k = 6;
        p.scale = 1.8f;
        p.groups = kind ? 8 : 1;
        p.groups_kept = kind ? 3 : 1;
        if (kind)
          p.bias = &bias;
        else
          p.expert_scale = &es;
        Tensor ww = Tensor::empty({T, 6}, DType::F32), we = Tensor::empty({T, 6}, DType::I32);
        cpu_backend().route(a, p, ww, we);
        Tensor dbias = on(dev, bias), des = on(dev, es);
        RouteParams dp = p;
        dp.bias = p.bias ? &dbias : nullptr;
        dp.expert_scale = p.expert_scale ? &des : nullptr;
        Tensor gw = backend_for(dev).empty({T, 6}, DType::F32), ge = backend_for(dev).empty({T, 6}, DType::I32);
        backend_for(dev).route(on(dev, a), dp, gw, ge);
        expect_close(ge, we, 0, "route experts");
        expect_close(gw, ww, 2e-6, "route weights");
      }
  });
}

TEST(DeviceOps, MatmulExpertsRowsKeepTheirBitsAmongOthers) {
  // A verification routes several tokens at once, often to the same experts: each token's rows must have the bits
  // they get when it is the only input (as decoding it alone computes them), and the device counts each expert
  // of a call once while profiling.
  FOR_EACH_DEVICE([](Device dev) {
    for (int bits : {0, 8, 4})
      for (int64_t per : {1, 2, 4}) {
        SCOPED_TRACE(fmt::format("bits {} per {}", bits, per));
        const int64_t X = 19, E = per + 1, N = 41, K = 256;  // more than 8 rows for each expert
        MoeCase c = moe_case(X, per, E, N, K, bits);
        if (per > 1)  // one input row's experts are distinct, as routing makes them
          for (int64_t i = 0; i < X; i++)
            for (int64_t j = 0; j < per; j++)
              c.experts.data<int32_t>()[i * per + j] = static_cast<int32_t>((i + j) % E);
        const int64_t R = X * per;
        Backend& be = backend_for(dev);
        const Tensor dx = on(dev, c.x), dex = on(dev, c.experts);
        const Linear dw = on(dev, c.w);
        Tensor all = be.empty({R, N}, DType::F32);
        be.take_counts();
        be.set_profiling(true);
        be.matmul_experts(dx, dw, dex, all);
        be.set_profiling(false);
        be.take_profile();
        const auto counts = be.take_counts();
        const std::set<int32_t> distinct(c.experts.data<int32_t>(), c.experts.data<int32_t>() + R);
        ASSERT_EQ(counts.size(), 1u);
        EXPECT_EQ(counts[0].first, "distinct experts");
        EXPECT_EQ(counts[0].second, static_cast<int64_t>(distinct.size()));
        const Tensor all_host = ops::to_host(all);
        for (int64_t i = 0; i < X; i++) {
          Tensor one = be.empty({per, N}, DType::F32);
          be.matmul_experts(dx.slice(0, i, i + 1), dw, dex.slice(0, i * per, (i + 1) * per), one);
          const Tensor h = ops::to_host(one);
          for (int64_t k = 0; k < per * N; k++)
            ASSERT_EQ(h.data<float>()[k], all_host.data<float>()[i * per * N + k]) << "input " << i << ", " << k;
        }
        Tensor want = Tensor::empty({R, N}, DType::F32);
        cpu_backend().matmul_experts(c.x, c.w, c.experts, want);
        expect_close(all, want, 2e-5, "matmul_experts");
      }
  });
}

TEST(MoeOps, CpuGatherRowsAndScatter) {
  Tensor table = Tensor::from_ints({0, 1, 2, 10, 11, 12, 20, 21, 22}, {3, 3});
  Tensor out = Tensor::empty({2, 3}, DType::I32);
  cpu_backend().gather_rows(table, Tensor::from_ints({2, 0}, {2}), out);
  EXPECT_EQ(std::vector<int32_t>(out.data<int32_t>(), out.data<int32_t>() + 6), (std::vector<int32_t>{20, 21, 22, 0, 1, 2}));
  EXPECT_THROW(cpu_backend().gather_rows(table, Tensor::from_ints({3}, {1}), Tensor::empty({1, 3}, DType::I32)), Error);
  Tensor v = Tensor::from_floats({5, 6}, {2});
  Tensor dst = Tensor::from_floats({0, 0, 0, 0}, {4});
  cpu_backend().scatter(v, Tensor::from_ints({3, 1}, {2}), dst);
  EXPECT_EQ(std::vector<float>(dst.data<float>(), dst.data<float>() + 4), (std::vector<float>{0, 6, 0, 5}));
}

TEST(DeviceOps, GatherRowsAndScatter) {
  FOR_EACH_DEVICE([](Device dev) {
    Tensor table = random_host({64, 37}, DType::I32);
    Tensor ids = Tensor::from_ints({63, 0, 5, 5, 17}, {5});
    Tensor want = Tensor::empty({5, 37}, DType::I32);
    cpu_backend().gather_rows(table, ids, want);
    Tensor got = backend_for(dev).empty({5, 37}, DType::I32);
    backend_for(dev).gather_rows(on(dev, table), on(dev, ids), got);
    expect_close(got, want, 0, "gather_rows");
    std::vector<int32_t> perm(1000);
    for (int i = 0; i < 1000; i++) perm[i] = (i * 7919) % 1000;
    Tensor index = Tensor::from_ints(std::vector<int32_t>(perm.begin(), perm.begin() + 300), {300});
    Tensor vals = random_host({300});
    Tensor out_want = random_host({1000}), out_got = on(dev, out_want);
    cpu_backend().scatter(vals, index, out_want);
    backend_for(dev).scatter(on(dev, vals), on(dev, index), out_got);
    expect_close(out_got, out_want, 0, "scatter");
  });
}

// A vocabulary of V tokens in C clusters of `per` (a fixed scramble of the ids), as the Gemma 4 assistant's head
// groups them.
Tensor cluster_table(int64_t C, int64_t per) {
  const int64_t V = C * per;
  std::vector<int32_t> ids(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; i++) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % V);
  return Tensor::from_ints(ids, {C, per});
}

// The head over chosen clusters against its definition: each chosen cluster's tokens get y · table[token] (summed
// here in double over the table's rows as `embedding` widens them), every other token -inf; for bf16 rows (read in
// place) and int8 rows (the default's gather and matmul).
TEST(MoeOps, CpuMaskedLogits) {
  OwnRandom own(31);
  const int64_t C = 8, per = 8, V = C * per, K = 64;
  for (int bits : {0, 8}) {
    SCOPED_TRACE(fmt::format("bits {}", bits));
    const Linear table = bits ? random_quantized(0, V, K, bits, 32) : dense(random_host({V, K}, DType::BF16));
    Tensor y = random_host({1, K});
    Tensor groups = cluster_table(C, per), clusters = Tensor::from_ints({5, 2}, {2});
    Tensor got = Tensor::empty({1, V}, DType::F32);
    cpu_backend().masked_logits(y, table, groups, clusters, got);
    Tensor rows = Tensor::empty({V, K}, DType::F32);
    std::vector<int32_t> all(static_cast<size_t>(V));
    std::iota(all.begin(), all.end(), 0);
    cpu_backend().embedding(table, Tensor::from_ints(all, {V}), 1.0f, rows);
    std::vector<bool> chosen(static_cast<size_t>(V), false);
    for (int c : {5, 2})
      for (int64_t j = 0; j < per; j++) chosen[static_cast<size_t>(groups.data<int32_t>()[c * per + j])] = true;
    for (int64_t v = 0; v < V; v++) {
      const float g = got.data<float>()[v];
      if (!chosen[static_cast<size_t>(v)]) {
        EXPECT_EQ(g, -std::numeric_limits<float>::infinity()) << "token " << v;
        continue;
      }
      double want = 0;
      for (int64_t k = 0; k < K; k++) want += double(y.data<float>()[k]) * double(rows.data<float>()[v * K + k]);
      EXPECT_NEAR(g, want, 1e-5 * std::max(1.0, std::fabs(want))) << "token " << v;
    }
    EXPECT_THROW(cpu_backend().masked_logits(y, table, groups, Tensor::from_ints({8}, {1}), got), Error);
  }
}

// The device's one-pass head against the CPU's composition: bf16 rows in 16-byte chunks (clusters of more tokens
// than a block takes), rows of a width that is not (the general row dot), quantized tables, one cluster and all.
TEST(DeviceOps, MaskedLogits) {
  FOR_EACH_DEVICE([](Device dev) {
    OwnRandom own(32);
    struct Case {
      int64_t C, per, K;
      int bits;
      std::vector<int32_t> clusters;
    };
    for (const Case& c : {Case{256, 128, 256, 0, {3, 255, 0, 17, 128, 64, 9, 200}}, Case{64, 5, 40, 0, {63, 1, 2}},
                          Case{32, 40, 128, 8, {31, 0, 7}}, Case{32, 40, 128, 4, {5}},
                          Case{4, 3, 16, 0, {3, 2, 1, 0}}}) {
      SCOPED_TRACE(fmt::format("C={} per={} K={} bits {} k={}", c.C, c.per, c.K, c.bits, c.clusters.size()));
      const int64_t V = c.C * c.per;
      const Linear table = c.bits ? random_quantized(0, V, c.K, c.bits, 64)
                                  : dense(random_host({V, c.K}, DType::BF16));
      Tensor y = random_host({1, c.K}), groups = cluster_table(c.C, c.per);
      Tensor clusters = Tensor::from_ints(c.clusters, {static_cast<int64_t>(c.clusters.size())});
      Tensor want = Tensor::empty({1, V}, DType::F32);
      cpu_backend().masked_logits(y, table, groups, clusters, want);
      Tensor got = backend_for(dev).empty({1, V}, DType::F32);
      backend_for(dev).masked_logits(on(dev, y), on(dev, table), on(dev, groups), on(dev, clusters), got);
      expect_close(got, want, 2e-5, "masked_logits");
    }
    // A cluster id outside the table is an error at the next synchronisation, not a crash.
    Tensor got = backend_for(dev).empty({1, 12}, DType::F32);
    backend_for(dev).masked_logits(on(dev, random_host({1, 16})), on(dev, dense(random_host({12, 16}, DType::BF16))),
                                   on(dev, cluster_table(4, 3)), on(dev, Tensor::from_ints({4}, {1})), got);
    EXPECT_THROW(ops::to_host(got), InvalidInput);
  });
}

TEST(KvOps, CpuKvWriteRingAndForget) {
  // Two tokens at positions 5 and 6 into a ring of 4 slots: slots 1 and 2.
  Tensor k = Tensor::from_floats({1, 2, 3, 4}, {2, 1, 2}), v = Tensor::from_floats({5, 6}, {2, 1, 1});
  Tensor keys = Tensor::from_floats(std::vector<float>(8, 0.0f), {4, 1, 2});
  Tensor values = Tensor::from_floats(std::vector<float>(4, 0.0f), {4, 1, 1});
  Tensor slots = Tensor::from_ints({-1, -1, -1, 3}, {4});
  cpu_backend().kv_write(k, v, Tensor::from_ints({5, 6}, {2}), keys, values, slots, true);
  EXPECT_EQ(std::vector<float>(keys.data<float>(), keys.data<float>() + 8), (std::vector<float>{0, 0, 1, 2, 3, 4, 0, 0}));
  EXPECT_EQ(std::vector<float>(values.data<float>(), values.data<float>() + 4), (std::vector<float>{0, 5, 6, 0}));
  EXPECT_EQ(std::vector<int32_t>(slots.data<int32_t>(), slots.data<int32_t>() + 4), (std::vector<int32_t>{-1, 5, 6, 3}));
  // Without the ring a position past the last slot is an error.
  EXPECT_THROW(cpu_backend().kv_write(k, v, Tensor::from_ints({3, 4}, {2}), keys, values, slots, false), Error);
  cpu_backend().forget_positions(slots, 6);
  EXPECT_EQ(std::vector<int32_t>(slots.data<int32_t>(), slots.data<int32_t>() + 4), (std::vector<int32_t>{-1, 5, -1, 3}));
}

TEST(DeviceOps, KvWriteAndForgetPositions) {
  FOR_EACH_DEVICE([](Device dev) {
    for (bool ring : {false, true}) {
      const int64_t C = 37, H = 3, D = 20, Dv = 12, T = 5;
      // k as a strided view (every other head of a wider tensor), v contiguous.
      Tensor kwide = random_host({T, 2 * H, D});
      Tensor k = kwide.slice(1, 0, H), v = random_host({T, H, Dv});
      std::vector<int32_t> pos = ring ? std::vector<int32_t>{34, 35, 36, 37, 38} : std::vector<int32_t>{3, 4, 5, 6, 7};
      Tensor positions = Tensor::from_ints(pos, {T});
      Tensor keys = random_host({C, H, D}), values = random_host({C, H, Dv}), slots = random_host({C}, DType::I32);
      Tensor dk = on(dev, keys), dv = on(dev, values), ds = on(dev, slots);
      cpu_backend().kv_write(k, v, positions, keys, values, slots, ring);
      backend_for(dev).kv_write(on(dev, kwide).slice(1, 0, H), on(dev, v), on(dev, positions), dk, dv, ds, ring);
      expect_close(dk, keys, 0, "kv_write keys");
      expect_close(dv, values, 0, "kv_write values");
      expect_close(ds, slots, 0, "kv_write slots");
      cpu_backend().forget_positions(slots, 500);
      backend_for(dev).forget_positions(ds, 500);
      expect_close(ds, slots, 0, "forget_positions");
    }
  });
}

TEST(DeviceOps, RecordedGraphsReplayWithNewInputs) {
  FOR_EACH_DEVICE([](Device dev) {
    Backend& be = backend_for(dev);
    // y = (x + 1) * 2 recorded once (nothing runs), replayed, then replayed again after x changes in place.
    Tensor x = on(dev, Tensor::from_floats({1, 2, 3}, {3}));
    Tensor one = on(dev, Tensor::from_floats({1}, {1}));
    Tensor y;
    auto g = be.record([&] { y = ops::scale(ops::add(x, one), 2.0f); });
    ASSERT_TRUE(g) << "no graphs on " << dev.str();
    g->replay();
    expect_close(y, Tensor::from_floats({4, 6, 8}, {3}), 0, "first replay");
    ops::copy_into(on(dev, Tensor::from_floats({10, 20, 30}, {3})), x);
    // Work between replays must not reuse the graph's memory.
    for (int i = 0; i < 8; i++) ops::add(x, x);
    g->replay();
    expect_close(y, Tensor::from_floats({22, 42, 62}, {3}), 0, "second replay");
    // Host copies cannot be recorded: the recording fails cleanly and the device keeps working.
    EXPECT_THROW(be.record([&] { ops::add(x, on(dev, Tensor::from_floats({1}, {1}))); }), Error);
    EXPECT_THROW(be.record([&] { ops::to_host(x); }), Error);
    expect_close(ops::add(x, one), Tensor::from_floats({11, 21, 31}, {3}), 0, "after failed recordings");
    g.reset();
  });
  // The CPU has no graphs: record() says so and runs nothing.
  bool ran = false;
  EXPECT_FALSE(cpu_backend().record([&] { ran = true; }));
  EXPECT_FALSE(ran);
}

TEST(SamplingOps, CpuLogsumexpMaskPenalizeAndFloatGather) {
  Tensor a = Tensor::from_floats({1, 2, 3, -INFINITY, -INFINITY, -INFINITY}, {2, 3});
  Tensor out = Tensor::empty({2}, DType::F32);
  cpu_backend().logsumexp(a, 0.5f, out);
  EXPECT_NEAR(out.data<float>()[0], std::log(std::exp(0.5) + std::exp(1.0) + std::exp(1.5)), 1e-6);
  EXPECT_EQ(out.data<float>()[1], -INFINITY);
  Tensor row = Tensor::from_floats({1, 2, 3, 4, 5}, {5});
  ops::mask_tokens(row, {0b10110});
  EXPECT_EQ(ops::to_vector(row), (std::vector<float>{-INFINITY, 2, 3, -INFINITY, 5}));
  Tensor p = Tensor::from_floats({2, -2, 3, 4}, {4});
  ops::penalize(p, {0, 1, 9, 3}, {1, 2, 1, 3}, 2.0f, 0.5f, 0.25f);
  EXPECT_EQ(ops::to_vector(p), (std::vector<float>{1 - 0.5f - 0.25f, -4 - 0.5f - 0.5f, 3, 2 - 0.5f - 0.75f}));
  Tensor g = ops::gather_rows(Tensor::from_floats({7, 8, 9}, {3, 1}), Tensor::from_ints({2, 0}, {2}));
  EXPECT_EQ(g.dtype(), DType::F32);
  EXPECT_EQ(ops::to_vector(g), (std::vector<float>{9, 7}));
  // Residual mass: Σ max(0, e^(l_p/2 - 1) - e^(l_q - 2)) per row; -inf counts as probability 0.
  Tensor lp = Tensor::from_floats({0, 2, 4, -INFINITY, 1, 1}, {2, 3});
  Tensor lq = Tensor::from_floats({1, 3, -INFINITY, 0, 1, 5}, {2, 3});
  Tensor mass = ops::residual_mass(lp, lq, 0.5f, 1.0f, 1.0f, 2.0f);
  auto r = [](double a, double b) { return std::max(0.0, std::exp(a / 2 - 1) - std::exp(b - 2)); };
  EXPECT_NEAR(ops::to_vector(mass)[0], r(0, 1) + r(2, 3) + std::exp(4.0 / 2 - 1), 1e-6);
  EXPECT_NEAR(ops::to_vector(mass)[1], r(1, 1) + r(1, 5), 1e-6);
}

TEST(DeviceOps, SamplingOps) {
  FOR_EACH_DEVICE([](Device dev) {
    Backend& cpu = cpu_backend();
    Backend& be = backend_for(dev);
    // Top-k of the sampler's sizes over a vocabulary, with ties and -inf (masked) columns.
    for (int64_t N : {300, 2049, 262144}) {
      Tensor t = random_host({3, N});
      for (int64_t i = 0; i < N; i += 3) t.data<float>()[i] = 0.25f;
      for (int64_t i = 1; i < N; i += 7) t.data<float>()[i] = -INFINITY;
      for (int k : {17, 40, 64, 256, 1000}) {
        if (k > N) continue;
        SCOPED_TRACE(fmt::format("N={} k={}", N, k));
        Tensor wv = Tensor::empty({3, k}, DType::F32), wi = Tensor::empty({3, k}, DType::I32);
        cpu.topk(t, k, wv, wi);
        Tensor gv = be.empty({3, k}, DType::F32), gi = be.empty({3, k}, DType::I32);
        be.topk(on(dev, t), k, gv, gi);
        expect_close(gv, wv, 0, "topk values");
        expect_close(gi, wi, 0, "topk indices");
      }
    }
    // The residual mass per block of two rows (the draw after a rejected draft), with -inf in either.
    {
      Tensor p = random_host({5, 1024}, DType::F32, 2.0f), q = random_host({5, 1024}, DType::F32, 2.0f);
      for (int64_t i = 0; i < p.numel(); i += 11) p.data<float>()[i] = -INFINITY;
      for (int64_t i = 3; i < q.numel(); i += 13) q.data<float>()[i] = -INFINITY;
      Tensor want = Tensor::empty({5}, DType::F32), got = be.empty({5}, DType::F32);
      cpu.residual_mass(p, q, 0.8f, 9.5f, 1.25f, 11.0f, want);
      be.residual_mass(on(dev, p), on(dev, q), 0.8f, 9.5f, 1.25f, 11.0f, got);
      expect_close(got, want, 1e-5, "residual_mass");
    }
    // A row with fewer finite values than k: the -inf ones follow in index order.
    {
      Tensor t = Tensor::empty({1, 5000}, DType::F32);
      for (int64_t i = 0; i < 5000; i++) t.data<float>()[i] = i % 100 == 0 ? float(i) : -INFINITY;
      Tensor wv = Tensor::empty({1, 100}, DType::F32), wi = Tensor::empty({1, 100}, DType::I32);
      cpu.topk(t, 100, wv, wi);
      Tensor gv = be.empty({1, 100}, DType::F32), gi = be.empty({1, 100}, DType::I32);
      be.topk(on(dev, t), 100, gv, gi);
      expect_close(gv, wv, 0, "topk values (-inf)");
      expect_close(gi, wi, 0, "topk indices (-inf)");
    }
    // logsumexp at several temperatures, and an all -inf row.
    Tensor x = random_host({4, 262144}, DType::F32, 3.0f);
    for (int64_t i = 0; i < 262144; i++) x.data<float>()[3 * 262144 + i] = -INFINITY;
    for (float scale : {1.0f, 1.0f / 0.7f, 1.0f / 1.5f}) {
      Tensor want = Tensor::empty({4}, DType::F32), got = be.empty({4}, DType::F32);
      cpu.logsumexp(x, scale, want);
      be.logsumexp(on(dev, x), scale, got);
      expect_close(got, want, 2e-6, "logsumexp");
    }
    // Mask and penalties in place on a row; a value gather of single logits.
    const int64_t V = 262144 + 37;
    Tensor row = random_host({V});
    std::vector<uint64_t> bits((V + 63) / 64);
    for (auto& w : bits) w = (uint64_t(rng()()) << 32) | rng()();
    Tensor want = ops::to_device(row, Device::CPU), got = on(dev, row);
    want = ops::contiguous(ops::scale(want, 1.0f));  // a copy
    ops::mask_tokens(want, bits);
    ops::mask_tokens(got, bits);
    expect_close(got, want, 0, "mask_tokens");
    std::vector<int32_t> ids = {0, 5, 77, 262144, 262180, -3, int32_t(V + 5)}, counts = {1, 3, 2, 7, 1, 1, 1};
    for (int i = 0; i < 200; i++) {
      ids.push_back(1000 + i * 131);
      counts.push_back(1 + i % 5);
    }
    Tensor pw = random_host({V}), pg = on(dev, pw);
    ops::penalize(pw, ids, counts, 1.3f, 0.37f, 0.113f);
    ops::penalize(pg, ids, counts, 1.3f, 0.37f, 0.113f);
    expect_close(pg, pw, 0, "penalize");
    Tensor idx = Tensor::from_ints({5, 262144, 0, 77}, {4});
    expect_close(ops::gather_rows(on(dev, pw.reshape({V, 1})), on(dev, idx)), ops::gather_rows(pw.reshape({V, 1}), idx),
                 0, "gather_rows F32");
  });
}

TEST(DeviceOps, OpsRefuseInputsOnDifferentDevices) {
  FOR_EACH_DEVICE([](Device dev) {
    Tensor a = on(dev, random_host({2, 3})), b = random_host({2, 3});
    try {
      ops::add(a, b);
      FAIL() << "mixed devices accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("different devices"), std::string::npos) << e.what();
    }
    EXPECT_THROW(ops::matmul(b, dense(on(dev, random_host({4, 3})))), Error);
  });
}

TEST(DeviceRegistry, NamesWhatTheMachineHas) {
  auto devs = available_devices();
  ASSERT_FALSE(devs.empty());
  EXPECT_TRUE(devs.front().is_cpu());
  EXPECT_EQ(&backend_for(Device::CPU), &cpu_backend());
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cpu").str(), "cpu");
  EXPECT_THROW(Device::parse("tpu"), InvalidInput);
  EXPECT_THROW(Device::parse("cuda:-1"), InvalidInput);
  EXPECT_THROW(Device::parse("cuda:x"), InvalidInput);
  try {
    backend_for(Device::cuda(static_cast<int>(devs.size()) + 7));
    FAIL() << "an absent device has a backend";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << "the error lists what there is: " << e.what();
  }
  EXPECT_EQ(resolve_device("cpu"), Device::CPU);
}

}  // namespace
}  // namespace vatic
