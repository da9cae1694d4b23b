#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.h"
#include "backend/cpu/bandwidth.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/simd.h"
#include "backend/cpu/weight_arena.h"

namespace vatic {
namespace {

// Below about a million multiply-adds (a few hundred microseconds on one core) waking the other threads costs more
// than it saves, and far more when the machine is busy with other work.
constexpr int64_t kMinParallelWork = int64_t{1} << 20;
// Matmuls split their output rows across threads from 32 K multiply-adds (about a microsecond on one core): the
// pool's workers spin between the ops of a step, so handing out an op costs well under a microsecond, and a small
// model's decode (matrices of 0.03–1 M multiply-adds) gains from a second thread this way. From 128 K, the demo
// model's key and value projections of a two-token verification (2 × 64 × 256) and its drafter's 128-wide matrices
// ran on one thread: the drafter pair at a fixed depth of 1, two threads, went 2656–2660 → 2838–2882 tok/s (best of
// 30 runs) from 32 K (docs/performance.md, eighteenth round). Rows are independent: the split changes no bit.
constexpr int64_t kMinParallelMatmul = int64_t{1} << 15;
// Attention over few queries (decode, verification): its (query, KV head) pairs across the threads from 32 K
// multiply-adds of scores (T·Hq·S·D). Below 1 M, as before, a verification of the demo model (one KV head) ran its
// pairs on one thread: with a hundred keys in the cache, attention was 18 % of a verification of four drafts,
// its exponentials and the value sums as much as the scores.
constexpr int64_t kMinParallelAttention = int64_t{1} << 15;
// Fewer (query, KV head) pairs than threads (decode with one KV head, as Gemma 4 E2B / E4B have): from 256 K
// multiply-adds of a pair's scores and value sums (group·n·(D + Dv)), each pair's keys, heads and value columns
// are split across the threads instead (attention_split_pairs).
constexpr int64_t kMinSplitAttentionPair = int64_t{1} << 18;
// Norms, activations and other elementwise ops: from 16 K values on (a prompt of 64 tokens at width 256), both
// cores; below, one.
constexpr int64_t kMinParallelElementwise = int64_t{1} << 14;
// Ranks the row-wise copy handles (every tensor the models build is of rank 4 or less).
constexpr int kMaxRowRank = 8;

using cpu::kernels;
using cpu::parallel_for;
using cpu::parallel_ranges;

inline float load_scalar(const Tensor& t, const uint8_t* p) {
  switch (t.dtype()) {
    case DType::F32: return *reinterpret_cast<const float*>(p);
    case DType::BF16: return bf16_to_f32(*reinterpret_cast<const uint16_t*>(p));
    case DType::F16: return f16_to_f32(*reinterpret_cast<const uint16_t*>(p));
    case DType::F8_E4M3: return f8e4m3_to_f32(*p);
    case DType::I32: return static_cast<float>(*reinterpret_cast<const int32_t*>(p));
    case DType::I64: return static_cast<float>(*reinterpret_cast<const int64_t*>(p));
    default: fail("cannot read {} as a number", dtype_name(t.dtype()));
  }
}

inline void store_scalar(const Tensor& t, uint8_t* p, float v) {
  switch (t.dtype()) {
    case DType::F32: *reinterpret_cast<float*>(p) = v; break;
    case DType::BF16: *reinterpret_cast<uint16_t*>(p) = f32_to_bf16(v); break;
    case DType::F16: *reinterpret_cast<uint16_t*>(p) = f32_to_f16(v); break;
    case DType::I32: *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
    default: fail("cannot write {} from a float", dtype_name(t.dtype()));
  }
}

// Iterates over every element of a strided tensor, calling f(byte pointer, linear index).
template <typename F>
void for_each_element(const Tensor& t, F&& f) {
  const int nd = t.ndim();
  const int64_t n = t.numel();
  if (n == 0) return;
  uint8_t* base = static_cast<uint8_t*>(t.raw());
  const size_t es = dtype_size(t.dtype());
  if (t.is_contiguous()) {
    for (int64_t i = 0; i < n; i++) f(base + i * es, i);
    return;
  }
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) off += idx[d] * t.stride(d);
    f(base + off * es, i);
    for (int d = nd - 1; d >= 0; d--) {
      if (++idx[d] < t.dim(d)) break;
      idx[d] = 0;
    }
  }
}

// Row r of a 2-D view (rows may be strided; each row contiguous).
inline float* row_f32(const Tensor& t, int64_t r) { return t.data<float>() + r * t.stride(0); }

void check_rows(const Tensor& t, const char* what) {
  VATIC_CHECK(t.ndim() >= 1 && t.stride(-1) == 1, "{}: rows of {} must be contiguous", what, t.describe());
}

// Dequantize one row of a group-wise affine quantized weight into f32.
void dequant_row(const Linear& w, int64_t n, float* out, int64_t K) {
  const uint32_t* q = reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(w.weight.raw()) +
                                                       n * w.weight.stride(-2) * 4);
  const uint8_t* sp = static_cast<const uint8_t*>(w.scales.raw()) + n * w.scales.stride(-2) * dtype_size(w.scales.dtype());
  const uint8_t* bp = static_cast<const uint8_t*>(w.biases.raw()) + n * w.biases.stride(-2) * dtype_size(w.biases.dtype());
  const int per = 32 / w.bits;
  const uint32_t mask = (1u << w.bits) - 1;
  const size_t es = dtype_size(w.scales.dtype());
  for (int64_t g = 0; g < K / w.group; g++) {
    float s = load_scalar(w.scales, sp + g * es), b = load_scalar(w.biases, bp + g * es);
    for (int64_t i = g * w.group; i < (g + 1) * w.group; i++) {
      uint32_t v = (q[i / per] >> ((i % per) * w.bits)) & mask;
      out[i] = s * static_cast<float>(v) + b;
    }
  }
}

// The largest of init and r[0, n), in eight independent running maxima merged in order (a NaN never replaces a
// maximum; `v > m ? v : m` throughout, so only a zero's sign can depend on the order). Eight chains instead of one
// keep the comparisons from waiting on each other.
float running_max8(const float* r, int64_t n, float init) {
  float m[8];
  for (float& v : m) v = init;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; u++) m[u] = r[i + u] > m[u] ? r[i + u] : m[u];
  for (; i < n; i++) m[0] = r[i] > m[0] ? r[i] : m[0];
  float top = m[0];
  for (int u = 1; u < 8; u++) top = m[u] > top ? m[u] : top;
  return top;
}

class CpuBackend final : public Backend {
 public:
  // While profiling is on, each op's wall time on the calling thread (bench's table by operation; an op that runs
  // others is timed as itself only, see Timed).
  void set_profiling(bool on) override { profiling_.store(on, std::memory_order_relaxed); }
  std::vector<std::pair<std::string, double>> take_profile() override {
    std::lock_guard<std::mutex> lock(profile_mutex_);
    std::vector<std::pair<std::string, double>> samples(timings_.begin(), timings_.end());
    timings_.clear();
    return profile_table(samples);
  }

  Device device() const override { return Device::CPU; }
  const char* name() const override { return "cpu"; }
  MemoryBandwidth measure_bandwidth(size_t bytes, int reps) override { return cpu::measure_bandwidth(bytes, reps); }
  DeviceMemory memory() const override {
    DeviceMemory m;
    const long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    m.total = static_cast<size_t>(pages) * static_cast<size_t>(page);
    m.free = static_cast<size_t>(avail) * static_cast<size_t>(page);
    return m;
  }

  Tensor empty(const Shape& shape, DType dtype) override { return Tensor::uninitialized(shape, dtype); }
  Tensor upload(const Tensor& host) override { return host; }
  // Weights from the store's file mappings are copied into huge-page-backed memory of the backend's own.
  Tensor place_weight(const Tensor& t) override {
    return t.storage() && t.storage()->read_only() ? cpu::resident_copy(t) : t;
  }
  Tensor download(const Tensor& t) override {
    if (t.is_contiguous()) return t;
    Tensor out = empty(t.shape(), t.dtype());
    copy(t, out);
    return out;
  }

  void copy(const Tensor& src, const Tensor& dst) override {
    Timed timed(*this, "copy");
    VATIC_CHECK(src.shape() == dst.shape(), "copy: shapes {} and {} differ", src.describe(), dst.describe());
    if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
      std::memcpy(dst.raw(), src.raw(), src.nbytes());
      return;
    }
    // Row-wise fast path for same-dtype tensors whose last dim is contiguous, of any rank (slices of the KV cache
    // are [S, H, D]): one memcpy per row instead of a load and a store through the dtype switch per element.
    if (src.dtype() == dst.dtype() && src.ndim() >= 2 && src.ndim() <= kMaxRowRank && src.stride(-1) == 1 &&
        dst.stride(-1) == 1) {
      const size_t es = dtype_size(src.dtype());
      const int nd = src.ndim();
      const int64_t width = src.dim(-1), rows = width > 0 ? src.numel() / width : 0;
      int64_t idx[kMaxRowRank] = {};
      int64_t so = 0, doff = 0;  // element offsets of the current row in src and dst
      for (int64_t r = 0; r < rows; r++) {
        std::memcpy(static_cast<uint8_t*>(dst.raw()) + doff * es, static_cast<const uint8_t*>(src.raw()) + so * es,
                    width * es);
        for (int d = nd - 2; d >= 0; d--) {
          so += src.stride(d);
          doff += dst.stride(d);
          if (++idx[d] < src.dim(d)) break;
          so -= idx[d] * src.stride(d);
          doff -= idx[d] * dst.stride(d);
          idx[d] = 0;
        }
      }
      return;
    }
    std::vector<float> vals(src.numel());
    for_each_element(src, [&](const uint8_t* p, int64_t i) { vals[i] = load_scalar(src, p); });
    for_each_element(dst, [&](uint8_t* p, int64_t i) { store_scalar(dst, p, vals[i]); });
  }

  void fill(const Tensor& dst, float value) override {
    Timed timed(*this, "fill");
    // A contiguous tensor (a new sequence's KV cache, zeroed buffers) gets the stored bit pattern written in one
    // pass; through the dtype switch per element this was about 1 % of a short prompt.
    const size_t es = dtype_size(dst.dtype());
    if (dst.is_contiguous() && dst.numel() > 0 && (es == 2 || es == 4)) {
      alignas(4) uint8_t pattern[4];
      store_scalar(dst, pattern, value);
      if (es == 4) {
        uint32_t v;
        std::memcpy(&v, pattern, 4);
        std::fill_n(static_cast<uint32_t*>(dst.raw()), dst.numel(), v);
      } else {
        uint16_t v;
        std::memcpy(&v, pattern, 2);
        std::fill_n(static_cast<uint16_t*>(dst.raw()), dst.numel(), v);
      }
      return;
    }
    for_each_element(dst, [&](uint8_t* p, int64_t) { store_scalar(dst, p, value); });
  }

  void matmul(const Tensor& x, const Linear& w, const Tensor& y, bool accumulate) override {
    Timed timed(*this, "matmul");
    VATIC_CHECK(x.ndim() == 2 && y.ndim() == 2 && x.dtype() == DType::F32 && y.dtype() == DType::F32,
                "matmul expects F32 [T, K] input and output, got {} and {}", x.describe(), y.describe());
    check_rows(x, "matmul");
    check_rows(y, "matmul");
    const int64_t T = x.dim(0), K = x.dim(1), N = w.out_features();
    VATIC_CHECK(w.in_features() == K && y.dim(0) == T && y.dim(1) == N, "matmul: x {} · W{} -> y {}", x.describe(),
                w.weight.describe(), y.describe());
    if (w.quantized()) return matmul_quantized(x, w, y, accumulate);
    const DType wt = w.weight.dtype();
    VATIC_CHECK(w.weight.stride(-1) == 1, "matmul: weight rows must be contiguous");
    const int64_t ldw = w.weight.stride(-2), ldx = x.stride(0), ldy = y.stride(0);
    const float* X = x.data<float>();
    float* Y = y.data<float>();
    const auto& k = kernels();
    if (wt == DType::BF16 || wt == DType::F32) {
      cpu::GemmArgs a;
      a.x = X;
      a.ldx = ldx;
      a.T = T;
      a.w = w.weight.raw();
      a.ldw = ldw;
      a.K = K;
      a.y = Y;
      a.ldy = ldy;
      a.accumulate = accumulate;
      auto fn = wt == DType::BF16 ? k.gemm_bf16 : k.gemm_f32;
      parallel_rows(N, N * K * T, [&](int64_t n0, int64_t n1) { fn(a, n0, n1); });
      return;
    }
    // Other weight dtypes (F16, F8): convert one row at a time, then the dot kernels.
    const int64_t TB = 64;
    for (int64_t t0 = 0; t0 < T; t0 += TB) {
      const int64_t t1 = std::min(T, t0 + TB);
      const bool big = N * K * (t1 - t0) > kMinParallelWork;
      parallel_ranges(N, big, [&](int64_t n0, int64_t n1) {
        std::vector<float> wrow(K);
        for (int64_t n = n0; n < n1; n++) {
          const uint8_t* wp = static_cast<const uint8_t*>(w.weight.raw()) + n * ldw * dtype_size(wt);
          for (int64_t i = 0; i < K; i++) wrow[i] = load_scalar(w.weight, wp + i * dtype_size(wt));
          const float* wf = wrow.data();
          int64_t t = t0;
          float r4[4];
          for (; t + 4 <= t1; t += 4) {
            k.dot4_f32(X + t * ldx, ldx, wf, K, r4);
            for (int r = 0; r < 4; r++) {
              float& out = Y[(t + r) * ldy + n];
              out = accumulate ? out + r4[r] : r4[r];
            }
          }
          for (; t < t1; t++) {
            float v = k.dot_f32(X + t * ldx, wf, K);
            float& out = Y[t * ldy + n];
            out = accumulate ? out + v : v;
          }
        }
      });
    }
  }

  // A dense (bf16 or f32) matmul as a kernel call over a range of W's rows, for the ops below that run several in
  // one split across the threads; false for weights the kernels do not take that way (quantized, other dtypes).
  struct DenseMatmul {
    cpu::GemmArgs a;
    void (*fn)(const cpu::GemmArgs&, int64_t, int64_t) = nullptr;
    int64_t N = 0;
  };
  static bool dense_matmul(const Tensor& x, const Linear& w, float* y, int64_t ldy, DenseMatmul& m) {
    const DType wt = w.weight.dtype();
    if (w.quantized() || (wt != DType::BF16 && wt != DType::F32) || w.weight.ndim() != 2 ||
        w.weight.stride(-1) != 1 || x.ndim() != 2 || x.dtype() != DType::F32 || x.stride(1) != 1 ||
        w.in_features() != x.dim(1))
      return false;
    m.a.x = x.data<float>();
    m.a.ldx = x.stride(0);
    m.a.T = x.dim(0);
    m.a.w = w.weight.raw();
    m.a.ldw = w.weight.stride(-2);
    m.a.K = x.dim(1);
    m.a.y = y;
    m.a.ldy = ldy;
    m.a.accumulate = false;
    m.fn = wt == DType::BF16 ? kernels().gemm_bf16 : kernels().gemm_f32;
    m.N = w.out_features();
    return true;
  }
  // Parts for `work` multiply-adds (as parallel_rows decides), and part p's rows of a matrix of N rows: the
  // multiples of 16 rows parallel_rows would give it. Which thread computes a row changes none of its bits.
  static int64_t matmul_parts(int64_t work) { return work >= kMinParallelMatmul ? cpu::pool().threads() : 1; }
  static std::pair<int64_t, int64_t> part_rows(int64_t N, int64_t parts, int64_t p) {
    constexpr int64_t kAlign = 16;
    const int64_t chunk = ((N + parts - 1) / parts + kAlign - 1) / kAlign * kAlign;
    const int64_t n0 = std::min(N, p * chunk);
    return {n0, std::min(N, n0 + chunk)};
  }

  // A layer's query, key and value projections (dense weights): one split across the threads for all of them
  // instead of a hand-off and a wait per matrix; each row is the kernel's sum, as in matmul.
  void matmul_many(const Tensor& x, const std::vector<const Linear*>& ws, const std::vector<Tensor>& ys) override {
    std::vector<DenseMatmul> ms(ws.size());
    int64_t work = 0;
    bool dense = ws.size() == ys.size();
    for (size_t i = 0; dense && i < ws.size(); i++) {
      const Tensor& y = ys[i];
      dense = y.ndim() == 2 && y.dtype() == DType::F32 && y.stride(1) == 1 && y.dim(0) == x.dim(0) &&
              y.dim(1) == ws[i]->out_features() && dense_matmul(x, *ws[i], y.data<float>(), y.stride(0), ms[i]);
      work += ms[i].N * ms[i].a.K * ms[i].a.T;
    }
    if (!dense) return Backend::matmul_many(x, ws, ys);
    Timed timed(*this, "matmul_many");
    const int64_t parts = matmul_parts(work);
    auto part = [&](int64_t p) {
      for (const DenseMatmul& m : ms) {
        const auto [n0, n1] = part_rows(m.N, parts, p);
        if (n0 < n1) m.fn(m.a, n0, n1);
      }
    };
    if (parts <= 1) return part(0);
    cpu::pool().run(parts, part);
  }

  // A block's output projection with the residual add (and the next block's norm) after it, dense weights: the
  // projection into per-thread scratch rows by the kernels matmul uses, in one split across the threads, then the
  // rows of add_rms_norm (or add_rms_norm_norm), with no tensor allocated between them. Same bits as the default's
  // matmul, then the norm op.
  void matmul_add_rms_norm(const Tensor& a, const Linear& W, const Tensor& x, const Tensor* w, float eps, float s,
                           const Tensor& y, const Tensor* w_next, const Tensor* n) override {
    const int64_t T = a.ndim() == 2 ? a.dim(0) : 0, N = W.out_features();
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(std::max<int64_t>(T * N, 1)));
    DenseMatmul m;
    auto rows_of = [&](const Tensor& t) {
      return t.is_contiguous() && t.dtype() == DType::F32 && t.numel() == T * N && t.ndim() >= 1 && t.dim(-1) == N;
    };
    if (!(T > 0 && N > 0 && rows_of(x) && rows_of(y) && (!n || rows_of(*n)) &&
          dense_matmul(a, W, scratch.data(), N, m)))
      return Backend::matmul_add_rms_norm(a, W, x, w, eps, s, y, w_next, n);
    Timed timed(*this, "matmul_add_rms_norm");
    const int64_t parts = matmul_parts(N * m.a.K * T);
    auto part = [&](int64_t p) {
      const auto [n0, n1] = part_rows(N, parts, p);
      if (n0 < n1) m.fn(m.a, n0, n1);
    };
    if (parts <= 1)
      part(0);
    else
      cpu::pool().run(parts, part);
    const float* F = scratch.data();
    if (n) return add_norm_norm_rows(x.data<float>(), F, N, T, w, eps, s, y.data<float>(), w_next, n->data<float>());
    const NormWeight wn = norm_weight(w, N);
    parallel_ranges(T, T * N > kMinParallelElementwise, [&](int64_t r0, int64_t r1) {
      norm_rows(F, N, x.data<float>(), N, y.data<float>(), N, r0, r1, N, wn, eps, s);
    });
  }

  // y = act(x·gateᵀ) ⊙ (x·upᵀ) (or ⊙ m) with dense weights: each thread computes its rows of both products into
  // scratch rows and applies the activation to those columns at once, one split instead of two matmuls and an
  // elementwise op. Per element the same operations as `gated` (tanh_act or act), so the same bits.
  void matmul_gated(const Tensor& x, const Linear& gate, const Linear* up, const Tensor* m, Unary act,
                    const Tensor& y) override {
    const int64_t T = x.dim(0), N = gate.out_features();
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(2 * T * N));
    float* G = scratch.data();
    float* U = G + T * N;
    DenseMatmul mg, mu;
    const bool dense =
        x.ndim() == 2 && y.ndim() == 2 && y.dtype() == DType::F32 && y.stride(1) == 1 && y.dim(0) == T &&
        y.dim(1) == N && dense_matmul(x, gate, G, N, mg) &&
        (up ? up->out_features() == N && dense_matmul(x, *up, U, N, mu)
            : m && m->ndim() == 2 && m->dtype() == DType::F32 && m->stride(1) == 1 && m->dim(0) == T &&
                  m->dim(1) == N);
    if (!dense) return Backend::matmul_gated(x, gate, up, m, act, y);
    Timed timed(*this, "matmul_gated");
    const float* M = up ? U : m->data<float>();
    const int64_t ldm = up ? N : m->stride(0), ldy = y.stride(0);
    float* Y = y.data<float>();
    const int64_t parts = matmul_parts(N * x.dim(1) * T * (up ? 2 : 1));
    auto part = [&](int64_t p) {
      const auto [n0, n1] = part_rows(N, parts, p);
      if (n0 >= n1) return;
      mg.fn(mg.a, n0, n1);
      if (up) mu.fn(mu.a, n0, n1);
      for (int64_t t = 0; t < T; t++) {
        const float* g = G + t * N;
        const float* u = M + t * ldm;
        float* yr = Y + t * ldy;
        if (act == Unary::GeluTanh || act == Unary::Tanh) {
          tanh_act(act, g + n0, u + n0, yr + n0, n1 - n0);
        } else {
          for (int64_t i = n0; i < n1; i++) yr[i] = CpuBackend::act(act, g[i]) * u[i];
        }
      }
    };
    if (parts <= 1) return part(0);
    cpu::pool().run(parts, part);
  }

  // Splits output rows [0, N) into one contiguous range per thread (multiples of 16 rows, so tiles stay whole).
  template <typename F>
  static void parallel_rows(int64_t N, int64_t work, F&& f) {
    constexpr int64_t kAlign = 16;
    const int64_t nt = std::min<int64_t>(work >= kMinParallelMatmul ? cpu::pool().threads() : 1,
                                         (N + kAlign - 1) / kAlign);
    if (nt <= 1) {
      f(int64_t{0}, N);
      return;
    }
    const int64_t chunk = ((N + nt - 1) / nt + kAlign - 1) / kAlign * kAlign;
    cpu::pool().run(nt, [&](int64_t id) {
      const int64_t n0 = std::min(N, id * chunk), n1 = std::min(N, n0 + chunk);
      if (n0 < n1) f(n0, n1);
    });
  }

  // Group-wise affine quantized weights: int8 / int4 kernels that dequantize in registers (see gemm_impl.h), or
  // the reference path (dequantize each row, then f32 dots) for layouts they do not take.
  void matmul_quantized(const Tensor& x, const Linear& w, const Tensor& y, bool accumulate) {
    const int64_t T = x.dim(0), K = x.dim(1), N = w.out_features();
    const int64_t ldx = x.stride(0), ldy = y.stride(0);
    const float* X = x.data<float>();
    float* Y = y.data<float>();
    const auto& k = kernels();
    const bool fast = (w.bits == 8 || w.bits == 4) && w.group % 32 == 0 && K % w.group == 0 &&
                      w.weight.dtype() == DType::U32 && w.weight.stride(-1) == 1 &&
                      w.scales.dtype() == DType::BF16 && w.biases.dtype() == DType::BF16 &&
                      w.scales.stride(-1) == 1 && w.biases.stride(-1) == 1 &&
                      w.scales.stride(-2) == w.biases.stride(-2);
    if (fast) {
      cpu::QGemmArgs a;
      a.x = X;
      a.ldx = ldx;
      thread_local std::vector<float> prepared;
      if (const int64_t width = k.qgemm_x(X, ldx, T, K, w.bits, w.group, prepared)) {
        a.x = prepared.data();
        a.ldx = width;
      }
      a.T = T;
      a.q = static_cast<const uint8_t*>(w.weight.raw());
      a.ldq = w.weight.stride(-2) * 4;
      a.scales = static_cast<const uint16_t*>(w.scales.raw());
      a.biases = static_cast<const uint16_t*>(w.biases.raw());
      a.lds = w.scales.stride(-2);
      a.bits = w.bits;
      a.group = w.group;
      a.K = K;
      a.y = Y;
      a.ldy = ldy;
      a.accumulate = accumulate;
      parallel_rows(N, N * K * T, [&](int64_t n0, int64_t n1) { k.qgemm(a, n0, n1); });
      return;
    }
    parallel_ranges(N, N * K * T > kMinParallelWork, [&](int64_t n0, int64_t n1) {
      std::vector<float> wrow(K);
      for (int64_t n = n0; n < n1; n++) {
        dequant_row(w, n, wrow.data(), K);
        for (int64_t t = 0; t < T; t++) {
          float v = k.dot_f32(X + t * ldx, wrow.data(), K);
          float& out = Y[t * ldy + n];
          out = accumulate ? out + v : v;
        }
      }
    });
  }

  void embedding(const Linear& w, const Tensor& ids, float scale, const Tensor& out) override {
    Timed timed(*this, "embedding");
    const Tensor& table = w.weight;
    const int64_t n = ids.numel(), D = w.in_features(), V = w.out_features();
    VATIC_CHECK(out.ndim() == 2 && out.dim(0) == n && out.dim(1) == D && out.dtype() == DType::F32 &&
                    out.stride(1) == 1,
                "embedding: output {} for {} ids of width {} (F32 rows)", out.describe(), n, D);
    const int32_t* id = ids.data<int32_t>();
    const size_t es = dtype_size(table.dtype());
    for (int64_t i = 0; i < n; i++) {
      VATIC_CHECK(id[i] >= 0 && id[i] < V, "token id {} is outside the vocabulary of {}", id[i], V);
      float* dst = row_f32(out, i);
      if (w.quantized()) {
        dequant_row(w, id[i], dst, D);
        for (int64_t j = 0; j < D; j++) dst[j] *= scale;
        continue;
      }
      const uint8_t* src = static_cast<const uint8_t*>(table.raw()) + id[i] * table.stride(0) * es;
      if (table.dtype() == DType::BF16) {
        const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
        for (int64_t j = 0; j < D; j++) dst[j] = bf16_to_f32(s[j]) * scale;
      } else {
        for (int64_t j = 0; j < D; j++) dst[j] = load_scalar(table, src + j * es) * scale;
      }
    }
  }

  // The norm weight as the kernels read it: the tensor itself when it is contiguous F32 or BF16 (norm_rows widens
  // bf16 exactly as it goes), else converted into a per-thread f32 buffer.
  struct NormWeight {
    const float* f = nullptr;
    const uint16_t* b = nullptr;
  };
  // `slot` picks one of two per-thread buffers, for an op that needs two converted weights at once.
  static NormWeight norm_weight(const Tensor* w, int64_t D, int slot = 0) {
    if (!w) return {};
    VATIC_CHECK(w->numel() == D, "rms_norm weight {} for rows of {}", w->describe(), D);
    if (w->dtype() == DType::F32 && w->is_contiguous()) return {w->data<float>(), nullptr};
    if (w->dtype() == DType::BF16 && w->is_contiguous()) return {nullptr, w->data<uint16_t>()};
    thread_local std::vector<float> buffers[2];
    std::vector<float>& wf = buffers[slot];
    wf.resize(D);
    for_each_element(*w, [&](const uint8_t* p, int64_t i) { wf[i] = load_scalar(*w, p); });
    return {wf.data(), nullptr};
  }

  // Rows [r0, r1) of an RMS norm: y = x·inv·w, or with res the residual step y = (res + x·inv·w)·s. Per row
  // inv = (Σx²/D + eps)^(-1/2), the sum in double by kernels().sumsq_rows (several rows side by side, each summed as
  // kernels().sumsq sums it alone; f32 in the reference, double keeps our sum order from mattering), then the
  // elementwise part by kernels().norm_rows. Rows go in chunks, so no buffer is allocated.
  static void norm_rows(const float* X, int64_t ldx, const float* res, int64_t ldr, float* Y, int64_t ldy,
                        int64_t r0, int64_t r1, int64_t D, NormWeight w, float eps, float s) {
    constexpr int64_t kChunk = 32;
    double ss[kChunk];
    float inv[kChunk];
    const auto& k = kernels();
    for (int64_t c0 = r0; c0 < r1; c0 += kChunk) {
      const int64_t m = std::min(kChunk, r1 - c0);
      k.sumsq_rows(X + c0 * ldx, ldx, m, D, ss);
      for (int64_t j = 0; j < m; j++) inv[j] = std::pow(static_cast<float>(ss[j] / D) + eps, -0.5f);
      cpu::NormRows a;
      a.x = X + c0 * ldx;
      a.ldx = ldx;
      a.inv = inv;
      a.wf = w.f;
      a.wb = w.b;
      a.res = res ? res + c0 * ldr : nullptr;
      a.ldr = ldr;
      a.s = s;
      a.y = Y + c0 * ldy;
      a.ldy = ldy;
      a.R = m;
      a.n = D;
      k.norm_rows(a);
    }
  }

  void rms_norm(const Tensor& x, const Tensor* w, float eps, const Tensor& y) override {
    Timed timed(*this, "rms_norm");
    auto rows = [](const Tensor& t) { return t.is_contiguous() || (t.ndim() == 2 && t.stride(1) == 1); };
    VATIC_CHECK(rows(x) && rows(y) && x.dtype() == DType::F32 && x.numel() == y.numel() && x.dim(-1) == y.dim(-1),
                "rms_norm expects F32 rows of unit stride, got {} -> {}", x.describe(), y.describe());
    const int64_t D = x.dim(-1), R = x.numel() / D;
    const int64_t ldx = x.is_contiguous() ? D : x.stride(0), ldy = y.is_contiguous() ? D : y.stride(0);
    const NormWeight wn = norm_weight(w, D);
    const float* X = x.data<float>();
    float* Y = y.data<float>();
    parallel_ranges(R, R * D > kMinParallelElementwise, [&](int64_t r0, int64_t r1) {
      norm_rows(X, ldx, nullptr, 0, Y, ldy, r0, r1, D, wn, eps, 1.0f);
    });
  }

  // One pass instead of the default's rms_norm, add and scale (and the temporary between them), with the same
  // arithmetic per element: y = (x + f·inv·w)·s.
  void add_rms_norm(const Tensor& x, const Tensor& f, const Tensor* w, float eps, float s, const Tensor& y) override {
    Timed timed(*this, "add_rms_norm");
    VATIC_CHECK(x.is_contiguous() && f.is_contiguous() && y.is_contiguous() && x.dtype() == DType::F32 &&
                    f.dtype() == DType::F32 && y.dtype() == DType::F32 && x.numel() == f.numel() &&
                    y.numel() == f.numel(),
                "add_rms_norm: x {} f {} y {}", x.describe(), f.describe(), y.describe());
    const int64_t D = f.dim(-1), R = f.numel() / D;
    const NormWeight wn = norm_weight(w, D);
    const float* X = x.data<float>();
    const float* F = f.data<float>();
    float* Y = y.data<float>();
    parallel_ranges(R, R * D > kMinParallelElementwise, [&](int64_t r0, int64_t r1) {
      norm_rows(F, D, X, D, Y, D, r0, r1, D, wn, eps, s);
    });
  }

  // add_rms_norm, then the next block's norm of its result, row chunk by row chunk while the rows are in cache:
  // the same kernels on the same rows as the two ops one after the other, so the same bits.
  void add_rms_norm_norm(const Tensor& x, const Tensor& f, const Tensor* w, float eps, float s, const Tensor& y,
                         const Tensor* w_next, const Tensor& n) override {
    if (!(x.is_contiguous() && f.is_contiguous() && y.is_contiguous() && n.is_contiguous() &&
          x.dtype() == DType::F32 && f.dtype() == DType::F32 && y.dtype() == DType::F32 && n.dtype() == DType::F32 &&
          x.numel() == f.numel() && y.numel() == f.numel() && n.numel() == f.numel() && f.ndim() >= 1 &&
          f.dim(-1) == n.dim(-1) && f.dim(-1) > 0))
      return Backend::add_rms_norm_norm(x, f, w, eps, s, y, w_next, n);
    Timed timed(*this, "add_rms_norm_norm");
    add_norm_norm_rows(x.data<float>(), f.data<float>(), f.dim(-1), f.numel() / f.dim(-1), w, eps, s,
                       y.data<float>(), w_next, n.data<float>());
  }
  // Rows of add_rms_norm_norm (all contiguous rows of D): y = (x + f·inv·w)·s, then n = y·inv'·w_next.
  // Rows [0, R) of add_rms_norm_norm (contiguous rows of D), chunks of rows through both norms.
  static void add_norm_norm_rows(const float* X, const float* F, int64_t D, int64_t R, const Tensor* w, float eps,
                                 float s, float* Y, const Tensor* w_next, float* N) {
    const NormWeight wn1 = norm_weight(w, D, 0), wn2 = norm_weight(w_next, D, 1);
    parallel_ranges(R, R * D > kMinParallelElementwise, [&](int64_t r0, int64_t r1) {
      constexpr int64_t kRows = 8;
      for (int64_t c0 = r0; c0 < r1; c0 += kRows) {
        const int64_t c1 = std::min(r1, c0 + kRows);
        norm_rows(F, D, X, D, Y, D, c0, c1, D, wn1, eps, s);
        norm_rows(Y, D, nullptr, 0, N, D, c0, c1, D, wn2, eps, 1.0f);
      }
    });
  }

  // A layer's query and key norms and rotations and the values' norm (NeoX rotation): each part's rows normed and
  // then rotated token by token while they are in cache, one op instead of a norm and a rotation per part; the
  // rows of rms_norm and the rotation of rope, so the same bits. Then kv_write, as the default does.
  void rms_norm_rope_many(const std::vector<NormRope>& parts, float eps, const Tensor& positions,
                          const Tensor& inv_freq, bool interleaved, const KvSlots* kv) override {
    bool direct = !interleaved && !parts.empty() && positions.dtype() == DType::I32 && positions.is_contiguous() &&
                  inv_freq.dtype() == DType::F32 && inv_freq.is_contiguous();
    const int64_t T = direct ? parts[0].x->dim(0) : 0, n = inv_freq.numel();
    for (const NormRope& p : parts) {
      const Tensor& x = *p.x;
      const Tensor& y = *p.y;
      direct = direct && x.ndim() == 3 && y.ndim() == 3 && x.is_contiguous() && y.is_contiguous() &&
               x.dtype() == DType::F32 && y.dtype() == DType::F32 && x.shape() == y.shape() && x.dim(0) == T &&
               x.dim(2) > 0 && positions.numel() == T && (!p.rope || 2 * n <= x.dim(2));
    }
    if (!direct) return Backend::rms_norm_rope_many(parts, eps, positions, inv_freq, interleaved, kv);
    {
      Timed timed(*this, "rms_norm_rope_many");
      const RopeTable* tab = nullptr;
      for (const NormRope& p : parts)
        if (p.rope && n > 0) tab = &rope_table(positions.data<int32_t>(), T, inv_freq.data<float>(), n);
      for (const NormRope& p : parts) {
        const int64_t H = p.x->dim(1), D = p.x->dim(2);
        const NormWeight wn = norm_weight(p.w, D);
        const float* X = p.x->data<float>();
        float* Y = p.y->data<float>();
        const bool rotate = p.rope && n > 0;
        parallel_ranges(T, T * H * D > kMinParallelElementwise, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; t++) {
            norm_rows(X, D, nullptr, 0, Y, D, t * H, (t + 1) * H, D, wn, eps, 1.0f);
            if (rotate)
              kernels().rope_neox(Y + t * H * D, D, H, D / 2, tab->cos.data() + t * n, tab->sin.data() + t * n, n);
          }
        });
      }
    }
    if (kv) kv_write(*parts.at(1).y, *parts.at(2).y, positions, kv->keys, kv->values, kv->slot_pos, kv->ring);
  }

  void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool interleaved) override {
    Timed timed(*this, "rope");
    VATIC_CHECK(x.ndim() == 3 && x.stride(2) == 1 && x.dtype() == DType::F32, "rope expects F32 [T, H, D], got {}",
                x.describe());
    const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2), n = inv_freq.numel();
    const int32_t* pos = positions.data<int32_t>();
    const float* f = inv_freq.data<float>();
    VATIC_CHECK(interleaved ? 2 * n <= D : 2 * n <= D, "rope: {} frequencies for head dim {}", n, D);
    const RopeTable& tab = rope_table(pos, T, f, n);
    // Tokens in parallel: a prompt's q and k rotations were a serial stretch of every layer.
    parallel_for(T, T * H * n > kMinParallelElementwise, [&](int64_t t) {
      const float* c = tab.cos.data() + t * n;
      const float* s = tab.sin.data() + t * n;
      if (!interleaved) {
        kernels().rope_neox(x.data<float>() + t * x.stride(0), x.stride(1), H, D / 2, c, s, n);
        return;
      }
      for (int64_t h = 0; h < H; h++) {
        float* v = x.data<float>() + t * x.stride(0) + h * x.stride(1);
        for (int64_t i = 0; i < n; i++) {
          int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + D / 2;
          float x0 = v[a], x1 = v[b];
          v[a] = x0 * c[i] - x1 * s[i];
          v[b] = x1 * c[i] + x0 * s[i];
        }
      }
    });
  }

  // cos and sin of pos[t]·f[i] for every token and frequency. A layer rotates q and then k with the same positions
  // and frequencies, and the layers of one kind share theirs, so the table of the last call is kept (per thread)
  // and reused while both match exactly: the sines and cosines were 2 % of a 128-token prompt. The values are the
  // same std::cos / std::sin of the same float product either way.
  struct RopeTable {
    std::vector<int32_t> pos;
    std::vector<float> freq, cos, sin;
  };
  static const RopeTable& rope_table(const int32_t* pos, int64_t T, const float* f, int64_t n) {
    thread_local RopeTable last;
    RopeTable& tab = last;  // the calling thread's table, filled by the pool's threads below
    const bool same = static_cast<int64_t>(tab.pos.size()) == T && static_cast<int64_t>(tab.freq.size()) == n &&
                      std::equal(pos, pos + T, tab.pos.begin()) &&
                      std::memcmp(f, tab.freq.data(), static_cast<size_t>(n) * sizeof(float)) == 0;
    if (same) return tab;
    tab.pos.assign(pos, pos + T);
    tab.freq.assign(f, f + n);
    tab.cos.resize(static_cast<size_t>(T * n));
    tab.sin.resize(static_cast<size_t>(T * n));
    parallel_for(T, T * n > kMinParallelElementwise / 16, [&](int64_t t) {
      for (int64_t i = 0; i < n; i++) {
        const float a = static_cast<float>(pos[t]) * f[i];
        tab.cos[t * n + i] = std::cos(a);
        tab.sin[t * n + i] = std::sin(a);
      }
    });
    return tab;
  }

  // The key and value rows (of one KV head) a query at position pq sees among the S cache slots, in slot order;
  // their count.
  static int64_t visible_rows(const int32_t* kp, int64_t S, int32_t pq, int window, const float* kb, int64_t lk,
                              const float* vb, int64_t lv, const float** krows, const float** vrows) {
    int64_t n = 0;
    for (int64_t s = 0; s < S; s++) {
      const int32_t pk = kp[s];
      if (pk < 0 || pk > pq || (window > 0 && pq - pk >= window)) continue;
      krows[n] = kb + s * lk;
      vrows[n] = vb + s * lv;
      n++;
    }
    return n;
  }
  // One head's n scores in place: scaled, then exp(score - the largest) (f32); returns their sum in double, 0 (and
  // every weight 0) when no score is above -inf.
  static double softmax_weights(float* r, int64_t n, float scale) {
    const float ninf = -std::numeric_limits<float>::infinity();
    if (scale != 1.0f)
      for (int64_t j = 0; j < n; j++) r[j] *= scale;
    // The largest score. Only a zero's sign can depend on the order of the comparisons, and r - (+0) equals
    // r - (-0) for every r (both ±0 give exp(±0) = 1).
    const float mx = running_max8(r, n, ninf);
    if (mx == ninf) {
      std::fill(r, r + n, 0.0f);
      return 0.0;
    }
    double sum = 0;
    for (int64_t j = 0; j < n; j++) {
      r[j] = std::exp(r[j] - mx);
      sum += r[j];
    }
    return sum;
  }
  // Columns [c0, c1) of each head's weighted sum of values divided by its sum of weights (zeros for a sum of 0).
  static void normalize_heads(float* o, int64_t ldo, int64_t group, const double* sums, int64_t c0, int64_t c1) {
    for (int64_t g = 0; g < group; g++) {
      float* og = o + g * ldo;
      if (sums[g] == 0.0) {
        std::fill(og + c0, og + c1, 0.0f);
        continue;
      }
      const float inv = static_cast<float>(1.0 / sums[g]);
      for (int64_t j = c0; j < c1; j++) og[j] *= inv;
    }
  }

  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                 const AttentionParams& p, const Tensor& out) override {
    Timed timed(*this, "attention");
    const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), S = k.dim(0), Hkv = k.dim(1), Dv = v.dim(2);
    VATIC_CHECK(k.dim(2) == D && v.dim(0) == S && v.dim(1) == Hkv && Hq % Hkv == 0 && out.dim(0) == T &&
                    out.dim(1) == Hq && out.dim(2) == Dv,
                "attention: q {} k {} v {} out {}", q.describe(), k.describe(), v.describe(), out.describe());
    VATIC_CHECK(q.stride(2) == 1 && k.stride(2) == 1 && v.stride(2) == 1 && out.stride(2) == 1,
                "attention: head rows must be contiguous");
    const int32_t* qp = q_pos.data<int32_t>();
    const int32_t* kp = k_pos.data<int32_t>();
    const int64_t group = Hq / Hkv;
    if (T >= kAttnQueryBlock && S > 0) return attention_blocked(q, k, v, qp, kp, p, out, group);
    // Decode and short verification: per query and KV head, the visible keys are listed once, then the query heads
    // of the group score all of them in one pass over the keys (kernels().dot_rows) and sum the values weighted by
    // the softmax in one pass over the values (axpy_rows): each key and value row is read once for the group,
    // instead of one dot call and one axpy call per head and key. Same masking and softmax (f32 scores, sum of the
    // exponentials in double).
    if (T * Hkv < cpu::pool().threads() && cpu::use_threads(group * S * (D + Dv) >= kMinSplitAttentionPair)) {
      // Fewer pairs than threads: one pair at a time, its work split across the threads.
      PairScratch w;
      for (int64_t i = 0; i < T * Hkv; i++) attend_pair(q, k, v, qp, kp, p, out, group, i / Hkv, i % Hkv, true, w);
      return;
    }
    // Pairs i = t·Hkv + kh, a range of them per thread. Each pair is computed alike whichever thread takes it.
    parallel_ranges(T * Hkv, T * Hq * S * D >= kMinParallelAttention, [&](int64_t i0, int64_t i1) {
      thread_local PairScratch w;
      for (int64_t i = i0; i < i1; i++) attend_pair(q, k, v, qp, kp, p, out, group, i / Hkv, i % Hkv, false, w);
    });
  }

  struct PairScratch {
    std::vector<const float*> krows, vrows;
    std::vector<float> sc;
    std::vector<double> sums;
  };
  // One (query t, KV head kh) pair of the path above. With `split` (fewer pairs than threads) and from
  // kMinSplitAttentionPair multiply-adds, its work goes across the threads: the scores by blocks of 16 keys (each key
  // keeps its slot in dot_rows' blocks of 16 / H), the softmax by query head, the value sums and their scaling by
  // blocks of 16 columns (each column's sum still runs over the keys in order, one FMA a key). Every value is
  // computed as on one thread: the same bits.
  static void attend_pair(const Tensor& q, const Tensor& k, const Tensor& v, const int32_t* qp, const int32_t* kp,
                          const AttentionParams& p, const Tensor& out, int64_t group, int64_t t, int64_t kh,
                          bool split, PairScratch& w) {
    const int64_t D = q.dim(2), S = k.dim(0), Dv = v.dim(2), ldo = out.stride(1);
    const auto& kk = kernels();
    w.krows.resize(static_cast<size_t>(S));
    w.vrows.resize(static_cast<size_t>(S));
    const int64_t n = visible_rows(kp, S, qp[t], p.window, k.data<float>() + kh * k.stride(1), k.stride(0),
                                   v.data<float>() + kh * v.stride(1), v.stride(0), w.krows.data(), w.vrows.data());
    float* o = out.data<float>() + t * out.stride(0) + kh * group * ldo;
    if (n == 0) {
      for (int64_t g = 0; g < group; g++) std::fill(o + g * ldo, o + g * ldo + Dv, 0.0f);
      return;
    }
    const bool big = split && group * n * (D + Dv) >= kMinSplitAttentionPair;
    w.sc.resize(static_cast<size_t>(group * n));
    w.sums.resize(static_cast<size_t>(group));
    float* sc = w.sc.data();
    double* sums = w.sums.data();
    const float* qh = q.data<float>() + t * q.stride(0) + kh * group * q.stride(1);
    parallel_ranges((n + 15) / 16, big, [&](int64_t b0, int64_t b1) {
      const int64_t j0 = b0 * 16, j1 = std::min(n, b1 * 16);
      kk.dot_rows(qh, q.stride(1), group, w.krows.data() + j0, j1 - j0, D, sc + j0, n);
    });
    parallel_for(group, big, [&](int64_t g) { sums[g] = softmax_weights(sc + g * n, n, p.scale); });
    parallel_ranges((Dv + 15) / 16, big, [&](int64_t b0, int64_t b1) {
      const int64_t c0 = b0 * 16, c1 = std::min(Dv, b1 * 16);
      const float* const* rows = w.vrows.data();
      if (c0 > 0) {  // a later block of columns: its own view of the value rows
        thread_local std::vector<const float*> cols;
        cols.resize(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; j++) cols[j] = w.vrows[j] + c0;
        rows = cols.data();
      }
      kk.axpy_rows(sc, n, group, rows, n, c1 - c0, o + c0, ldo);
      normalize_heads(o, ldo, group, sums, c0, c1);
    });
  }

  // Prefill: per KV head and block of queries, the scores of all the query heads that share the KV head are one
  // tiled matmul over the keys any query of the block can see (Q·Kᵀ, rows query-major: query i, head g at row
  // i·group + g), and their weighted sums of values another (P·V, over the values transposed once per call),
  // instead of one dot product and one axpy per query, head and key. Blocks hold at least kAttnBlockRows rows
  // (16 queries or more), so both matmuls take the packed-panel kernel and each key block is packed once for
  // the whole group. Same masking and softmax as the per-query path (f32 scores, sum of the exponentials in
  // double).
  static constexpr int64_t kAttnQueryBlock = 16;
  static constexpr int64_t kAttnBlockRows = 64;
  static void attention_blocked(const Tensor& q, const Tensor& k, const Tensor& v, const int32_t* qp,
                                const int32_t* kp, const AttentionParams& p, const Tensor& out, int64_t group) {
    const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), S = k.dim(0), Dv = v.dim(2), Hkv = Hq / group;
    const auto& kk = kernels();
    const float ninf = -std::numeric_limits<float>::infinity();
    const bool big = T * Hq * S * D > kMinParallelWork;
    std::vector<float> vt(static_cast<size_t>(Hkv * Dv * S));  // [Hkv][Dv][S]
    parallel_for(Hkv * Dv, big, [&](int64_t i) {  // i = kh·Dv + d
      const float* src = v.data<float>() + (i / Dv) * v.stride(1) + i % Dv;
      float* dst = vt.data() + i * S;
      for (int64_t s = 0; s < S; s++) dst[s] = src[s * v.stride(0)];
    });
    auto visible = [&](int32_t pq, int32_t pk) {
      return pk >= 0 && pk <= pq && (p.window <= 0 || pq - pk < p.window);
    };
    const int64_t QB = std::max(kAttnQueryBlock, (kAttnBlockRows + group - 1) / group);  // queries per block
    const int64_t blocks = (T + QB - 1) / QB;
    // Blocks i = kh·blocks + b go one at a time to whichever thread asks next (a causal prompt's later blocks see
    // more keys); each thread sizes its buffers when it takes its first block.
    const int64_t items = Hkv * blocks;
    std::atomic<int64_t> next{0};
    parallel_for(cpu::pool().threads(), big, [&](int64_t) {
      const int64_t R = QB * group;
      std::vector<float> qb, sc, ob;
      std::vector<double> sums;
      for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < items;) {
        if (qb.empty()) {
          qb.resize(static_cast<size_t>(R * D));
          sc.resize(static_cast<size_t>(R * S));
          ob.resize(static_cast<size_t>(R * Dv));
          sums.resize(static_cast<size_t>(R));
        }
        const int64_t kh = i / blocks, b = i % blocks;
        const int64_t t0 = b * QB, t1 = std::min(T, t0 + QB), nt = t1 - t0, nr = nt * group;
        auto out_row = [&](int64_t r) {
          return out.data<float>() + (t0 + r / group) * out.stride(0) + (kh * group + r % group) * out.stride(1);
        };
        // The keys any query of the block sees: [s0, s1).
        int64_t s0 = S, s1 = 0;
        for (int64_t s = 0; s < S; s++)
          for (int64_t t = t0; t < t1; t++)
            if (visible(qp[t], kp[s])) {
              s0 = std::min(s0, s);
              s1 = std::max(s1, s + 1);
              break;
            }
        if (s0 >= s1) {
          for (int64_t r = 0; r < nr; r++) std::fill(out_row(r), out_row(r) + Dv, 0.0f);
          continue;
        }
        for (int64_t r = 0; r < nr; r++) {
          const float* src = q.data<float>() + (t0 + r / group) * q.stride(0) + (kh * group + r % group) * q.stride(1);
          std::copy(src, src + D, qb.data() + r * D);
        }
        const int64_t ns = s1 - s0;
        cpu::GemmArgs a;
        a.x = qb.data();
        a.ldx = D;
        a.T = nr;
        a.w = k.data<float>() + s0 * k.stride(0) + kh * k.stride(1);
        a.ldw = k.stride(0);
        a.K = D;
        a.y = sc.data();
        a.ldy = ns;
        kk.gemm_f32(a, 0, ns);
        for (int64_t r = 0; r < nr; r++) {
          const int32_t pq = qp[t0 + r / group];
          float* row = sc.data() + r * ns;
          float mx = ninf;
          for (int64_t j = 0; j < ns; j++) {
            const bool vis = visible(pq, kp[s0 + j]);
            row[j] = vis ? p.scale * row[j] : ninf;
            if (vis) mx = std::max(mx, row[j]);
          }
          double sum = 0;
          for (int64_t j = 0; j < ns; j++) {
            const float e = row[j] == ninf ? 0.0f : std::exp(row[j] - mx);
            row[j] = e;
            sum += e;
          }
          sums[r] = mx == ninf ? 0.0 : sum;
        }
        cpu::GemmArgs pv;
        pv.x = sc.data();
        pv.ldx = ns;
        pv.T = nr;
        pv.w = vt.data() + kh * Dv * S + s0;
        pv.ldw = S;
        pv.K = ns;
        pv.y = ob.data();
        pv.ldy = Dv;
        kk.gemm_f32(pv, 0, Dv);
        for (int64_t r = 0; r < nr; r++) {
          float* o = out_row(r);
          if (sums[r] == 0.0) {
            std::fill(o, o + Dv, 0.0f);
            continue;
          }
          const float inv = static_cast<float>(1.0 / sums[r]);
          const float* src = ob.data() + r * Dv;
          for (int64_t j = 0; j < Dv; j++) o[j] = src[j] * inv;
        }
      }
    });
  }

  template <typename F>
  void binary(const Tensor& a, const Tensor& b, const Tensor& y, F&& f) {
    VATIC_CHECK(a.is_contiguous() && b.is_contiguous() && y.is_contiguous() && a.dtype() == DType::F32 &&
                    b.dtype() == DType::F32 && y.numel() == a.numel(),
                "elementwise op on {} and {}", a.describe(), b.describe());
    const int64_t n = a.numel(), m = b.numel();
    VATIC_CHECK(m > 0 && n % m == 0, "cannot broadcast {} over {}", b.describe(), a.describe());
    const float* A = a.data<float>();
    const float* B = b.data<float>();
    float* Y = y.data<float>();
    if (m == n) {
      for (int64_t i = 0; i < n; i++) Y[i] = f(A[i], B[i]);
    } else {
      for (int64_t i = 0; i < n; i++) Y[i] = f(A[i], B[i % m]);
    }
  }
  void add(const Tensor& a, const Tensor& b, const Tensor& y) override {
    Timed timed(*this, "add");
    binary(a, b, y, [](float u, float v) { return u + v; });
  }
  void mul(const Tensor& a, const Tensor& b, const Tensor& y) override {
    Timed timed(*this, "mul");
    binary(a, b, y, [](float u, float v) { return u * v; });
  }
  void scale(const Tensor& a, float s, const Tensor& y) override {
    Timed timed(*this, "scale");
    const float* A = a.data<float>();
    float* Y = y.data<float>();
    for (int64_t i = 0; i < a.numel(); i++) Y[i] = A[i] * s;
  }
  static float act(Unary op, float x) {
    switch (op) {
      case Unary::GeluTanh: {
        const float c = 0.7978845608028654f;  // sqrt(2/pi)
        return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
      }
      case Unary::Silu: return x / (1.0f + std::exp(-x));
      case Unary::Sigmoid: return 1.0f / (1.0f + std::exp(-x));
      case Unary::Tanh: return std::tanh(x);
      case Unary::Exp: return std::exp(x);
    }
    return x;
  }
  // Tanh-based activations in blocks through the vector tanh: Y[i] = f(A[i]) (· U[i] when U is given), with f the
  // same expression as act() except that tanh comes from kernels().tanh (GELU: kernels().gelu_tanh, the whole
  // expression in vectors, the same operations in the same order).
  static constexpr int64_t kActBlock = 1024;
  static void tanh_act(Unary op, const float* A, const float* U, float* Y, int64_t n, float cap = 1.0f) {
    const auto& k = kernels();
    auto block = [&](int64_t i0) {
      const int64_t m = std::min(kActBlock, n - i0);
      if (op == Unary::GeluTanh) return k.gelu_tanh(A + i0, U ? U + i0 : nullptr, Y + i0, m);
      // tanh and the soft-cap in vectors (a cap of 1 divides and multiplies by 1: tanh's own bits).
      if (!U) return k.softcap(A + i0, Y + i0, m, cap);
      // tanh gating u (GeGLU-style gates with a tanh activation).
      float z[kActBlock] = {};
      const float* a = A + i0;
      for (int64_t i = 0; i < m; i++) z[i] = a[i] / cap;
      k.tanh(z, z, m);
      float* y = Y + i0;
      for (int64_t i = 0; i < m; i++) y[i] = cap * z[i] * U[i0 + i];
    };
    const int64_t blocks = (n + kActBlock - 1) / kActBlock;
    parallel_for(blocks, n > kMinParallelElementwise, [&](int64_t b) { block(b * kActBlock); });
  }
  void unary(Unary op, const Tensor& a, const Tensor& y) override {
    Timed timed(*this, "unary");
    const float* A = a.data<float>();
    float* Y = y.data<float>();
    const int64_t n = a.numel();
    if (op == Unary::GeluTanh || op == Unary::Tanh) return tanh_act(op, A, nullptr, Y, n);
    parallel_for(n, n > kMinParallelElementwise, [&](int64_t i) { Y[i] = act(op, A[i]); });
  }
  void gated(Unary op, const Tensor& g, const Tensor& u, const Tensor& y) override {
    Timed timed(*this, "gated");
    VATIC_CHECK(g.numel() == u.numel() && y.is_contiguous(), "gated: {} and {}", g.describe(), u.describe());
    if (!g.is_contiguous() || !u.is_contiguous()) {  // rows of wider tensors: made contiguous first
      Tensor gc = g, uc = u;
      for (Tensor* t : {&gc, &uc})
        if (!t->is_contiguous()) {
          Tensor c = Tensor::empty(t->shape(), DType::F32);
          copy(*t, c);
          *t = c;
        }
      return gated(op, gc, uc, y);
    }
    const float* G = g.data<float>();
    const float* U = u.data<float>();
    float* Y = y.data<float>();
    const int64_t n = g.numel();
    if (op == Unary::GeluTanh || op == Unary::Tanh) return tanh_act(op, G, U, Y, n);
    parallel_for(n, n > kMinParallelElementwise, [&](int64_t i) { Y[i] = act(op, G[i]) * U[i]; });
  }
  void softcap(const Tensor& a, float cap, const Tensor& y) override {
    Timed timed(*this, "softcap");
    if (a.is_contiguous() && y.is_contiguous() && cap != 1.0f)
      return tanh_act(Unary::Tanh, a.data<float>(), nullptr, y.data<float>(), a.numel(), cap);
    const float* A = a.data<float>();
    float* Y = y.data<float>();
    for (int64_t i = 0; i < a.numel(); i++) Y[i] = cap * std::tanh(A[i] / cap);
  }
  void softmax(const Tensor& a, const Tensor& y) override {
    Timed timed(*this, "softmax");
    const int64_t D = a.dim(-1), R = a.numel() / D;
    for (int64_t r = 0; r < R; r++) {
      const float* x = a.data<float>() + r * D;
      float* o = y.data<float>() + r * D;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < D; i++) mx = std::max(mx, x[i]);
      double sum = 0;
      for (int64_t i = 0; i < D; i++) {
        o[i] = std::exp(x[i] - mx);
        sum += o[i];
      }
      float inv = static_cast<float>(1.0 / sum);
      for (int64_t i = 0; i < D; i++) o[i] *= inv;
    }
  }
  void topk(const Tensor& a, int k, const Tensor& values, const Tensor& indices) override {
    Timed timed(*this, "topk");
    const int64_t N = a.dim(-1), R = a.numel() / N;
    VATIC_CHECK(k > 0 && k <= N, "topk: k={} for rows of {}", k, N);
    if (k == 1) {
      // Greedy decoding's argmax, the first of equal maxima (as below), no index array to sort: the largest value
      // in eight independent running maxima (a NaN never replaces one), then the first index holding it. The
      // same index as one scan keeping the first strictly larger value, which a NaN first in the row keeps.
      for (int64_t r = 0; r < R; r++) {
        const float* x = a.data<float>() + r * N;
        int64_t best = 0;
        if (x[0] == x[0]) {
          const float top = running_max8(x, N, x[0]);
          while (!(x[best] == top)) best++;
        }
        values.data<float>()[r] = x[best];
        indices.data<int32_t>()[r] = static_cast<int32_t>(best);
      }
      return;
    }
    std::vector<int32_t> idx(N);
    for (int64_t r = 0; r < R; r++) {
      const float* x = a.data<float>() + r * N;
      for (int64_t i = 0; i < N; i++) idx[i] = static_cast<int32_t>(i);
      // Ties go to the lower index, as torch.topk does on CPU for these sizes.
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                        [&](int32_t i, int32_t j) { return x[i] > x[j] || (x[i] == x[j] && i < j); });
      for (int i = 0; i < k; i++) {
        values.data<float>()[r * k + i] = x[idx[i]];
        indices.data<int32_t>()[r * k + i] = idx[i];
      }
    }
  }

  void matmul_experts(const Tensor& x, const Linear& w, const Tensor& experts, const Tensor& y) override {
    Timed timed(*this, "matmul_experts");
    const int64_t R = experts.numel(), X = x.dim(0), E = w.weight.dim(0), K = x.dim(1), N = w.out_features();
    VATIC_CHECK(w.weight.ndim() == 3 && X > 0 && R % X == 0 && y.dim(0) == R && y.dim(1) == N &&
                    w.in_features() == K && experts.dtype() == DType::I32 && experts.is_contiguous(),
                "matmul_experts: x {} · W{} for {} routed rows -> y {}", x.describe(), w.weight.describe(), R,
                y.describe());
    const int64_t per = R / X;
    const int32_t* ex = experts.data<int32_t>();
    // Group rows by expert so each expert's weights stream once.
    std::vector<std::vector<int64_t>> rows(static_cast<size_t>(E));
    for (int64_t r = 0; r < R; r++) {
      VATIC_CHECK(ex[r] >= 0 && ex[r] < E, "expert {} of {} routed", ex[r], E);
      rows[ex[r]].push_back(r);
    }
    for (int64_t e = 0; e < E; e++) {
      const auto& rs = rows[e];
      if (rs.empty()) continue;
      const int64_t n = static_cast<int64_t>(rs.size());
      Tensor xe = empty({n, K}, DType::F32), ye = empty({n, N}, DType::F32);
      for (int64_t j = 0; j < n; j++) copy(x.slice(0, rs[j] / per, rs[j] / per + 1), xe.slice(0, j, j + 1));
      matmul(xe, w.select(e), ye, false);
      for (int64_t j = 0; j < n; j++) copy(ye.slice(0, j, j + 1), y.slice(0, rs[j], rs[j] + 1));
    }
  }

  void gather_rows(const Tensor& table, const Tensor& ids, const Tensor& out) override {
    Timed timed(*this, "gather_rows");
    const int64_t R = table.dim(0), C = table.dim(1), n = ids.numel();
    VATIC_CHECK((table.dtype() == DType::I32 || table.dtype() == DType::F32) && ids.dtype() == DType::I32 &&
                    out.dtype() == table.dtype() && table.is_contiguous() && out.dim(0) == n && out.dim(1) == C &&
                    out.is_contiguous(),
                "gather_rows: table {} ids {} out {}", table.describe(), ids.describe(), out.describe());
    for (int64_t i = 0; i < n; i++) {
      const int32_t r = ids.data<int32_t>()[i];
      VATIC_CHECK(r >= 0 && r < R, "gather_rows: row {} of {}", r, R);
      std::memcpy(out.data<int32_t>() + i * C, table.data<int32_t>() + r * C, static_cast<size_t>(C) * 4);
    }
  }

  void scatter(const Tensor& values, const Tensor& index, const Tensor& out) override {
    Timed timed(*this, "scatter");
    const int64_t n = values.numel(), V = out.numel();
    VATIC_CHECK(values.dtype() == DType::F32 && index.dtype() == DType::I32 && index.numel() == n &&
                    out.dtype() == DType::F32 && out.is_contiguous(),
                "scatter: values {} index {} out {}", values.describe(), index.describe(), out.describe());
    for (int64_t i = 0; i < n; i++) {
      const int32_t j = index.data<int32_t>()[i];
      VATIC_CHECK(j >= 0 && j < V, "scatter: index {} of {}", j, V);
      out.data<float>()[j] = values.data<float>()[i];
    }
  }

  // The centroid head without gathering its rows: a chosen token's logit is the dot product of y with its bf16
  // table row where the row lies (the default widens every chosen row into a fresh buffer first, and multiplies
  // after). Other encodings take the default.
  void masked_logits(const Tensor& y, const Linear& table, const Tensor& groups, const Tensor& clusters,
                     const Tensor& logits) override {
    const Tensor& w = table.weight;
    const int64_t K = table.in_features(), V = table.out_features();
    const bool fits = !table.quantized() && w.dtype() == DType::BF16 && w.ndim() == 2 && w.stride(1) == 1 &&
                      y.dtype() == DType::F32 && y.is_contiguous() && y.numel() == K && groups.ndim() == 2 &&
                      groups.dtype() == DType::I32 && groups.is_contiguous() && groups.numel() == V &&
                      clusters.dtype() == DType::I32 && clusters.is_contiguous() && logits.dtype() == DType::F32 &&
                      logits.is_contiguous() && logits.numel() == V;
    if (!fits) return Backend::masked_logits(y, table, groups, clusters, logits);
    Timed timed(*this, "masked_logits");
    const int64_t C = groups.dim(0), per = groups.dim(1), k = clusters.numel(), ldw = w.stride(0);
    const int32_t* cl = clusters.data<int32_t>();
    const int32_t* G = groups.data<int32_t>();
    for (int64_t i = 0; i < k; i++) {
      VATIC_CHECK(cl[i] >= 0 && cl[i] < C, "masked_logits: cluster {} of {}", cl[i], C);
      for (int64_t j = 0; j < per; j++)
        VATIC_CHECK(G[cl[i] * per + j] >= 0 && G[cl[i] * per + j] < V, "masked_logits: token {} of a vocabulary of {}",
                    G[cl[i] * per + j], V);
    }
    float* L = logits.data<float>();
    std::fill_n(L, V, -std::numeric_limits<float>::infinity());
    const float* Y = y.data<float>();
    const uint16_t* W = w.data<uint16_t>();
    const auto& kr = kernels();
    const int64_t n = k * per;
    parallel_ranges(n, n * K > kMinParallelElementwise, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; r++) {
        const int32_t id = G[cl[r / per] * per + r % per];
        L[id] = kr.dot_bf16(Y, W + id * ldw, K);
      }
    });
  }

  void combine_rows(const Tensor& rows, const Tensor& weights, const Tensor& out) override {
    Timed timed(*this, "combine_rows");
    const int64_t T = out.dim(0), D = out.dim(1), k = weights.dim(1);
    VATIC_CHECK(rows.dim(0) == T * k && rows.dim(1) == D && weights.dim(0) == T && rows.is_contiguous() &&
                    weights.is_contiguous() && out.is_contiguous(),
                "combine_rows: rows {} weights {} out {}", rows.describe(), weights.describe(), out.describe());
    const float* R = rows.data<float>();
    const float* W = weights.data<float>();
    float* O = out.data<float>();
    for (int64_t t = 0; t < T; t++) {
      float* o = O + t * D;
      std::fill(o, o + D, 0.0f);
      for (int64_t j = 0; j < k; j++) kernels().axpy(W[t * k + j], R + (t * k + j) * D, o, D);
    }
  }

  void route(const Tensor& a, const RouteParams& p, const Tensor& weights, const Tensor& experts) override {
    Timed timed(*this, "route");
    const int64_t E = a.dim(-1), T = a.numel() / E;
    const int K = p.k;
    VATIC_CHECK(a.is_contiguous() && K > 0 && K <= E && weights.numel() == T * K && experts.numel() == T * K &&
                    p.groups > 0 && E % p.groups == 0 && p.groups_kept > 0 && p.groups_kept <= p.groups,
                "route: {} into {} experts ({} groups, {} kept)", a.describe(), K, p.groups, p.groups_kept);
    const float ninf = -std::numeric_limits<float>::infinity();
    const float* bias = p.bias ? p.bias->data<float>() : nullptr;
    const float* es = p.expert_scale ? p.expert_scale->data<float>() : nullptr;
    std::vector<float> prob(E), choice(E), gscore(p.groups);
    std::vector<int> order(E), gorder(p.groups);
    const int per_group = static_cast<int>(E / p.groups);
    for (int64_t t = 0; t < T; t++) {
      const float* x = a.data<float>() + t * E;
      if (p.kind == RouteParams::Softmax) {
        float mx = ninf;
        for (int64_t e = 0; e < E; e++) mx = std::max(mx, x[e]);
        double sum = 0;
        for (int64_t e = 0; e < E; e++) {
          prob[e] = std::exp(x[e] - mx);
          sum += prob[e];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t e = 0; e < E; e++) {
          prob[e] *= inv;
          choice[e] = prob[e];
        }
      } else {
        for (int64_t e = 0; e < E; e++) {
          prob[e] = 1.0f / (1.0f + std::exp(-x[e]));
          choice[e] = prob[e] + (bias ? bias[e] : 0.0f);
        }
      }
      if (p.groups > 1 && p.groups_kept < p.groups) {
        // Group score: the sum of its two best choice scores; only the best groups_kept groups stay.
        for (int g = 0; g < p.groups; g++) {
          float b1 = ninf, b2 = ninf;
          for (int e = g * per_group; e < (g + 1) * per_group; e++) {
            if (choice[e] > b1) {
              b2 = b1;
              b1 = choice[e];
            } else if (choice[e] > b2) {
              b2 = choice[e];
            }
          }
          gscore[g] = per_group >= 2 ? b1 + b2 : b1;
        }
        std::iota(gorder.begin(), gorder.end(), 0);
        std::stable_sort(gorder.begin(), gorder.end(), [&](int i, int j) { return gscore[i] > gscore[j]; });
        for (int r = p.groups_kept; r < p.groups; r++)
          for (int e = gorder[r] * per_group; e < (gorder[r] + 1) * per_group; e++) choice[e] = ninf;
      }
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + K, order.end(),
                        [&](int i, int j) { return choice[i] > choice[j] || (choice[i] == choice[j] && i < j); });
      float sum = 0;
      for (int j = 0; j < K; j++) sum += prob[order[j]];
      const float norm = p.renormalize ? 1.0f / (p.kind == RouteParams::Sigmoid ? sum + 1e-20f : sum) : 1.0f;
      for (int j = 0; j < K; j++) {
        const int e = order[j];
        weights.data<float>()[t * K + j] = prob[e] * norm * p.scale * (es ? es[e] : 1.0f);
        experts.data<int32_t>()[t * K + j] = e;
      }
    }
  }

  void kv_write(const Tensor& k, const Tensor& v, const Tensor& positions, const Tensor& keys, const Tensor& values,
                const Tensor& slot_pos, bool ring) override {
    Timed timed(*this, "kv_write");
    const int64_t T = k.dim(0), C = keys.dim(0);
    VATIC_CHECK(positions.dtype() == DType::I32 && positions.is_contiguous() && positions.numel() == T &&
                    slot_pos.dtype() == DType::I32 && slot_pos.is_contiguous() && slot_pos.numel() == C &&
                    values.dim(0) == C && v.dim(0) == T,
                "kv_write: k {} v {} positions {} into keys {} values {} slots {}", k.describe(), v.describe(),
                positions.describe(), keys.describe(), values.describe(), slot_pos.describe());
    const int32_t* pos = positions.data<int32_t>();
    for (int64_t t = 0; t < T; t++)
      VATIC_CHECK(pos[t] >= 0 && (ring || pos[t] < C), "kv_write: position {} outside a cache of {} slots", pos[t], C);
    // Runs of consecutive positions that land in consecutive slots are copied at once (a ring wraps once per run).
    for (int64_t t = 0; t < T;) {
      const int64_t slot = ring ? pos[t] % C : pos[t];
      int64_t n = 1;
      while (t + n < T && pos[t + n] == pos[t] + n && slot + n < C) n++;
      copy(k.slice(0, t, t + n), keys.slice(0, slot, slot + n));
      copy(v.slice(0, t, t + n), values.slice(0, slot, slot + n));
      for (int64_t i = 0; i < n; i++) slot_pos.data<int32_t>()[slot + i] = pos[t + i];
      t += n;
    }
  }

  void forget_positions(const Tensor& slot_pos, int64_t n) override {
    Timed timed(*this, "forget_positions");
    VATIC_CHECK(slot_pos.dtype() == DType::I32 && slot_pos.is_contiguous(), "forget_positions: {}",
                slot_pos.describe());
    int32_t* p = slot_pos.data<int32_t>();
    for (int64_t s = 0; s < slot_pos.numel(); s++)
      if (p[s] >= n) p[s] = -1;
  }

  void logsumexp(const Tensor& a, float scale, const Tensor& out) override {
    Timed timed(*this, "logsumexp");
    const int64_t N = a.dim(-1), R = a.numel() / std::max<int64_t>(N, 1);
    VATIC_CHECK(a.dtype() == DType::F32 && a.is_contiguous() && out.dtype() == DType::F32 && out.numel() == R &&
                    out.is_contiguous() && scale > 0,
                "logsumexp: a {} scale {} out {}", a.describe(), scale, out.describe());
    for (int64_t r = 0; r < R; r++) {
      const float* x = a.data<float>() + r * N;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < N; i++) mx = std::max(mx, static_cast<double>(x[i]));
      if (!std::isfinite(mx)) {
        out.data<float>()[r] = static_cast<float>(mx);
        continue;
      }
      double sum = 0;
      for (int64_t i = 0; i < N; i++) sum += std::exp(scale * (static_cast<double>(x[i]) - mx));
      out.data<float>()[r] = static_cast<float>(scale * mx + std::log(sum));
    }
  }

  void residual_mass(const Tensor& p, const Tensor& q, float p_scale, float p_shift, float q_scale, float q_shift,
                     const Tensor& out) override {
    Timed timed(*this, "residual_mass");
    const int64_t N = p.dim(-1), R = p.numel() / std::max<int64_t>(N, 1);
    VATIC_CHECK(p.dtype() == DType::F32 && q.dtype() == DType::F32 && p.is_contiguous() && q.is_contiguous() &&
                    q.numel() == p.numel() && out.dtype() == DType::F32 && out.is_contiguous() && out.numel() == R,
                "residual_mass: p {} q {} out {}", p.describe(), q.describe(), out.describe());
    for (int64_t r = 0; r < R; r++) {
      const float* a = p.data<float>() + r * N;
      const float* b = q.data<float>() + r * N;
      float sum = 0.0f;
      for (int64_t i = 0; i < N; i++) {
        const float pa = std::isfinite(a[i]) ? std::exp(p_scale * a[i] - p_shift) : 0.0f;
        const float qb = std::isfinite(b[i]) ? std::exp(q_scale * b[i] - q_shift) : 0.0f;
        sum += std::max(0.0f, pa - qb);
      }
      out.data<float>()[r] = sum;
    }
  }

  void mask_tokens(const Tensor& x, const Tensor& bits) override {
    Timed timed(*this, "mask_tokens");
    const int64_t N = x.numel();
    VATIC_CHECK(x.dtype() == DType::F32 && x.is_contiguous() && bits.dtype() == DType::I32 && bits.is_contiguous() &&
                    bits.numel() * 32 >= N,
                "mask_tokens: x {} bits {}", x.describe(), bits.describe());
    const uint32_t* w = reinterpret_cast<const uint32_t*>(bits.data<int32_t>());
    float* v = x.data<float>();
    for (int64_t i = 0; i < N; i++)
      if (!((w[i >> 5] >> (i & 31)) & 1u)) v[i] = -std::numeric_limits<float>::infinity();
  }

  void penalize(const Tensor& x, const Tensor& ids, const Tensor& counts, float repeat, float presence,
                float frequency) override {
    Timed timed(*this, "penalize");
    const int64_t N = x.numel(), n = ids.numel();
    VATIC_CHECK(x.dtype() == DType::F32 && x.is_contiguous() && ids.dtype() == DType::I32 && ids.is_contiguous() &&
                    counts.dtype() == DType::I32 && counts.is_contiguous() && counts.numel() == n,
                "penalize: x {} ids {} counts {}", x.describe(), ids.describe(), counts.describe());
    float* v = x.data<float>();
    for (int64_t j = 0; j < n; j++) {
      const int32_t t = ids.data<int32_t>()[j];
      if (t < 0 || t >= N) continue;
      float& l = v[t];
      if (repeat != 1.0f) l = l < 0 ? l * repeat : l / repeat;
      l -= presence;
      l -= frequency * static_cast<float>(counts.data<int32_t>()[j]);
    }
  }

 private:
  // Times the outermost op on this thread only: some ops run others (a routed matmul its rows' copies and
  // matmuls, a cache write its copies), whose time is the caller's.
  struct Timed {
    Timed(CpuBackend& b, const char* name) : counted_(b.profiling_.load(std::memory_order_relaxed)), name_(name) {
      if (!counted_) return;
      if (depth_++ == 0) {
        b_ = &b;
        start_ = std::chrono::steady_clock::now();
      }
    }
    ~Timed() {
      if (counted_) depth_--;
      if (!b_) return;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      std::lock_guard<std::mutex> lock(b_->profile_mutex_);
      b_->timings_.push_back({name_, s});
    }
    static inline thread_local int depth_ = 0;
    Timed(const Timed&) = delete;
    Timed& operator=(const Timed&) = delete;
    bool counted_;  // profiling was on: this op is in depth_
    CpuBackend* b_ = nullptr;  // the outermost op: records its time
    const char* name_;
    std::chrono::steady_clock::time_point start_;
  };
  std::atomic<bool> profiling_{false};
  std::mutex profile_mutex_;
  std::vector<std::pair<const char*, double>> timings_;
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend b;
  return b;
}


}  // namespace vatic
