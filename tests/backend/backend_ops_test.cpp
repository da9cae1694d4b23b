// CPU backend ops against naive double-precision references on random inputs: every available instruction-set
// path (generic / avx2 / avx512, switched with cpu::set_isa), odd sizes, strided inputs and outputs, dense and
// group-wise quantized matmul, attention (GQA, windows, empty slots), rope (neox and interleaved) and the
// elementwise ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/simd.h"
#include "tensor/tensor.h"

namespace vatic {
namespace {

std::mt19937& rng() {
  static std::mt19937 g(12345);
  return g;
}

Tensor random_tensor(const Shape& shape, DType dtype = DType::F32, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape, dtype);
  std::normal_distribution<float> d(0.0f, scale);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; i++) {
    float v = d(rng());
    switch (dtype) {
      case DType::F32: t.data<float>()[i] = v; break;
      case DType::BF16: t.data<uint16_t>()[i] = f32_to_bf16(v); break;
      case DType::F16: t.data<uint16_t>()[i] = f32_to_f16(v); break;
      default: ADD_FAILURE() << "unsupported dtype";
    }
  }
  return t;
}

// Element (strided) of a 2-D or 3-D tensor as double.
double at(const Tensor& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0, d = 0;
  for (int64_t i : idx) off += i * t.stride(static_cast<int>(d++));
  switch (t.dtype()) {
    case DType::F32: return t.data<float>()[off];
    case DType::BF16: return bf16_to_f32(t.data<uint16_t>()[off]);
    case DType::F16: return f16_to_f32(t.data<uint16_t>()[off]);
    case DType::I32: return t.data<int32_t>()[off];
    default: return NAN;
  }
}

// Runs `body` once per instruction set this CPU supports, restoring the default afterwards.
template <typename F>
void for_each_isa(F&& body) {
  const std::string before = cpu::kernels().isa;
  for (const auto& isa : cpu::available_isas()) {
    SCOPED_TRACE("isa " + isa);
    ASSERT_TRUE(cpu::set_isa(isa));
    ASSERT_EQ(std::string(cpu::kernels().isa), isa);
    body();
  }
  cpu::set_isa(before);
}

// The same, once per count of streams a decode step reads a large matrix as (cpu::decode_streams).
template <typename F>
void for_each_isa_and_streams(F&& body) {
  const int before = cpu::decode_streams();
  for (int streams : {2, 4}) {
    SCOPED_TRACE("decode streams " + std::to_string(streams));
    ASSERT_TRUE(cpu::set_decode_streams(streams));
    ASSERT_EQ(cpu::decode_streams(), streams);
    for_each_isa(body);
  }
  cpu::set_decode_streams(before);
}

TEST(CpuIsa, DecodeStreamsAreTwoOrFour) {
  const int before = cpu::decode_streams();
  EXPECT_TRUE(before == 2 || before == 4);
  EXPECT_FALSE(cpu::set_decode_streams(3));
  EXPECT_FALSE(cpu::set_decode_streams(0));
  EXPECT_EQ(cpu::decode_streams(), before);
  EXPECT_TRUE(cpu::set_decode_streams(before == 4 ? 2 : 4));
  EXPECT_NE(cpu::decode_streams(), before);
  cpu::set_decode_streams(before);
}

TEST(CpuIsa, ListsGenericAndSwitches) {
  auto isas = cpu::available_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), "generic");
  EXPECT_FALSE(cpu::set_isa("sse9"));
  const std::string before = cpu::kernels().isa;
  EXPECT_TRUE(cpu::set_isa("generic"));
  EXPECT_STREQ(cpu::kernels().isa, "generic");
  cpu::set_isa(before);
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    EXPECT_NE(std::find(isas.begin(), isas.end(), "avx512"), isas.end());
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_NE(std::find(isas.begin(), isas.end(), "avx2"), isas.end());
  }
#endif
}

// The int4 activation permutation comes from the kernel table of each instruction set: per 32-input chunk the
// even inputs, then the odd ones; a tail under 32 inputs is left as it was; rows in parallel or not.
TEST(CpuIsa, PermuteInt4ActivationsPerIsa) {
  for_each_isa([&] {
    ASSERT_NE(cpu::kernels().permute_int4_row, nullptr);
    for (int64_t K : {int64_t{32}, int64_t{64}, int64_t{80}, int64_t{1024}}) {
      for (int64_t T : {int64_t{1}, int64_t{3}, int64_t{40}}) {
        SCOPED_TRACE("K=" + std::to_string(K) + " T=" + std::to_string(T));
        const int64_t ldx = K + 5;
        std::vector<float> x(static_cast<size_t>(T * ldx)), out(static_cast<size_t>(T * K), -1.0f);
        for (size_t i = 0; i < x.size(); i++) x[i] = static_cast<float>(i) + 0.5f;
        cpu::permute_int4_activations(x.data(), ldx, T, K, out.data());
        for (int64_t t = 0; t < T; t++)
          for (int64_t k = 0; k < K; k++) {
            const int64_t c = k / 32 * 32, j = k % 32;
            const float want = c + 32 <= K ? x[t * ldx + c + (j < 16 ? 2 * j : 2 * (j - 16) + 1)] : -1.0f;
            ASSERT_EQ(out[t * K + k], want) << t << ", " << k;
          }
        std::vector<float> row(static_cast<size_t>(K), -1.0f);
        cpu::kernels().permute_int4_row(x.data(), K, row.data());
        for (int64_t k = 0; k < K; k++) ASSERT_EQ(row[k], out[k]) << k;
      }
    }
  });
}

// y = x · Wᵀ in double, and Σ|x·w| per output (the scale of the rounding error of an f32 sum).
void reference_matmul(const Tensor& x, const std::vector<double>& w /*[N*K]*/, int64_t N, std::vector<double>& y,
                      std::vector<double>& mag) {
  const int64_t T = x.dim(0), K = x.dim(1);
  y.assign(static_cast<size_t>(T * N), 0.0);
  mag.assign(static_cast<size_t>(T * N), 0.0);
  for (int64_t t = 0; t < T; t++)
    for (int64_t n = 0; n < N; n++) {
      double s = 0, m = 0;
      for (int64_t k = 0; k < K; k++) {
        double p = at(x, {t, k}) * w[n * K + k];
        s += p;
        m += std::fabs(p);
      }
      y[t * N + n] = s;
      mag[t * N + n] = m;
    }
}

// Compares y (possibly strided) with ref (+ `prior` when accumulating): |got − want| <= tol · Σ|x·w| + 1e-6.
void expect_close(const Tensor& y, const std::vector<double>& ref, const std::vector<double>& mag,
                  const std::vector<double>& prior, double tol) {
  const int64_t T = y.dim(0), N = y.dim(1);
  int bad = 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t n = 0; n < N; n++) {
      double want = ref[t * N + n] + (prior.empty() ? 0.0 : prior[t * N + n]);
      double got = at(y, {t, n});
      double lim = tol * mag[t * N + n] + 1e-6;
      if (!(std::fabs(got - want) <= lim) && bad++ < 5)
        ADD_FAILURE() << "y[" << t << ", " << n << "] = " << got << ", want " << want << " (limit " << lim << ")";
    }
  EXPECT_EQ(bad, 0);
}

struct Size {
  int64_t T, N, K;
};
// Decode, verify and prefill token counts; K not a multiple of 16 or 64; N not a multiple of the row tile.
// From 32 tokens on, prefill runs on packed panels (32 outputs × 256 inputs on AVX-512, 16 on AVX2, 4 generic)
// and token blocks of 256: whole and partial panels, several input blocks, more than one token block.
const std::vector<Size> kDenseSizes = {{1, 1, 1},      {1, 37, 129},   {1, 64, 1536}, {2, 19, 100}, {3, 33, 47},
                                       {5, 21, 200},   {7, 8, 64},     {9, 70, 257},  {13, 9, 31},  {31, 40, 90},
                                       {32, 64, 256},  {33, 1, 17},    {64, 36, 300}, {70, 19, 1030},
                                       {130, 17, 2100}, {300, 70, 520}};

class DenseMatmul : public ::testing::TestWithParam<DType> {};

TEST_P(DenseMatmul, MatchesDoubleReference) {
  const DType wt = GetParam();
  Backend& be = cpu_backend();
  for (const auto& sz : kDenseSizes) {
    SCOPED_TRACE("T=" + std::to_string(sz.T) + " N=" + std::to_string(sz.N) + " K=" + std::to_string(sz.K));
    // x is a column slice of a wider buffer (strided rows); W is a row slice of a bigger matrix (Linear::rows).
    Tensor xbuf = random_tensor({sz.T, sz.K + 5});
    Tensor x = xbuf.slice(1, 3, 3 + sz.K);
    Linear full;
    full.weight = random_tensor({sz.N + 6, sz.K}, wt, 0.5f);
    Linear w = full.rows(4, 4 + sz.N);
    std::vector<double> wd(static_cast<size_t>(sz.N * sz.K));
    for (int64_t n = 0; n < sz.N; n++)
      for (int64_t k = 0; k < sz.K; k++) wd[n * sz.K + k] = at(w.weight, {n, k});
    std::vector<double> ref, mag;
    reference_matmul(x, wd, sz.N, ref, mag);
    for_each_isa([&] {
      // Plain output.
      Tensor y = Tensor::empty({sz.T, sz.N}, DType::F32);
      be.fill(y, NAN);
      be.matmul(x, w, y, false);
      expect_close(y, ref, mag, {}, 2e-6);
      // Strided output, accumulating onto existing values.
      Tensor ybuf = random_tensor({sz.T, sz.N + 3});
      Tensor ys = ybuf.slice(1, 2, 2 + sz.N);
      std::vector<double> prior(static_cast<size_t>(sz.T * sz.N));
      for (int64_t t = 0; t < sz.T; t++)
        for (int64_t n = 0; n < sz.N; n++) prior[t * sz.N + n] = at(ys, {t, n});
      std::vector<float> outside;
      for (int64_t t = 0; t < sz.T; t++)
        for (int64_t c : {int64_t{0}, int64_t{1}, sz.N + 2}) outside.push_back(ybuf.data<float>()[t * (sz.N + 3) + c]);
      be.matmul(x, w, ys, true);
      expect_close(ys, ref, mag, prior, 2e-6);
      // The columns outside the slice are untouched.
      size_t j = 0;
      for (int64_t t = 0; t < sz.T; t++)
        for (int64_t c : {int64_t{0}, int64_t{1}, sz.N + 2})
          EXPECT_EQ(ybuf.data<float>()[t * (sz.N + 3) + c], outside[j++]);
    });
  }
}

// A decode step (T = 1) and a verification (T = 2..9) compute each token's outputs with the same sums, bit for bit:
// greedy decoding with speculation must equal decoding without it. Below 32 tokens (where prefill panels start)
// dense rows are read one at a time with all their tokens; every path must keep each row's order of operations.
TEST(Matmul, DecodeRowsEqualVerifyRowsBitForBit) {
  Backend& be = cpu_backend();
  struct Case {
    int64_t N, K, T;
  };
  for (DType wt : {DType::BF16, DType::F32}) {
    for (const Case c : {Case{37, 129, 7}, Case{37, 129, 9}, Case{64, 256, 3}, Case{64, 256, 9}, Case{21, 1536, 7},
                         Case{70, 1024, 8}, Case{19, 2100, 9}, Case{33, 300, 31},
                         // verification tiles of 2 to 5 tokens: K % 64 == 32 (a last half chunk), odd row counts
                         Case{64, 288, 5}, Case{33, 768, 4}, Case{16, 544, 2}, Case{35, 352, 3},
                         // two tokens: rows two at a time with one reduction for four sums, an odd row left over,
                         // K % 64 == 32, and K % 32 != 0 (the one-row tiles)
                         Case{37, 256, 2}, Case{301, 96, 2}, Case{33, 100, 2}, Case{1030, 512, 2},
                         // a megabyte of bf16, which a decode step reads as two or four streams (decode_streams) at
                         // one and at two threads, with rows left over
                         Case{1030, 512, 5}}) {
      SCOPED_TRACE(std::string(dtype_name(wt)) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
                   " T=" + std::to_string(c.T));
      Linear w;
      w.weight = random_tensor({c.N, c.K}, wt, 0.5f);
      Tensor x = random_tensor({c.T, c.K});
      for_each_isa_and_streams([&] {
        Tensor all = Tensor::empty({c.T, c.N}, DType::F32);
        be.matmul(x, w, all, false);
        for (int64_t t = 0; t < c.T; t++) {
          Tensor one = Tensor::empty({1, c.N}, DType::F32);
          be.matmul(x.slice(0, t, t + 1), w, one, false);
          for (int64_t n = 0; n < c.N; n++)
            ASSERT_EQ(one.data<float>()[n], all.data<float>()[t * c.N + n]) << t << ", " << n;
        }
      });
    }
  }
}

// The fused projections (one split across the threads for several matrices, the activation applied by each thread
// to its columns) give exactly the matmuls and the elementwise op one after another: every ISA, odd row counts
// (parts of 16 rows that end mid-matrix), decode, verification and prompt (panel) token counts, a strided input, a
// gate that is a slice of a wider weight, and each activation.
TEST(Matmul, FusedProjectionsEqualTheCompositionBitForBit) {
  Backend& be = cpu_backend();
  for (DType wt : {DType::BF16, DType::F32})
    for (int64_t T : {1, 2, 5, 9, 40})
      for (int64_t K : {64, 200}) {
        const int64_t N = 301, Nk = 37;
        SCOPED_TRACE(std::string(dtype_name(wt)) + " T=" + std::to_string(T) + " K=" + std::to_string(K));
        Linear gate_up, q, k, v;
        gate_up.weight = random_tensor({2 * N, K}, wt, 0.5f);
        q.weight = random_tensor({N, K}, wt, 0.5f);
        k.weight = random_tensor({Nk, K}, wt, 0.5f);
        v.weight = random_tensor({Nk + 16, K}, wt, 0.5f);
        const Linear gate = gate_up.rows(0, N), up = gate_up.rows(N, 2 * N);
        Tensor wide = random_tensor({T, K + 4});
        const Tensor x = wide.slice(1, 2, K + 2);
        const Tensor m = random_tensor({T, N});
        for_each_isa([&] {
          const std::vector<const Linear*> ws = {&q, &k, &v};
          std::vector<Tensor> got, want;
          for (const Linear* w : ws) {
            got.push_back(Tensor::empty({T, w->out_features()}, DType::F32));
            want.push_back(Tensor::empty({T, w->out_features()}, DType::F32));
          }
          be.matmul_many(x, ws, got);
          be.Backend::matmul_many(x, ws, want);
          for (size_t i = 0; i < ws.size(); i++)
            EXPECT_EQ(std::memcmp(got[i].raw(), want[i].raw(), want[i].nbytes()), 0) << "matmul_many output " << i;
          for (Unary act : {Unary::GeluTanh, Unary::Silu, Unary::Tanh})
            for (bool with_up : {true, false}) {
              Tensor y = Tensor::empty({T, N}, DType::F32), ref = Tensor::empty({T, N}, DType::F32);
              be.matmul_gated(x, gate, with_up ? &up : nullptr, with_up ? nullptr : &m, act, y);
              be.Backend::matmul_gated(x, gate, with_up ? &up : nullptr, with_up ? nullptr : &m, act, ref);
              EXPECT_EQ(std::memcmp(y.raw(), ref.raw(), ref.nbytes()), 0)
                  << "matmul_gated act " << static_cast<int>(act) << (with_up ? " with up" : " with m");
            }
        });
      }
}

// An output projection with the residual add and the next norm (one split for the projection, the norms on its
// scratch rows) gives exactly matmul, add_rms_norm and rms_norm one after another; add_rms_norm_norm likewise.
TEST(Matmul, ProjectionWithResidualNormsEqualsTheCompositionBitForBit) {
  Backend& be = cpu_backend();
  for (DType wt : {DType::BF16, DType::F32})
    for (int64_t T : {1, 2, 5, 9, 40})
      for (int64_t N : {37, 300}) {
        const int64_t K = 200;
        SCOPED_TRACE(std::string(dtype_name(wt)) + " T=" + std::to_string(T) + " N=" + std::to_string(N));
        Linear W;
        W.weight = random_tensor({N, K}, wt, 0.5f);
        const Tensor a = random_tensor({T, K}), x = random_tensor({T, N}, DType::F32, 3.0f);
        const Tensor wb = random_tensor({N}, DType::BF16), wf = random_tensor({N});
        const Tensor wf16 = random_tensor({N}, DType::F16), next16 = random_tensor({N}, DType::F16);
        for_each_isa([&] {
          for (float s : {1.0f, 0.37f})
            for (const Tensor* w : std::initializer_list<const Tensor*>{&wb, &wf16})
              for (const Tensor* w_next : std::initializer_list<const Tensor*>{nullptr, &wf, &next16}) {
                Tensor f = Tensor::empty({T, N}, DType::F32), y_ref = Tensor::empty({T, N}, DType::F32),
                       n_ref = Tensor::empty({T, N}, DType::F32);
                be.matmul(a, W, f, false);
                be.add_rms_norm(x, f, w, 1e-6f, s, y_ref);
                be.rms_norm(y_ref, w_next, 1e-6f, n_ref);
                Tensor y = Tensor::empty({T, N}, DType::F32), n = Tensor::empty({T, N}, DType::F32);
                be.matmul_add_rms_norm(a, W, x, w, 1e-6f, s, y, w_next, &n);
                EXPECT_EQ(std::memcmp(y.raw(), y_ref.raw(), y.nbytes()), 0) << "residual, with the next norm";
                EXPECT_EQ(std::memcmp(n.raw(), n_ref.raw(), n.nbytes()), 0) << "next norm";
                Tensor y1 = Tensor::empty({T, N}, DType::F32);
                be.matmul_add_rms_norm(a, W, x, w, 1e-6f, s, y1, w_next, nullptr);
                EXPECT_EQ(std::memcmp(y1.raw(), y_ref.raw(), y1.nbytes()), 0) << "residual alone";
                Tensor y2 = Tensor::empty({T, N}, DType::F32), n2 = Tensor::empty({T, N}, DType::F32);
                be.add_rms_norm_norm(x, f, w, 1e-6f, s, y2, w_next, n2);
                EXPECT_EQ(std::memcmp(y2.raw(), y_ref.raw(), y2.nbytes()), 0) << "add_rms_norm_norm residual";
                EXPECT_EQ(std::memcmp(n2.raw(), n_ref.raw(), n2.nbytes()), 0) << "add_rms_norm_norm norm";
              }
        });
      }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DenseMatmul, ::testing::Values(DType::BF16, DType::F32, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// A quantized Linear with random codes, scales and biases, packed as src/quant/quantize.h describes, and its
// dequantized values in double.
struct QuantCase {
  Linear lin;
  std::vector<double> w;  // [N, K]
};
QuantCase random_quantized(int64_t N, int64_t K, int bits, int group, int64_t extra_rows = 0) {
  const int per = 32 / bits;
  const int64_t R = N + extra_rows, words = K / per, groups = K / group;
  Linear l;
  l.bits = bits;
  l.group = group;
  l.weight = Tensor::empty({R, words}, DType::U32);
  l.scales = Tensor::empty({R, groups}, DType::BF16);
  l.biases = Tensor::empty({R, groups}, DType::BF16);
  std::uniform_int_distribution<uint32_t> qd(0, (1u << bits) - 1);
  std::uniform_real_distribution<float> sd(0.001f, 0.05f), bd(-1.0f, 0.5f);
  std::vector<double> w(static_cast<size_t>(R * K));
  std::fill(l.weight.data<uint32_t>(), l.weight.data<uint32_t>() + R * words, 0u);
  for (int64_t r = 0; r < R; r++)
    for (int64_t g = 0; g < groups; g++) {
      uint16_t s = f32_to_bf16(sd(rng())), b = f32_to_bf16(bd(rng()));
      l.scales.data<uint16_t>()[r * groups + g] = s;
      l.biases.data<uint16_t>()[r * groups + g] = b;
      for (int64_t i = g * group; i < (g + 1) * group; i++) {
        uint32_t q = qd(rng());
        l.weight.data<uint32_t>()[r * words + i / per] |= q << ((i % per) * bits);
        w[r * K + i] = double(bf16_to_f32(s)) * q + double(bf16_to_f32(b));
      }
    }
  QuantCase c;
  c.lin = extra_rows ? l.rows(extra_rows, R) : l;
  c.w.assign(w.begin() + extra_rows * K, w.end());
  return c;
}

struct QParam {
  int bits, group;
};
class QuantMatmul : public ::testing::TestWithParam<QParam> {};

TEST_P(QuantMatmul, MatchesDequantizeThenDouble) {
  const auto [bits, group] = GetParam();
  Backend& be = cpu_backend();
  const std::vector<Size> sizes = {{1, 1, 64},    {1, 37, 192},  {1, 130, 1536}, {2, 19, 128}, {3, 5, 64},
                                   {5, 21, 320},  {8, 33, 256},  {9, 70, 448},   {17, 7, 128}, {31, 40, 192},
                                   {32, 64, 256}, {45, 3, 64},   {64, 36, 1088}, {100, 23, 2112},
                                   {300, 70, 576}};
  for (const auto& sz : sizes) {
    if (sz.K % group) continue;
    SCOPED_TRACE("T=" + std::to_string(sz.T) + " N=" + std::to_string(sz.N) + " K=" + std::to_string(sz.K));
    QuantCase qc = random_quantized(sz.N, sz.K, bits, group, /*extra_rows=*/3);
    Tensor xbuf = random_tensor({sz.T, sz.K + 7});
    Tensor x = xbuf.slice(1, 7, 7 + sz.K);
    std::vector<double> ref, mag;
    reference_matmul(x, qc.w, sz.N, ref, mag);
    for_each_isa([&] {
      Tensor y = Tensor::empty({sz.T, sz.N}, DType::F32);
      be.fill(y, NAN);
      be.matmul(x, qc.lin, y, false);
      expect_close(y, ref, mag, {}, 4e-6);
      Tensor ybuf = random_tensor({sz.T, sz.N + 1});
      Tensor ys = ybuf.slice(1, 1, 1 + sz.N);
      std::vector<double> prior(static_cast<size_t>(sz.T * sz.N));
      for (int64_t t = 0; t < sz.T; t++)
        for (int64_t n = 0; n < sz.N; n++) prior[t * sz.N + n] = at(ys, {t, n});
      be.matmul(x, qc.lin, ys, true);
      expect_close(ys, ref, mag, prior, 4e-6);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantMatmul,
                         ::testing::Values(QParam{8, 32}, QParam{8, 64}, QParam{4, 32}, QParam{4, 64}),
                         [](const auto& info) {
                           return "int" + std::to_string(info.param.bits) + "_g" + std::to_string(info.param.group);
                         });

// The same for quantized weights: the factored kernels (qgemm_factored.h, AVX-512 and AVX2) take every T below 32
// when K is a multiple of 64, the register tiles and the dequantized dense tiles the rest; a token's row must not depend on
// how many tokens share the matmul.
TEST(QuantMatmul, DecodeRowsEqualVerifyRowsBitForBit) {
  Backend& be = cpu_backend();
  struct Case {
    int bits, group;
    int64_t N, K, T;
  };
  for (const Case c : {Case{8, 64, 37, 256, 2}, Case{8, 32, 21, 192, 9}, Case{8, 64, 70, 1088, 8},
                       Case{4, 64, 37, 256, 3}, Case{4, 32, 21, 192, 9}, Case{4, 64, 70, 1088, 8},
                       Case{4, 32, 9, 96, 7}, Case{8, 64, 13, 128, 31}, Case{4, 32, 13, 128, 17},
                       // group counts that leave a partial vector of scales (AVX2: 8 per vector, AVX-512: 16)
                       Case{4, 32, 11, 448, 5}, Case{8, 64, 19, 576, 4}, Case{4, 64, 7, 1216, 6},
                       // a megabyte of codes, read as two or four streams by a decode step, rows left over
                       Case{8, 64, 2061, 512, 3}, Case{4, 64, 4107, 512, 2},
                       // streams whose rows end on a single block of a 16-group step, and two blocks to a group
                       Case{8, 64, 803, 1472, 2}, Case{4, 64, 2303, 960, 3}, Case{4, 128, 1901, 1152, 2}}) {
    SCOPED_TRACE("int" + std::to_string(c.bits) + " g" + std::to_string(c.group) + " N=" + std::to_string(c.N) +
                 " K=" + std::to_string(c.K) + " T=" + std::to_string(c.T));
    QuantCase qc = random_quantized(c.N, c.K, c.bits, c.group, /*extra_rows=*/1);
    Tensor x = random_tensor({c.T, c.K});
    for_each_isa_and_streams([&] {
      Tensor all = Tensor::empty({c.T, c.N}, DType::F32);
      be.matmul(x, qc.lin, all, false);
      for (int64_t t = 0; t < c.T; t++) {
        Tensor one = Tensor::empty({1, c.N}, DType::F32);
        be.matmul(x.slice(0, t, t + 1), qc.lin, one, false);
        for (int64_t n = 0; n < c.N; n++)
          ASSERT_EQ(one.data<float>()[n], all.data<float>()[t * c.N + n]) << t << ", " << n;
      }
    });
  }
}

TEST(QuantMatmul, StackedExpertSelect) {
  // [E, N, K] stacked experts: select(e) gives a view with offsets into the packed, scale and bias tensors.
  const int64_t E = 3, N = 20, K = 128;
  QuantCase all = random_quantized(E * N, K, 4, 32);
  Linear stacked = all.lin;
  stacked.weight = all.lin.weight.reshape({E, N, K / 8});
  stacked.scales = all.lin.scales.reshape({E, N, K / 32});
  stacked.biases = all.lin.biases.reshape({E, N, K / 32});
  Tensor x = random_tensor({4, K});
  for_each_isa([&] {
    for (int64_t e = 0; e < E; e++) {
      std::vector<double> w(all.w.begin() + e * N * K, all.w.begin() + (e + 1) * N * K), ref, mag;
      reference_matmul(x, w, N, ref, mag);
      Tensor y = Tensor::empty({4, N}, DType::F32);
      cpu_backend().matmul(x, stacked.select(e), y, false);
      expect_close(y, ref, mag, {}, 4e-6);
    }
  });
}

TEST(QuantMatmul, DetectsACorruptedCode) {
  // The comparison is sharp enough to see one flipped code: changing a single packed nibble moves one output by
  // at least one scale step (>= 0.001 · |x|), far above the tolerance.
  QuantCase qc = random_quantized(8, 64, 4, 32);
  Tensor x = Tensor::from_floats(std::vector<float>(64, 1.0f), {1, 64});
  std::vector<double> ref, mag;
  reference_matmul(x, qc.w, 8, ref, mag);
  qc.lin.weight.data<uint32_t>()[3] ^= 0x10u;  // row 0, element 25
  Tensor y = Tensor::empty({1, 8}, DType::F32);
  cpu_backend().matmul(x, qc.lin, y, false);
  EXPECT_GT(std::fabs(at(y, {0, 0}) - ref[0]), 1e-3);
  for (int64_t n = 1; n < 8; n++) EXPECT_NEAR(at(y, {0, n}), ref[n], 1e-4);
}

// ---- attention ----

struct AttnCase {
  int64_t T, S, Hq, Hkv, D, Dv;
  int window;
  int empty_every;  // every n-th key slot is empty (position -1); 0 = none
};

TEST(Attention, MatchesDoubleReference) {
  Backend& be = cpu_backend();
  const std::vector<AttnCase> cases = {{1, 1, 1, 1, 16, 16, 0, 0},     {1, 37, 8, 1, 256, 256, 0, 0},
                                       {4, 19, 4, 2, 33, 17, 0, 0},     {5, 40, 8, 1, 64, 64, 8, 0},
                                       {3, 30, 6, 3, 48, 48, 0, 4},     {7, 25, 4, 1, 20, 20, 5, 3},
                                       {2, 12, 2, 2, 512, 512, 3, 2},
                                       // decode over many keys: whole and partial blocks of 8 / 16 keys, head
                                       // sizes that are not a multiple of the vector width, ring-like gaps
                                       {1, 150, 4, 1, 64, 64, 128, 0},  {1, 263, 4, 1, 128, 128, 0, 7},
                                       {3, 77, 6, 2, 72, 200, 0, 0},    {15, 90, 8, 2, 36, 13, 40, 5},
                                       // 16 queries and more: blocked Q·Kᵀ and P·V over the query heads of a
                                       // KV head together (blocks of at least 64 rows: 64 queries without GQA,
                                       // 16 with 8 heads a KV head), one thread, then threads
                                       {16, 16, 2, 1, 16, 16, 0, 0},    {21, 40, 4, 2, 33, 17, 6, 3},
                                       {37, 37, 3, 1, 64, 48, 0, 5},    {40, 300, 8, 2, 64, 64, 0, 3},
                                       {70, 200, 4, 1, 256, 256, 50, 0}, {100, 130, 2, 2, 40, 24, 30, 4},
                                       {33, 50, 8, 1, 64, 64, 0, 0}};
  for (const auto& c : cases) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " S=" + std::to_string(c.S) + " Hq=" + std::to_string(c.Hq) +
                 " Hkv=" + std::to_string(c.Hkv) + " window=" + std::to_string(c.window));
    Tensor q = random_tensor({c.T, c.Hq, c.D});
    // K and V are views into wider buffers (strided rows and heads), as KV caches hand them out.
    Tensor kbuf = random_tensor({c.S + 4, c.Hkv, c.D + 3});
    Tensor vbuf = random_tensor({c.S + 4, c.Hkv + 1, c.Dv});
    Tensor k = kbuf.slice(0, 0, c.S).slice(2, 0, c.D);
    Tensor v = vbuf.slice(0, 0, c.S).slice(1, 1, 1 + c.Hkv);
    // Keys 0..S-1 at positions 0..S-1 (some empty); queries at the last T positions, plus one before any key.
    std::vector<int32_t> kp(c.S), qp(c.T);
    for (int64_t s = 0; s < c.S; s++) kp[s] = (c.empty_every && s % c.empty_every == 1) ? -1 : static_cast<int32_t>(s);
    for (int64_t t = 0; t < c.T; t++) qp[t] = static_cast<int32_t>(c.S - c.T + t);
    Tensor q_pos = Tensor::from_ints(qp, {c.T}), k_pos = Tensor::from_ints(kp, {c.S});
    AttentionParams p;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    p.window = c.window;
    for_each_isa([&] {
      Tensor out = Tensor::empty({c.T, c.Hq, c.Dv}, DType::F32);
      be.attention(q, k, v, q_pos, k_pos, p, out);
      const int64_t group = c.Hq / c.Hkv;
      int bad = 0;
      for (int64_t t = 0; t < c.T; t++)
        for (int64_t h = 0; h < c.Hq; h++) {
          const int64_t kh = h / group;
          std::vector<double> sc(c.S, -INFINITY);
          double mx = -INFINITY;
          for (int64_t s = 0; s < c.S; s++) {
            bool vis = kp[s] >= 0 && kp[s] <= qp[t] && (c.window <= 0 || qp[t] - kp[s] < c.window);
            if (!vis) continue;
            double d = 0;
            for (int64_t i = 0; i < c.D; i++) d += at(q, {t, h, i}) * at(k, {s, kh, i});
            sc[s] = d * p.scale;
            mx = std::max(mx, sc[s]);
          }
          double sum = 0;
          for (auto& e : sc) sum += (e = std::isinf(e) ? 0.0 : std::exp(e - mx));
          for (int64_t i = 0; i < c.Dv; i++) {
            double want = 0;
            if (sum > 0)
              for (int64_t s = 0; s < c.S; s++) want += sc[s] / sum * at(v, {s, kh, i});
            double got = at(out, {t, h, i});
            if (!(std::fabs(got - want) <= 2e-5) && bad++ < 5)
              ADD_FAILURE() << "out[" << t << ", " << h << ", " << i << "] = " << got << ", want " << want;
          }
        }
      EXPECT_EQ(bad, 0);
    });
  }
}

// Decode and verification attention (fewer than 16 queries; its pairs of query and KV head across the threads)
// gives exactly the scalar algorithm it implements: the group's scores from kernels().dot_rows, the scale, a
// sequential maximum, exp(score - max) summed in double in key order, kernels().axpy_rows, then the division. Every
// ISA; windows, empty slots, scales of 1 and not, queries that see no key, and scores with infinities.
TEST(Attention, FewQueriesEqualTheScalarAlgorithmBitForBit) {
  Backend& be = cpu_backend();
  struct Case {
    int64_t T, S, Hq, Hkv, D, window, empty_every;
    float scale;
  };
  const std::vector<Case> cases = {{1, 1, 4, 1, 64, 0, 0, 1.0f},      {2, 100, 4, 1, 64, 0, 0, 1.0f},
                                   {5, 130, 4, 1, 128, 128, 0, 1.0f}, {3, 77, 6, 2, 72, 0, 5, 0.125f},
                                   {9, 300, 8, 2, 64, 40, 7, 1.0f},   {4, 19, 4, 4, 33, 6, 3, 0.3f},
                                   {15, 260, 2, 1, 16, 0, 0, 1.0f},
                                   // one pair big enough to be split across the threads (keys, heads, columns)
                                   {1, 900, 8, 1, 256, 0, 0, 0.0625f},  {1, 1100, 8, 1, 72, 700, 5, 1.0f}};
  for (const auto& c : cases) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " S=" + std::to_string(c.S) + " Hq=" + std::to_string(c.Hq) +
                 " Hkv=" + std::to_string(c.Hkv));
    Tensor q = random_tensor({c.T, c.Hq, c.D}, DType::F32, 0.5f);
    Tensor kbuf = random_tensor({c.S + 2, c.Hkv, c.D + 3});
    Tensor v = random_tensor({c.S, c.Hkv, c.D});
    Tensor k = kbuf.slice(0, 0, c.S).slice(2, 0, c.D);
    if (c.S > 3) {  // an infinite key value: scores of ±inf for the queries that see it
      k.data<float>()[2 * k.stride(0)] = INFINITY;
    }
    std::vector<int32_t> kp(c.S), qp(c.T);
    for (int64_t s = 0; s < c.S; s++) kp[s] = (c.empty_every && s % c.empty_every == 1) ? -1 : static_cast<int32_t>(s);
    for (int64_t t = 0; t < c.T; t++) qp[t] = static_cast<int32_t>(c.S - c.T + t);
    if (c.T > 1) qp[0] = -1;  // a query before every key: zeros
    AttentionParams p;
    p.scale = c.scale;
    p.window = c.window;
    for_each_isa([&] {
      const auto& kk = cpu::kernels();
      const int64_t group = c.Hq / c.Hkv;
      std::vector<float> want(static_cast<size_t>(c.T * c.Hq * c.D), 0.0f);
      for (int64_t t = 0; t < c.T; t++)
        for (int64_t kh = 0; kh < c.Hkv; kh++) {
          std::vector<const float*> kr, vr;
          for (int64_t s = 0; s < c.S; s++) {
            if (kp[s] < 0 || kp[s] > qp[t] || (c.window > 0 && qp[t] - kp[s] >= c.window)) continue;
            kr.push_back(k.data<float>() + s * k.stride(0) + kh * k.stride(1));
            vr.push_back(v.data<float>() + s * v.stride(0) + kh * v.stride(1));
          }
          const int64_t n = static_cast<int64_t>(kr.size());
          float* o = want.data() + (t * c.Hq + kh * group) * c.D;
          if (n == 0) continue;
          std::vector<float> sc(static_cast<size_t>(group * n));
          std::vector<double> sums(group);
          kk.dot_rows(q.data<float>() + t * q.stride(0) + kh * group * q.stride(1), q.stride(1), group, kr.data(), n,
                      c.D, sc.data(), n);
          for (int64_t g = 0; g < group; g++) {
            float* r = sc.data() + g * n;
            float mx = -INFINITY;
            for (int64_t j = 0; j < n; j++) {
              r[j] *= p.scale;
              mx = std::max(mx, r[j]);
            }
            double sum = 0;
            for (int64_t j = 0; j < n; j++) {
              r[j] = mx == -INFINITY ? 0.0f : std::exp(r[j] - mx);
              sum += r[j];
            }
            sums[g] = sum;
          }
          kk.axpy_rows(sc.data(), n, group, vr.data(), n, c.D, o, c.D);
          for (int64_t g = 0; g < group; g++) {
            float* og = o + g * c.D;
            if (sums[g] == 0.0) {
              std::fill(og, og + c.D, 0.0f);
              continue;
            }
            const float inv = static_cast<float>(1.0 / sums[g]);
            for (int64_t j = 0; j < c.D; j++) og[j] *= inv;
          }
        }
      Tensor out = Tensor::empty({c.T, c.Hq, c.D}, DType::F32);
      be.attention(q, k, v, Tensor::from_ints(qp, {c.T}), Tensor::from_ints(kp, {c.S}), p, out);
      EXPECT_EQ(std::memcmp(out.raw(), want.data(), out.nbytes()), 0);
    });
  }
}

// The AVX-512 value sums run over the rows in chunks (kept in L2 for every head and block of columns): each output
// must still be one FMA per row, in row order, from zero, as a single pass computes it.
TEST(Attention, ValueSumsAreOneFmaPerRowInRowOrder) {
  const std::string before = cpu::kernels().isa;
  for (const std::string& isa : cpu::available_isas()) {
    if (isa == "generic" || isa == "avx2") continue;  // their sums are checked through the attention tests
    SCOPED_TRACE(isa);
    ASSERT_TRUE(cpu::set_isa(isa));
    for (int64_t d : {int64_t{512}, int64_t{72}, int64_t{16}})
      for (int64_t n : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{300}}) {
        SCOPED_TRACE("d=" + std::to_string(d) + " n=" + std::to_string(n));
        const int64_t nq = 7;  // groups of 4, 2 and 1 heads
        Tensor p = random_tensor({nq, n}), v = random_tensor({n, d + 5});
        std::vector<const float*> rows(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; j++) rows[j] = v.data<float>() + j * (d + 5);
        std::vector<float> out(static_cast<size_t>(nq * (d + 3)), NAN);
        cpu::kernels().axpy_rows(p.data<float>(), n, nq, rows.data(), n, d, out.data(), d + 3);
        for (int64_t h = 0; h < nq; h++)
          for (int64_t i = 0; i < d; i++) {
            float a = 0.0f;
            for (int64_t j = 0; j < n; j++) a = std::fma(p.data<float>()[h * n + j], rows[j][i], a);
            ASSERT_EQ(out[h * (d + 3) + i], a) << "head " << h << " column " << i;
          }
      }
  }
  cpu::set_isa(before);
}

TEST(Attention, QueryWithNoVisibleKeyGivesZeros) {
  Tensor q = random_tensor({1, 2, 8}), k = random_tensor({3, 1, 8}), v = random_tensor({3, 1, 8});
  Tensor out = Tensor::empty({1, 2, 8}, DType::F32);
  AttentionParams p;
  cpu_backend().attention(q, k, v, Tensor::from_ints({5}, {1}), Tensor::from_ints({-1, 6, 7}, {3}), p, out);
  for (int64_t i = 0; i < 16; i++) EXPECT_EQ(out.data<float>()[i], 0.0f);
}

// ---- rope ----

TEST(Rope, NeoxAndInterleavedMatchDoubleReference) {
  for (bool interleaved : {false, true})
    for (int64_t D : {16, 34, 256}) {
      for (int64_t n : {D / 2, D / 4}) {  // all pairs, or a partial rotation (the rest stays)
        SCOPED_TRACE(std::string(interleaved ? "interleaved" : "neox") + " D=" + std::to_string(D) +
                     " n=" + std::to_string(n));
        const int64_t T = 3, H = 2;
        Tensor x = random_tensor({T, H, D});
        std::vector<float> before(x.data<float>(), x.data<float>() + x.numel());
        std::vector<float> f(n);
        for (int64_t i = 0; i < n; i++) f[i] = std::pow(10000.0f, -2.0f * i / D);
        std::vector<int32_t> pos = {0, 7, 1000};
        cpu_backend().rope(x, Tensor::from_ints(pos, {T}), Tensor::from_floats(f, {n}), interleaved);
        for (int64_t t = 0; t < T; t++)
          for (int64_t h = 0; h < H; h++) {
            const float* b = before.data() + (t * H + h) * D;
            std::vector<double> want(b, b + D);
            for (int64_t i = 0; i < n; i++) {
              int64_t a = interleaved ? 2 * i : i, c = interleaved ? 2 * i + 1 : i + D / 2;
              double ang = double(pos[t]) * double(f[i]);
              want[a] = b[a] * std::cos(ang) - b[c] * std::sin(ang);
              want[c] = b[c] * std::cos(ang) + b[a] * std::sin(ang);
            }
            for (int64_t i = 0; i < D; i++)
              EXPECT_NEAR(x.data<float>()[(t * H + h) * D + i], want[i], 2e-4 * (1 + std::fabs(want[i])))
                  << "t=" << t << " h=" << h << " i=" << i;
          }
      }
    }
}

// ---- norms and elementwise ----

TEST(RmsNorm, WithAndWithoutWeight) {
  // Every ISA's sum of squares (vector body and tails).
  for (int64_t D : {1, 7, 8, 15, 16, 17, 64, 300, 1537}) for_each_isa([&] {
    Tensor x = random_tensor({3, D}), w = random_tensor({D}, DType::BF16);
    for (bool with_w : {false, true}) {
      Tensor y = Tensor::empty({3, D}, DType::F32);
      cpu_backend().rms_norm(x, with_w ? &w : nullptr, 1e-6f, y);
      for (int64_t r = 0; r < 3; r++) {
        double ss = 0;
        for (int64_t i = 0; i < D; i++) ss += at(x, {r, i}) * at(x, {r, i});
        double inv = 1.0 / std::sqrt(ss / D + 1e-6);
        for (int64_t i = 0; i < D; i++) {
          double want = at(x, {r, i}) * inv * (with_w ? at(w, {i}) : 1.0);
          EXPECT_NEAR(at(y, {r, i}), want, 1e-5 * (1 + std::fabs(want)));
        }
      }
    }
  });
}

// The fused residual add of a normed branch gives exactly what rms_norm, add and scale give one after another.
TEST(RmsNorm, AddRmsNormEqualsTheComposition) {
  Backend& be = cpu_backend();
  for (int64_t D : {1, 17, 256, 1537}) {
    Tensor x = random_tensor({5, D}), f = random_tensor({5, D}, DType::F32, 3.0f);
    Tensor wb = random_tensor({D}, DType::BF16), wf = random_tensor({D});
    for (const Tensor* w : std::initializer_list<const Tensor*>{nullptr, &wb, &wf})
      for (float s : {1.0f, 0.37f}) {
        Tensor n = Tensor::empty({5, D}, DType::F32), want = Tensor::empty({5, D}, DType::F32);
        be.rms_norm(f, w, 1e-6f, n);
        be.add(x, n, want);
        if (s != 1.0f) be.scale(want, s, want);
        Tensor got = Tensor::empty({5, D}, DType::F32);
        be.add_rms_norm(x, f, w, 1e-6f, s, got);
        EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << "D=" << D << " s=" << s;
      }
  }
}

// Values over a wide range of magnitudes (2^-20 to 2^20), so that a sum of squares taken in another order than
// the reference's would round differently.
Tensor wide_tensor(const Shape& shape) {
  Tensor t = random_tensor(shape);
  std::uniform_int_distribution<int> e(-20, 20);
  for (int64_t i = 0; i < t.numel(); i++) t.data<float>()[i] = std::ldexp(t.data<float>()[i], e(rng()));
  return t;
}

// The norm of one row as the scalar reference computes it: the sum of squares of kernels().sumsq for that row
// alone, the scale from std::pow, then y = x·inv·w (or (r + x·inv·w)·s with a residual r) one float at a time.
// (This file is compiled for the baseline instruction set: no product is fused into an add here.)
void reference_norm_row(const float* x, const float* r, const Tensor* w, int64_t D, float eps, float s, float* y) {
  const float inv = std::pow(static_cast<float>(cpu::kernels().sumsq(x, D) / D) + eps, -0.5f);
  for (int64_t i = 0; i < D; i++) {
    const float n = w ? x[i] * inv * static_cast<float>(at(*w, {i})) : x[i] * inv;
    if (!r) {
      y[i] = n;
      continue;
    }
    const float v = r[i] + n;
    y[i] = s != 1.0f ? v * s : v;
  }
}

// Many rows at once (summed side by side, in chunks) give each row exactly what the row alone gives: every ISA,
// odd widths and row counts (past a chunk of 32), strided rows, f32, bf16 or no weights, and the residual form.
TEST(RmsNorm, RowsTogetherEqualEachRowAloneBitForBit) {
  Backend& be = cpu_backend();
  for (int64_t D : {1, 7, 15, 16, 17, 31, 33, 64, 256, 300}) for_each_isa([&] {
    for (int64_t R : {1, 2, 3, 5, 7, 9, 20, 37}) {
      SCOPED_TRACE("D=" + std::to_string(D) + " R=" + std::to_string(R));
      Tensor wide = wide_tensor({R, D + 3});
      const Tensor x = wide.slice(1, 1, D + 1);  // rows of D at a row stride of D + 3
      Tensor xc = Tensor::empty({R, D}, DType::F32), res = random_tensor({R, D});
      be.copy(x, xc);
      std::vector<double> sums(static_cast<size_t>(R));
      cpu::kernels().sumsq_rows(x.data<float>(), x.stride(0), R, D, sums.data());
      for (int64_t r = 0; r < R; r++) {
        const double alone = cpu::kernels().sumsq(xc.data<float>() + r * D, D);
        EXPECT_EQ(std::memcmp(&sums[r], &alone, sizeof alone), 0) << "sum of squares of row " << r;
      }
      Tensor wb = random_tensor({D}, DType::BF16), wf = random_tensor({D});
      for (const Tensor* w : std::initializer_list<const Tensor*>{nullptr, &wb, &wf}) {
        std::vector<float> want(static_cast<size_t>(R * D)), want_add(static_cast<size_t>(R * D));
        for (int64_t r = 0; r < R; r++) {
          reference_norm_row(xc.data<float>() + r * D, nullptr, w, D, 1e-6f, 1.0f, want.data() + r * D);
          reference_norm_row(xc.data<float>() + r * D, res.data<float>() + r * D, w, D, 1e-6f, 0.37f,
                             want_add.data() + r * D);
        }
        Tensor out = Tensor::empty({R, D + 5}, DType::F32);
        const Tensor y = out.slice(1, 2, D + 2);  // strided output rows too
        be.rms_norm(x, w, 1e-6f, y);
        for (int64_t r = 0; r < R; r++)
          EXPECT_EQ(std::memcmp(y.data<float>() + r * y.stride(0), want.data() + r * D, D * sizeof(float)), 0)
              << "rms_norm row " << r << (w ? " weighted" : "");
        Tensor yc = Tensor::empty({R, D}, DType::F32);
        be.rms_norm(xc, w, 1e-6f, yc);
        EXPECT_EQ(std::memcmp(yc.raw(), want.data(), yc.nbytes()), 0) << "contiguous rms_norm";
        for (float s : {1.0f, 0.37f}) {
          Tensor got = Tensor::empty({R, D}, DType::F32);
          be.add_rms_norm(res, xc, w, 1e-6f, s, got);
          if (s != 1.0f) {
            EXPECT_EQ(std::memcmp(got.raw(), want_add.data(), got.nbytes()), 0) << "add_rms_norm";
          } else {
            for (int64_t i = 0; i < R * D; i++) {
              const float v = res.data<float>()[i] + want[i];
              ASSERT_EQ(std::memcmp(got.data<float>() + i, &v, sizeof v), 0) << "add_rms_norm s=1 at " << i;
            }
          }
        }
      }
    }
  });
}

// NeoX rotation: every ISA gives the scalar expression's bits (each product rounded, then the difference or sum),
// for heads narrower than a vector, partial rotations and vector tails.
TEST(Rope, NeoxEqualsTheScalarExpressionBitForBit) {
  for (int64_t D : {2, 6, 16, 34, 64, 100, 128, 256})
    for (int64_t n : {D / 2, D / 4, int64_t{1}}) {
      if (n < 1) continue;
      for_each_isa([&] {
        SCOPED_TRACE("D=" + std::to_string(D) + " n=" + std::to_string(n));
        const int64_t T = 3, H = 5;
        Tensor x = wide_tensor({T, H, D});
        std::vector<float> want(x.data<float>(), x.data<float>() + x.numel());
        std::vector<float> f(n);
        for (int64_t i = 0; i < n; i++) f[i] = std::pow(10000.0f, -2.0f * i / D);
        const std::vector<int32_t> pos = {0, 7, 1000};
        for (int64_t t = 0; t < T; t++)
          for (int64_t h = 0; h < H; h++) {
            float* v = want.data() + (t * H + h) * D;
            for (int64_t i = 0; i < n; i++) {
              const float a = static_cast<float>(pos[t]) * f[i], c = std::cos(a), s = std::sin(a);
              const float x0 = v[i], x1 = v[i + D / 2];
              v[i] = x0 * c - x1 * s;
              v[i + D / 2] = x1 * c + x0 * s;
            }
          }
        cpu_backend().rope(x, Tensor::from_ints(pos, {T}), Tensor::from_floats(f, {n}), false);
        EXPECT_EQ(std::memcmp(x.raw(), want.data(), x.nbytes()), 0);
      });
    }
}

// A layer's q/k norms and rotations and the values' norm in one op (and into a cache's slots) give exactly the
// default's rms_norm, rope and kv_write: every ISA, decode to prompt token counts, partial rotations, head widths
// narrower than a vector, bf16 or no weights.
TEST(Rope, NormRopeManyEqualsTheCompositionBitForBit) {
  Backend& be = cpu_backend();
  for (int64_t T : {1, 2, 5, 40})
    for (int64_t D : {12, 64, 128})
      for (int64_t n : {D / 2, D / 8}) {
        SCOPED_TRACE("T=" + std::to_string(T) + " D=" + std::to_string(D) + " n=" + std::to_string(n));
        const int64_t Hq = 4, Hkv = 2, C = 128;
        const Tensor q = wide_tensor({T, Hq, D}), k = wide_tensor({T, Hkv, D}), v = wide_tensor({T, Hkv, D});
        const Tensor qw = random_tensor({D}, DType::BF16), kw = random_tensor({D});
        std::vector<float> f(n);
        for (int64_t i = 0; i < n; i++) f[i] = std::pow(10000.0f, -2.0f * i / D);
        std::vector<int32_t> pos(T);
        for (int64_t t = 0; t < T; t++) pos[t] = static_cast<int32_t>(3 + 2 * t);
        const Tensor positions = Tensor::from_ints(pos, {T}), inv_freq = Tensor::from_floats(f, {n});
        for_each_isa([&] {
          for (bool into_cache : {false, true}) {
            std::vector<Tensor> got, want;
            for (const Tensor* x : {&q, &k, &v}) {
              got.push_back(Tensor::empty(x->shape(), DType::F32));
              want.push_back(Tensor::empty(x->shape(), DType::F32));
            }
            KvSlots slots[2];
            for (KvSlots& sl : slots) {
              sl.keys = Tensor::empty({C, Hkv, D}, DType::F32);
              sl.values = Tensor::empty({C, Hkv, D}, DType::F32);
              sl.slot_pos = Tensor::from_ints(std::vector<int32_t>(C, -1), {C});
            }
            auto parts = [](std::vector<Tensor>& ys, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& qw, const Tensor& kw) {
              return std::vector<NormRope>{{&q, &qw, true, &ys[0]}, {&k, &kw, true, &ys[1]}, {&v, nullptr, false, &ys[2]}};
            };
            be.rms_norm_rope_many(parts(got, q, k, v, qw, kw), 1e-6f, positions, inv_freq, false,
                                  into_cache ? &slots[0] : nullptr);
            be.Backend::rms_norm_rope_many(parts(want, q, k, v, qw, kw), 1e-6f, positions, inv_freq, false,
                                           into_cache ? &slots[1] : nullptr);
            for (int j = 0; j < 3; j++)
              EXPECT_EQ(std::memcmp(got[j].raw(), want[j].raw(), want[j].nbytes()), 0) << "part " << j;
            if (into_cache) {
              EXPECT_EQ(std::memcmp(slots[0].keys.raw(), slots[1].keys.raw(), slots[1].keys.nbytes()), 0);
              EXPECT_EQ(std::memcmp(slots[0].values.raw(), slots[1].values.raw(), slots[1].values.nbytes()), 0);
              EXPECT_EQ(std::memcmp(slots[0].slot_pos.raw(), slots[1].slot_pos.raw(), slots[1].slot_pos.nbytes()), 0);
            }
          }
        });
      }
}

TEST(Elementwise, UnaryGatedSoftcapSoftmaxTopk) {
  Backend& be = cpu_backend();
  const int64_t R = 3, D = 301;
  Tensor a = random_tensor({R, D}, DType::F32, 3.0f), b = random_tensor({R, D});
  Tensor y = Tensor::empty({R, D}, DType::F32);
  auto gelu = [](double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); };
  auto check = [&](auto f, const char* what) {
    for (int64_t i = 0; i < R * D; i++) {
      double want = f(i);
      ASSERT_NEAR(y.data<float>()[i], want, 1e-5 * (1 + std::fabs(want))) << what << " at " << i;
    }
  };
  const float* A = a.data<float>();
  const float* B = b.data<float>();
  be.unary(Unary::GeluTanh, a, y);
  check([&](int64_t i) { return gelu(A[i]); }, "gelu");
  be.unary(Unary::Silu, a, y);
  check([&](int64_t i) { return A[i] / (1 + std::exp(-double(A[i]))); }, "silu");
  be.unary(Unary::Sigmoid, a, y);
  check([&](int64_t i) { return 1 / (1 + std::exp(-double(A[i]))); }, "sigmoid");
  be.unary(Unary::Tanh, a, y);
  check([&](int64_t i) { return std::tanh(double(A[i])); }, "tanh");
  be.gated(Unary::GeluTanh, a, b, y);
  check([&](int64_t i) { return gelu(A[i]) * B[i]; }, "gated");
  be.softcap(a, 2.5f, y);
  check([&](int64_t i) { return 2.5 * std::tanh(A[i] / 2.5); }, "softcap");
  Tensor row = random_tensor({D});
  be.add(a, row, y);  // broadcast of one row
  check([&](int64_t i) { return double(A[i]) + row.data<float>()[i % D]; }, "add");
  be.mul(a, b, y);
  check([&](int64_t i) { return double(A[i]) * B[i]; }, "mul");
  be.scale(a, -0.25f, y);
  check([&](int64_t i) { return -0.25 * A[i]; }, "scale");
  be.softmax(a, y);
  for (int64_t r = 0; r < R; r++) {
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < D; i++) mx = std::max(mx, double(A[r * D + i]));
    for (int64_t i = 0; i < D; i++) sum += std::exp(A[r * D + i] - mx);
    for (int64_t i = 0; i < D; i++)
      ASSERT_NEAR(y.data<float>()[r * D + i], std::exp(A[r * D + i] - mx) / sum, 1e-6);
  }
  Tensor vals = Tensor::empty({R, 5}, DType::F32), idx = Tensor::empty({R, 5}, DType::I32);
  be.topk(a, 5, vals, idx);
  for (int64_t r = 0; r < R; r++) {
    std::vector<int32_t> order(D);
    for (int64_t i = 0; i < D; i++) order[i] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](int32_t i, int32_t j) { return A[r * D + i] > A[r * D + j]; });
    for (int i = 0; i < 5; i++) {
      EXPECT_EQ(idx.data<int32_t>()[r * 5 + i], order[i]);
      EXPECT_EQ(vals.data<float>()[r * 5 + i], A[r * D + order[i]]);
    }
  }
  // k = 1 (greedy decoding's argmax) takes the first of equal maxima, as the sorted path does.
  Tensor tied = Tensor::from_floats({1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 7.0f, 7.0f, 7.0f, -1.0f, -1.0f, -1.0f, -1.0f},
                                    {3, 4});
  Tensor v1 = Tensor::empty({3, 1}, DType::F32), i1 = Tensor::empty({3, 1}, DType::I32);
  be.topk(tied, 1, v1, i1);
  EXPECT_EQ(i1.data<int32_t>()[0], 1);
  EXPECT_EQ(i1.data<int32_t>()[1], 1);
  EXPECT_EQ(i1.data<int32_t>()[2], 0);
  EXPECT_EQ(v1.data<float>()[0], 3.0f);
  EXPECT_EQ(v1.data<float>()[1], 7.0f);
  EXPECT_EQ(v1.data<float>()[2], -1.0f);
  // Zeros of both signs tie; a NaN is never the maximum, unless first in its row (then it stays, as a scan that
  // keeps the first strictly larger value leaves it).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor odd = Tensor::from_floats({-1.0f, -0.0f, 0.0f, nan, 1.0f, nan, 2.0f, 2.0f, nan, 5.0f, 1.0f, 9.0f}, {3, 4});
  be.topk(odd, 1, v1, i1);
  EXPECT_EQ(i1.data<int32_t>()[0], 1);
  EXPECT_EQ(i1.data<int32_t>()[1], 2);
  EXPECT_EQ(i1.data<int32_t>()[2], 0);
  // Rows long enough for the eight running maxima and a tail: the first of equal maxima wherever it lies.
  for (int64_t n : {9, 31, 4096, 4099}) {
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t p : {int64_t{0}, int64_t{5}, n / 2, n - 1}) {
      for (int64_t i = 0; i < n; i++) row[i] = static_cast<float>(i % 13) - 20.0f;
      row[p] = 3.0f;
      if (p + 8 < n) row[p + 8] = 3.0f;  // an equal maximum later, in the same running maximum
      Tensor rt = Tensor::from_floats(row, {1, n});
      Tensor rv = Tensor::empty({1, 1}, DType::F32), ri = Tensor::empty({1, 1}, DType::I32);
      be.topk(rt, 1, rv, ri);
      EXPECT_EQ(ri.data<int32_t>()[0], p) << "n=" << n;
      EXPECT_EQ(rv.data<float>()[0], 3.0f);
    }
  }
  Tensor v5 = Tensor::empty({R, 1}, DType::F32), i5 = Tensor::empty({R, 1}, DType::I32);
  be.topk(a, 1, v5, i5);
  for (int64_t r = 0; r < R; r++) EXPECT_EQ(i5.data<int32_t>()[r], idx.data<int32_t>()[r * 5]);
}

// Top-k over rows with many ties and infinities, k from 2 to the whole row: the same ids and values as a stable
// sort (larger first, ties to the lower index).
TEST(Elementwise, TopkTiesAndInfinities) {
  Backend& be = cpu_backend();
  std::uniform_int_distribution<int> level(-6, 6);
  for (int64_t N : {7, 64, 2048, 5000})
    for (int k : {2, 5, 32, 64, static_cast<int>(N)}) {
      if (k > N) continue;
      const int64_t R = 3;
      Tensor a = Tensor::empty({R, N}, DType::F32);
      float* A = a.data<float>();
      for (int64_t i = 0; i < R * N; i++) {
        const int l = level(rng());
        A[i] = l == 6 ? std::numeric_limits<float>::infinity() : l == -6 ? -std::numeric_limits<float>::infinity()
                                                                         : 0.25f * static_cast<float>(l);
      }
      Tensor vals = Tensor::empty({R, k}, DType::F32), idx = Tensor::empty({R, k}, DType::I32);
      be.topk(a, k, vals, idx);
      for (int64_t r = 0; r < R; r++) {
        const float* x = A + r * N;
        std::vector<int32_t> order(N);
        for (int64_t i = 0; i < N; i++) order[i] = static_cast<int32_t>(i);
        std::stable_sort(order.begin(), order.end(), [&](int32_t i, int32_t j) { return x[i] > x[j]; });
        for (int i = 0; i < k; i++) {
          SCOPED_TRACE(::testing::Message() << "N=" << N << " k=" << k << " row " << r << " rank " << i);
          ASSERT_EQ(idx.data<int32_t>()[r * k + i], order[i]);
          EXPECT_EQ(vals.data<float>()[r * k + i], x[order[i]]);
        }
      }
    }
}

// The vector tanh behind GELU, tanh, gated GELU and the soft-cap, on every ISA: lengths with tails, several
// blocks and the threaded path; values from tiny to saturated; the same 1e-5 bound as the scalar reference.
TEST(Elementwise, TanhFamilyPerIsa) {
  Backend& be = cpu_backend();
  auto gelu = [](double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); };
  for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, int64_t{1023}, int64_t{2049}, int64_t{70001}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    Tensor a = random_tensor({n}, DType::F32, 6.0f), b = random_tensor({n});
    float* A = a.data<float>();
    if (n > 4) {
      A[0] = 1e-30f;
      A[1] = -3e-8f;
      A[2] = 40.0f;
      A[3] = -40.0f;
    }
    const float* B = b.data<float>();
    for_each_isa([&] {
      Tensor y = Tensor::empty({n}, DType::F32);
      auto check = [&](auto f, const char* what) {
        for (int64_t i = 0; i < n; i++) {
          double want = f(i);
          ASSERT_NEAR(y.data<float>()[i], want, 1e-5 * (1 + std::fabs(want))) << what << " at " << i;
        }
      };
      be.unary(Unary::Tanh, a, y);
      check([&](int64_t i) { return std::tanh(double(A[i])); }, "tanh");
      if (n > 4) {
        EXPECT_EQ(y.data<float>()[0], 1e-30f);  // tanh(x) = x for tiny x, not 0
      }
      be.unary(Unary::GeluTanh, a, y);
      check([&](int64_t i) { return gelu(A[i]); }, "gelu");
      be.gated(Unary::GeluTanh, a, b, y);
      check([&](int64_t i) { return gelu(A[i]) * B[i]; }, "gated");
      be.softcap(a, 30.0f, y);
      check([&](int64_t i) { return 30.0 * std::tanh(A[i] / 30.0); }, "softcap");
      // GELU runs in vectors around the vector tanh with the scalar expression's operations in its order: bit
      // for bit the scalar formula over this ISA's tanh.
      std::vector<float> z(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; i++) z[i] = 0.7978845608028654f * (A[i] + 0.044715f * A[i] * A[i] * A[i]);
      cpu::kernels().tanh(z.data(), z.data(), n);
      be.gated(Unary::GeluTanh, a, b, y);
      for (int64_t i = 0; i < n; i++)
        ASSERT_EQ(y.data<float>()[i], 0.5f * A[i] * (1.0f + z[i]) * B[i]) << "gated gelu at " << i;
      be.unary(Unary::GeluTanh, a, y);
      for (int64_t i = 0; i < n; i++) ASSERT_EQ(y.data<float>()[i], 0.5f * A[i] * (1.0f + z[i])) << "gelu at " << i;
      // The soft-cap too: the scalar division and product around this ISA's tanh, bit for bit.
      for (int64_t i = 0; i < n; i++) z[i] = A[i] / 30.0f;
      cpu::kernels().tanh(z.data(), z.data(), n);
      be.softcap(a, 30.0f, y);
      for (int64_t i = 0; i < n; i++) ASSERT_EQ(y.data<float>()[i], 30.0f * z[i]) << "softcap at " << i;
    });
  }
}

TEST(Embedding, Bf16RowsScaled) {
  Tensor table = random_tensor({50, 33}, DType::BF16);
  Tensor out = Tensor::empty({3, 33}, DType::F32);
  Linear l;
  l.weight = table;
  cpu_backend().embedding(l, Tensor::from_ints({4, 0, 49}, {3}), 2.0f, out);
  const int ids[] = {4, 0, 49};
  for (int i = 0; i < 3; i++)
    for (int64_t j = 0; j < 33; j++) EXPECT_EQ(at(out, {i, j}), 2.0 * at(table, {ids[i], j}));
}

TEST(Copy, StridedAndConverting) {
  Tensor src = random_tensor({6, 10}).slice(1, 2, 9);  // strided
  Tensor dst = Tensor::empty({6, 7}, DType::BF16);
  cpu_backend().copy(src, dst);
  for (int64_t r = 0; r < 6; r++)
    for (int64_t c = 0; c < 7; c++) EXPECT_EQ(at(dst, {r, c}), round_bf16(static_cast<float>(at(src, {r, c}))));
}

// ---- profiling (vatic bench's table by operation) ----

// While profiling is on, each op the caller runs is timed once under its name, an op that runs others (a cache
// write its copies) as itself only; take_profile returns the table and clears it; with profiling off nothing is
// recorded.
TEST(Profile, TimesEachOuterOpOnce) {
  Backend& be = cpu_backend();
  be.take_profile();
  Linear w;
  w.weight = random_tensor({64, 96}, DType::BF16);
  Tensor x = random_tensor({2, 96}), y = Tensor::empty({2, 64}, DType::F32), n = Tensor::empty({2, 64}, DType::F32);
  Tensor k = random_tensor({2, 1, 8}), v = random_tensor({2, 1, 8});
  Tensor keys = Tensor::empty({4, 1, 8}, DType::F32), values = Tensor::empty({4, 1, 8}, DType::F32);
  Tensor slots = Tensor::from_ints({-1, -1, -1, -1}, {4});

  be.matmul(x, w, y, false);  // not profiled
  be.set_profiling(true);
  be.matmul(x, w, y, false);
  be.matmul(x, w, y, false);
  be.rms_norm(y, nullptr, 1e-6f, n);
  be.kv_write(k, v, Tensor::from_ints({0, 1}, {2}), keys, values, slots, false);
  be.set_profiling(false);
  be.rms_norm(y, nullptr, 1e-6f, n);  // not profiled

  auto prof = be.take_profile();
  std::sort(prof.begin(), prof.end());
  ASSERT_EQ(prof.size(), 3u);
  EXPECT_EQ(prof[0].first, "kv_write ×1");  // its two copies are its own time, not rows of their own
  EXPECT_EQ(prof[1].first, "matmul ×2");
  EXPECT_EQ(prof[2].first, "rms_norm ×1");
  for (const auto& [name, seconds] : prof) {
    EXPECT_GT(seconds, 0.0) << name;
    EXPECT_LT(seconds, 10.0) << name;
  }
  EXPECT_TRUE(be.take_profile().empty());
}

}  // namespace
}  // namespace vatic
