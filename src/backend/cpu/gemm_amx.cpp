// Prompts on AMX tiles (Intel Xeon from Sapphire Rapids on): matmuls of kPanelMinT tokens and more, bf16 and
// int8 / int4 weights. Decode, verification and short prompts keep the avx512vnni kernels, so their bits do not change.
//
// Exactness. TDPBF16PS multiplies bf16 values and adds the products in f32. The weights are bf16 already (quantized
// codes 0..255 are integers that bf16 holds exactly); each f32 activation is split into three bf16 parts whose sum
// is the activation exactly (x = hi + mid + lo, each part the top 8 significant bits of what the parts before it
// left), so every product is exact and only the f32 sums round, as with the FMA panels. Three parts cost three tile
// products where one would round x to bf16, and still run several times faster than the FMAs. Activations below
// the f32 normal range lose their smallest part (tiles flush denormals), far below the matmul's tolerance.
// Quantized rows are summed per group of inputs as s·Σq·x + b·Σx (the factored form of decode, qgemm_factored.h).
//
// Layout. The weights are the A tiles (16 rows × 32 inputs, in their own row order), the activation parts the B
// tiles (16 input pairs × 16 tokens, split once per block of tokens), so a tile of sums holds 16 outputs × 16
// tokens: two A tiles, two B tiles and four sum tiles, eight tiles in all (tile_gemm below has the blocking).
// A chunk of rows keeps its sums in a buffer [outputs][tokens] across input blocks and writes them to y
// (transposed) at the end. Each output is summed in input order (per group for quantized rows, then across groups
// in order), whatever the number of threads, so the result depends only on T and K.
#include <cpuid.h>
#include <immintrin.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "backend/cpu/simd.h"
#include "tensor/dtype.h"

// GCC 12 reports false "uninitialized" warnings inside its own AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,amx-tile,amx-bf16")

#include "backend/cpu/transpose_avx512.h"  // after the target: its inline functions use AVX-512

namespace vatic::cpu {
namespace {

constexpr int64_t kTokens = 256;  // tokens per block
constexpr int64_t kRows = 512;    // rows per chunk: the chunk's sums (512 KB) stay in L2
constexpr int64_t kInputs = 256;  // inputs per block (quantized rows: whole groups, at least one)

// The avx512vnni kernels, for what the tiles do not take.
void (*g_gemm_bf16)(const GemmArgs&, int64_t, int64_t) = nullptr;
void (*g_qgemm)(const QGemmArgs&, int64_t, int64_t) = nullptr;

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Eight tiles of 16 rows × 64 bytes: sums 0-3, weights 4-5, activation parts 6-7.
void configure_tiles() {
  TileConfig c;
  for (int i = 0; i < 8; i++) {
    c.colsb[i] = 64;
    c.rows[i] = 16;
  }
  _tile_loadconfig(&c);
}

// 32 floats (a, then b) -> the top halves of their bits as 32 bf16 in order (lane i: floats 2i and 2i + 1).
inline __m512i top_halves(__m512 a, __m512 b) {
  alignas(64) static constexpr uint16_t idx[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
                                                   33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  return _mm512_permutex2var_epi16(_mm512_castps_si512(a), _mm512_load_si512(idx), _mm512_castps_si512(b));
}

// Part p (0: hi, 1: mid, 2: lo) of x: x = hi + mid + lo exactly, each the top 8 significant bits of the rest.
inline __m512 part(__m512 x, int p) {
  const __m512 top = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
  __m512 r = x;
  for (int i = 0; i < p; i++) r = _mm512_sub_ps(r, _mm512_and_ps(r, top));
  return p == 2 ? r : _mm512_and_ps(r, top);
}

// The activation parts of tokens [0, nt·16) (those from tb on zero; nt even) and inputs [0, kbs·32) (those from K
// on zero) as B tiles, a pair of token tiles after another, each pair's steps of 32 inputs in order:
// out[((ti / 2 · kbs + kb)·3 + p)·512 + ti % 2 · 256 + j·16 + t] holds inputs 2j, 2j + 1 of the kb-th 32 and token
// ti·16 + t of part p. A pair's parts over a block of inputs are contiguous, so a block's tile loads walk few pages.
void split_parts(const float* x, int64_t ldx, int64_t tb, int64_t K, int64_t kbs, int64_t nt, uint32_t* out) {
  for (int64_t ti = 0; ti < nt; ti++)
    for (int64_t kb = 0; kb < kbs; kb++) {
      const int64_t k = kb * 32;
      const int64_t left = std::clamp<int64_t>(K - k, 0, 32);
      const __mmask16 m0 = static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1);
      const __mmask16 m1 = static_cast<__mmask16>(left >= 32 ? 0xFFFF : left > 16 ? (1u << (left - 16)) - 1 : 0);
      __m512 xa[16], xb[16];
      for (int r = 0; r < 16; r++) {
        const int64_t t = ti * 16 + r;
        if (t < tb) {
          xa[r] = _mm512_maskz_loadu_ps(m0, x + t * ldx + k);
          xb[r] = _mm512_maskz_loadu_ps(m1, x + t * ldx + k + 16);
        } else {
          xa[r] = xb[r] = _mm512_setzero_ps();
        }
      }
      for (int p = 0; p < 3; p++) {
        __m512i v[16];
        for (int r = 0; r < 16; r++) v[r] = top_halves(part(xa[r], p), part(xb[r], p));
        transpose16(v);
        uint32_t* o = out + ((ti / 2 * kbs + kb) * 3 + p) * 512 + ti % 2 * 256;
        for (int j = 0; j < 16; j++) _mm512_storeu_si512(o + j * 16, v[j]);
      }
    }
}

// Weight rows [n, n + 32) of inputs [k0, k0 + kbs·32) as A tiles: out[(kb·2 + i)·256 + r·16 + j] holds inputs
// k0 + kb·32 + 2j, 2j + 1 of row n + i·16 + r. Rows from n1 on and inputs from K on are zero.
void load_rows_bf16(const uint16_t* w, int64_t ldw, int64_t n, int64_t n1, int64_t K, int64_t k0, int64_t kbs,
                    uint32_t* out) {
  for (int64_t kb = 0; kb < kbs; kb++) {
    const int64_t k = k0 + kb * 32;
    const int64_t left = std::clamp<int64_t>(K - k, 0, 32);
    const __mmask32 m = left >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1u << left) - 1);
    for (int r = 0; r < 32; r++) {
      const __m512i v = n + r < n1 ? _mm512_maskz_loadu_epi16(m, w + (n + r) * ldw + k) : _mm512_setzero_si512();
      _mm512_storeu_si512(out + (kb * 2 + r / 16) * 256 + (r % 16) * 16, v);
    }
  }
}

// Codes as bf16 pairs: lane i of lo / hi (integers 0..255) -> bf16(lo) | bf16(hi) << 16.
inline __m512i code_pairs(__m512i lo, __m512i hi) {
  const __m512i l = _mm512_srli_epi32(_mm512_castps_si512(_mm512_cvtepi32_ps(lo)), 16);
  const __m512i h = _mm512_and_si512(_mm512_castps_si512(_mm512_cvtepi32_ps(hi)),
                                     _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
  return _mm512_or_si512(l, h);
}

// The same for quantized rows: their codes (K a multiple of 32, so no input tail).
template <int BITS>
void load_rows_codes(const QGemmArgs& a, int64_t n, int64_t n1, int64_t k0, int64_t kbs, uint32_t* out) {
  for (int64_t kb = 0; kb < kbs; kb++) {
    const int64_t k = k0 + kb * 32;
    for (int r = 0; r < 32; r++) {
      __m512i v = _mm512_setzero_si512();
      if (n + r < n1) {
        const uint8_t* q = a.q + (n + r) * a.ldq + k * BITS / 8;
        if constexpr (BITS == 4) {
          // Byte j holds inputs 2j (low nibble) and 2j + 1.
          const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
          v = code_pairs(_mm512_and_si512(b, _mm512_set1_epi32(15)), _mm512_srli_epi32(b, 4));
        } else {
          const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
          v = code_pairs(_mm512_and_si512(b, _mm512_set1_epi32(0xFFFF)), _mm512_srli_epi32(b, 16));
        }
      }
      _mm512_storeu_si512(out + (kb * 2 + r / 16) * 256 + (r % 16) * 16, v);
    }
  }
}

// The four sum tiles as a block of 32 rows × 32 tokens of floats at s, row stride ld: zeroed, loaded, stored.
inline void zero_sums() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}
inline void load_sums(const float* s, int64_t ld) {
  _tile_loadd(0, s, ld * 4);
  _tile_loadd(1, s + 16, ld * 4);
  _tile_loadd(2, s + 16 * ld, ld * 4);
  _tile_loadd(3, s + 16 * ld + 16, ld * 4);
}
inline void store_sums(float* s, int64_t ld) {
  _tile_stored(0, s, ld * 4);
  _tile_stored(1, s + 16, ld * 4);
  _tile_stored(2, s + 16 * ld, ld * 4);
  _tile_stored(3, s + 16 * ld + 16, ld * 4);
}

// The four sum tiles += two row tiles × two token tiles, over kbs steps of 32 inputs and the three parts.
// rows: A tiles of those steps as load_rows_* writes them; parts: B tiles of the same steps for one pair of token
// tiles, as split_parts lays them out.
inline void multiply(const uint32_t* rows, const uint32_t* parts, int64_t kbs) {
  for (int64_t kb = 0; kb < kbs; kb++) {
    _tile_loadd(4, rows + (kb * 2) * 256, 64);
    _tile_loadd(5, rows + (kb * 2 + 1) * 256, 64);
    for (int p = 0; p < 3; p++) {
      const uint32_t* b = parts + (kb * 3 + p) * 512;
      _tile_loadd(6, b, 64);
      _tile_loadd(7, b + 256, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
}

// y[t0 + t][n0 + i] (+)= sums[i·ld + t] for t < tb, i < n1 - n0: 16 × 16 blocks transposed in registers.
void write_sums(const float* sums, int64_t ld, int64_t tb, int64_t n0, int64_t n1, float* y, int64_t ldy,
                bool accumulate) {
  for (int64_t i = 0; i < n1 - n0; i += 16) {
    const int64_t rows = std::min<int64_t>(16, n1 - n0 - i);
    const __mmask16 m = static_cast<__mmask16>(rows == 16 ? 0xFFFF : (1u << rows) - 1);
    for (int64_t t = 0; t < tb; t += 16) {
      __m512i v[16];
      for (int r = 0; r < 16; r++) v[r] = _mm512_loadu_si512(sums + (i + r) * ld + t);
      transpose16(v);
      for (int64_t j = 0; j < std::min<int64_t>(16, tb - t); j++) {
        float* o = y + (t + j) * ldy + n0 + i;
        __m512 s = _mm512_castsi512_ps(v[j]);
        if (accumulate) s = _mm512_add_ps(_mm512_maskz_loadu_ps(m, o), s);
        _mm512_mask_storeu_ps(o, m, s);
      }
    }
  }
}

// Scratch in 2 MB pages, grown and never shrunk. In 4 KB pages the tile loads were bound by the TLB: from a
// 768 KB buffer in L2 the tile products ran at a third of their rate (a stand-alone loop of them), in 2 MB pages at
// the rate they reach from L1.
class HugeScratch {
 public:
  HugeScratch() = default;
  HugeScratch(const HugeScratch&) = delete;
  HugeScratch& operator=(const HugeScratch&) = delete;
  ~HugeScratch() { std::free(p_); }
  template <class T>
  T* get(int64_t n) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(T);
    if (bytes > cap_) {
      constexpr size_t kPage = size_t{2} << 20;
      std::free(p_);
      cap_ = (bytes + kPage - 1) / kPage * kPage;
      p_ = std::aligned_alloc(kPage, cap_);
      if (!p_) {
        cap_ = 0;
        throw std::bad_alloc();
      }
      ::madvise(p_, cap_, MADV_HUGEPAGE);
    }
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};

struct Buffers {
  HugeScratch parts, rows, sums;
  std::vector<float> tile, group_sums, scales;
};
Buffers& buffers() {
  thread_local Buffers b;
  return b;
}

// The blocking shared by bf16 and quantized rows. Per block of kTokens tokens the activation parts of all K inputs
// are split once (prepare(x, tb, ld) adds what a block of tokens needs besides); per chunk of kRows rows and
// block of KC inputs the rows are loaded as A tiles (load_rows(n, n1, k0, kbs, out) for 32 rows at n), then each
// pair of token tiles goes over every 32 rows of the chunk, its parts (KC·192 bytes) near in cache, the rows
// (256 KB) from L2. step(rows, parts, kbs, ti, sums, ld, n, k0) adds one such block (token tiles ti, ti + 1; rows
// n..n + 31; inputs from k0) into the chunk's sums [row][token] (row stride ld), written to y once the chunk's
// inputs are done.
template <class Prepare, class LoadRows, class Step>
void tile_gemm(const float* x, int64_t ldx, int64_t T, int64_t K, int64_t KC, int64_t n0, int64_t n1, float* y,
               int64_t ldy, bool accumulate, Prepare&& prepare, LoadRows&& load_rows, Step&& step) {
  Buffers& buf = buffers();
  const int64_t kstride = (K + 31) / 32, kbs_max = KC / 32;
  configure_tiles();
  for (int64_t t0 = 0; t0 < T; t0 += kTokens) {
    const int64_t tb = std::min(kTokens, T - t0), nt = (tb + 31) / 32 * 2, ld = nt * 16;
    uint32_t* parts = buf.parts.get<uint32_t>(3 * kstride * nt * 256);
    uint32_t* rows = buf.rows.get<uint32_t>(kRows / 32 * kbs_max * 512);
    float* sums = buf.sums.get<float>(kRows * ld);
    split_parts(x + t0 * ldx, ldx, tb, K, kstride, nt, parts);
    prepare(x + t0 * ldx, tb, ld);
    for (int64_t c0 = n0; c0 < n1; c0 += kRows) {
      const int64_t c1 = std::min(n1, c0 + kRows);
      for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t kbs = (std::min(K, k0 + KC) - k0 + 31) / 32;
        for (int64_t n = c0; n < c1; n += 32) load_rows(n, c1, k0, kbs, rows + (n - c0) / 32 * kbs * 512);
        for (int64_t ti = 0; ti < nt; ti += 2) {
          const uint32_t* pp = parts + (ti / 2 * kstride + k0 / 32) * 1536;
          for (int64_t n = c0; n < c1; n += 32)
            step(rows + (n - c0) / 32 * kbs * 512, pp, kbs, ti, sums + (n - c0) * ld + ti * 16, ld, n, k0);
        }
      }
      write_sums(sums, ld, tb, c0, c1, y + t0 * ldy, ldy, accumulate);
    }
  }
  _tile_release();
}

void gemm_bf16_amx(const GemmArgs& a, int64_t n0, int64_t n1) {
  if (a.T < kPanelMinT || a.K <= 0) return g_gemm_bf16(a, n0, n1);
  const auto* w = static_cast<const uint16_t*>(a.w);
  tile_gemm(
      a.x, a.ldx, a.T, a.K, kInputs, n0, n1, a.y, a.ldy, a.accumulate, [](const float*, int64_t, int64_t) {},
      [&](int64_t n, int64_t c1, int64_t k0, int64_t kbs, uint32_t* out) {
        load_rows_bf16(w, a.ldw, n, c1, a.K, k0, kbs, out);
      },
      [](const uint32_t* rows, const uint32_t* parts, int64_t kbs, int64_t, float* s, int64_t ld, int64_t,
         int64_t k0) {
        if (k0 == 0)
          zero_sums();
        else
          load_sums(s, ld);
        multiply(rows, parts, kbs);
        store_sums(s, ld);
      });
}

// Per group of inputs: the four sum tiles from zero over the group's steps, then into the chunk's sums as
// s·Σq·x + b·Σx (Σx of each group and token: group_sums [group][token]).
template <int BITS>
void qgemm_amx_bits(const QGemmArgs& a, int64_t n0, int64_t n1) {
  Buffers& buf = buffers();
  const int64_t KC = std::max<int64_t>(1, kInputs / a.group) * a.group, gkbs = a.group / 32, G = a.K / a.group;
  buf.tile.resize(4 * 256);
  // Scales and biases of a chunk's rows for a block's groups, as floats: [32 rows at n][group][scales 32, biases 32].
  const int64_t gpb = KC / a.group;
  buf.scales.resize(static_cast<size_t>(kRows / 32 * gpb * 64));
  auto scale_rows = [&](int64_t n) { return buf.scales.data() + (n - n0) % kRows / 32 * gpb * 64; };
  tile_gemm(
      a.x, a.ldx, a.T, a.K, KC, n0, n1, a.y, a.ldy, a.accumulate,
      [&](const float* x, int64_t tb, int64_t ld) {
        buf.group_sums.assign(static_cast<size_t>(G * ld), 0.0f);
        for (int64_t t = 0; t < tb; t++)
          for (int64_t g = 0; g < G; g++) {
            const float* xr = x + t * a.ldx + g * a.group;
            __m512 v = _mm512_loadu_ps(xr);
            for (int64_t i = 16; i < a.group; i += 16) v = _mm512_add_ps(v, _mm512_loadu_ps(xr + i));
            buf.group_sums[g * ld + t] = _mm512_reduce_add_ps(v);
          }
      },
      [&](int64_t n, int64_t c1, int64_t k0, int64_t kbs, uint32_t* out) {
        load_rows_codes<BITS>(a, n, c1, k0, kbs, out);
        float* sb = scale_rows(n);
        for (int64_t g = 0; g < kbs / gkbs; g++)
          for (int r = 0; r < 32; r++) {
            const int64_t row = std::min(n + r, c1 - 1);  // rows past the chunk: any finite values, never written
            sb[g * 64 + r] = bf16_to_f32(a.scales[row * a.lds + k0 / a.group + g]);
            sb[g * 64 + 32 + r] = bf16_to_f32(a.biases[row * a.lds + k0 / a.group + g]);
          }
      },
      [&](const uint32_t* rows, const uint32_t* parts, int64_t kbs, int64_t ti, float* s, int64_t ld, int64_t n,
          int64_t k0) {
        for (int64_t g = 0; g < kbs / gkbs; g++) {
          const int64_t gi = k0 / a.group + g;
          const float* sc = scale_rows(n) + g * 64;
          const float* bi = sc + 32;
          zero_sums();
          multiply(rows + g * gkbs * 512, parts + g * gkbs * 1536, gkbs);
          float* c = buf.tile.data();  // [32 rows][32 tokens]
          store_sums(c, 32);
          const bool first = gi == 0;
          for (int q = 0; q < 4; q++) {
            const int i = q / 2, j = q % 2;
            const __m512 sx = _mm512_loadu_ps(buf.group_sums.data() + gi * ld + (ti + j) * 16);
            for (int r = 0; r < 16; r++) {
              float* o = s + (i * 16 + r) * ld + j * 16;
              const __m512 v = _mm512_loadu_ps(c + (i * 16 + r) * 32 + j * 16);
              __m512 acc = first ? _mm512_setzero_ps() : _mm512_loadu_ps(o);
              acc = _mm512_fmadd_ps(v, _mm512_set1_ps(sc[i * 16 + r]), acc);
              acc = _mm512_fmadd_ps(_mm512_set1_ps(bi[i * 16 + r]), sx, acc);
              _mm512_storeu_ps(o, acc);
            }
          }
        }
      });
}

void qgemm_amx(const QGemmArgs& a, int64_t n0, int64_t n1) {
  if (a.T < kPanelMinT || a.K <= 0 || a.group % 32 != 0 || a.K % a.group != 0) return g_qgemm(a, n0, n1);
  if (a.bits == 4) return qgemm_amx_bits<4>(a, n0, n1);
  if (a.bits == 8) return qgemm_amx_bits<8>(a, n0, n1);
  g_qgemm(a, n0, n1);
}

}  // namespace

bool cpu_has_amx() {
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool tile = edx & (1u << 24), bf16 = edx & (1u << 22);
    if (!tile || !bf16) return false;
    unsigned c1 = 0, d1 = 0, a1 = 0, b1 = 0;
    if (!__get_cpuid(1, &a1, &b1, &c1, &d1) || !(c1 & (1u << 27))) return false;  // OSXSAVE
    // The OS must manage the tile state (XCR0 bits 17 and 18) and grant this process its use.
    uint32_t lo = 0, hi = 0;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}

void fill_gemm_amx(Kernels& k) {
  fill_gemm_avx512_vnni(k);
  g_gemm_bf16 = k.gemm_bf16;
  g_qgemm = k.qgemm;
  k.gemm_bf16 = gemm_bf16_amx;
  k.qgemm = qgemm_amx;
}

}  // namespace vatic::cpu
