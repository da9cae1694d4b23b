#pragma once
// Inner loops of the CPU backend, compiled for several instruction sets and chosen once at run time.
//
// The instruction set is picked at first use: the best the CPU supports, or the one named by the environment
// variable VATIC_CPU_ISA (generic | avx2 | avx512 | avx512vnni | amx) when the CPU supports it. Tests switch it with set_isa().
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace vatic::cpu {

// A dense weight block for gemm: y[t, n] (+)= Σ_k x[t, k] · w[n, k] over rows n0 <= n < n1 and all T tokens.
struct GemmArgs {
  const float* x = nullptr;  // [T, K], row stride ldx
  int64_t ldx = 0;
  int64_t T = 0;
  const void* w = nullptr;   // [N, K] BF16 (uint16_t) or F32, row stride ldw (elements)
  int64_t ldw = 0;
  int64_t K = 0;
  float* y = nullptr;        // [T, N], row stride ldy
  int64_t ldy = 0;
  bool accumulate = false;
};

// A group-wise affine quantized weight block (w = s·q + b per group of `group` inputs, q packed little-endian).
// For bits == 4 and T < kPanelMinT, x must be in the int4 order produced by permute_int4_activations (within each
// 32-input chunk, the 16 even inputs, then the 16 odd ones): it matches how two nibbles share a byte. Prompts
// (T >= kPanelMinT) take x as it is; their panels read it in that order (gemm_impl.h, panel_tile).
struct QGemmArgs {
  const float* x = nullptr;  // [T, K], row stride ldx
  int64_t ldx = 0;
  int64_t T = 0;
  const uint8_t* q = nullptr;  // packed rows, row stride ldq bytes
  int64_t ldq = 0;
  const uint16_t* scales = nullptr;  // BF16 [N, K/group], row stride lds elements
  const uint16_t* biases = nullptr;
  int64_t lds = 0;
  int bits = 8;   // 8 or 4
  int group = 64; // a multiple of 32
  int64_t K = 0;  // a multiple of group
  float* y = nullptr;
  int64_t ldy = 0;
  bool accumulate = false;
};

// Rows of an RMS norm's output (the norm's scale inv[r] already computed): y[r·ldy + i] = x[r·ldx + i]·inv[r]·w[i],
// the two products rounded in that order, with w the f32 weights wf, or the bf16 weights wb (widened exactly), or
// none (y = x·inv[r]); or, with res, the residual step of add_rms_norm: y = (res[r·ldr + i] + x·inv[r]·w[i])·s (the
// product rounded before the add, never fused into it; no ·s when s is 1). Each element gets the scalar
// expression's operations in its order on every path; y may be x or res.
struct NormRows {
  const float* x = nullptr;
  int64_t ldx = 0;
  const float* inv = nullptr;  // [R]
  const float* wf = nullptr;
  const uint16_t* wb = nullptr;
  const float* res = nullptr;
  int64_t ldr = 0;
  float s = 1.0f;
  float* y = nullptr;
  int64_t ldy = 0;
  int64_t R = 0, n = 0;
};

struct Kernels {
  const char* isa;
  // sum_i x[i] * w[i]
  float (*dot_f32)(const float* x, const float* w, int64_t n);
  float (*dot_bf16)(const float* x, const uint16_t* w, int64_t n);
  // y[r] = dot(x + r*ldx, w) for r < 4 rows of x sharing one weight row (prefill reuse of a loaded row).
  void (*dot4_bf16)(const float* x, int64_t ldx, const uint16_t* w, int64_t n, float* y);
  void (*dot4_f32)(const float* x, int64_t ldx, const float* w, int64_t n, float* y);
  // y[i] += a * x[i]
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  // Register-tiled matmul over weight rows [n0, n1), single-threaded (the backend splits rows across threads).
  // f32 accumulation of f32 activations times weights converted (bf16) or dequantized (int8/int4) in registers.
  void (*gemm_bf16)(const GemmArgs& a, int64_t n0, int64_t n1);
  void (*gemm_f32)(const GemmArgs& a, int64_t n0, int64_t n1);
  void (*qgemm)(const QGemmArgs& a, int64_t n0, int64_t n1);
  // y[i] = tanh(x[i]) (vmath.cpp; within 4 ulp of the exact value on every path). y may equal x.
  void (*tanh)(const float* x, float* y, int64_t n);
  // GELU (tanh form) y[i] = 0.5·a[i]·(1 + tanh(c·(a[i] + 0.044715·a[i]·a[i]·a[i]))) (· u[i] when u is given),
  // c = sqrt(2/pi): the scalar expression's operations in its order (no FMA contraction) around the vector tanh.
  void (*gelu_tanh)(const float* a, const float* u, float* y, int64_t n);
  // sum_i x[i]² in double (each square is exact in double; vmath.cpp). The RMS norm's sum.
  double (*sumsq)(const float* x, int64_t n);
  // Decode attention over the visible keys of a KV head (row pointers, d values each) for the nq query heads that
  // share it: scores out[h·ldo + j] = Σ_i q[h·ldq + i]·rows[j][i], and the weighted sums of the values
  // out[h·ldo + i] = Σ_j p[h·ldp + j]·rows[j][i] (summed in row order). Each row is read once for all heads.
  void (*dot_rows)(const float* q, int64_t ldq, int64_t nq, const float* const* rows, int64_t n, int64_t d,
                   float* out, int64_t ldo);
  void (*axpy_rows)(const float* p, int64_t ldp, int64_t nq, const float* const* rows, int64_t n, int64_t d,
                    float* out, int64_t ldo);
  // A quantized matmul's activations in the layout qgemm reads: writes T rows to `out` and returns their width, or
  // returns 0 when qgemm reads x as it is. qgemm's a.x / a.ldx are then out / that width.
  int64_t (*qgemm_x)(const float* x, int64_t ldx, int64_t T, int64_t K, int bits, int group, std::vector<float>& out);
  // One row of permute_int4_activations: x [K] -> out [K], each 32-input chunk reordered to (even inputs, odd
  // inputs); a tail of fewer than 32 inputs is left unwritten. A copy: every path writes the same values.
  void (*permute_int4_row)(const float* x, int64_t K, float* out);
  // out[r] = sumsq(x + r·ldx, n) for r < R, each bit for bit this table's sumsq of that row: rows are summed side by
  // side (independent chains for the FMA units), each in sumsq's order.
  void (*sumsq_rows)(const float* x, int64_t ldx, int64_t R, int64_t n, double* out);
  // The elementwise part of rms_norm and add_rms_norm (NormRows).
  void (*norm_rows)(const NormRows& a);
  // NeoX rotary embedding of `rows` rows of v (row stride ldv) in place: for i < n, with a = v[i] and b = v[i + half],
  // v[i] = a·c[i] - b·s[i] and v[i + half] = b·c[i] + a·s[i], each product rounded before the add or subtract (the
  // scalar expression without fused multiply-adds), on every path.
  void (*rope_neox)(float* v, int64_t ldv, int64_t rows, int64_t half, const float* c, const float* s, int64_t n);
  // The logit soft-cap y[i] = cap·tanh(x[i] / cap): the scalar expression's division and product in vectors around
  // this path's tanh (bit for bit `cap * tanh(x / cap)` over it). y may equal x.
  void (*softcap)(const float* x, float* y, int64_t n, float cap);
};

const Kernels& kernels();

// Instruction sets: "generic", "avx2", "avx512", "avx512vnni" (avx512 with VNNI's int4 matmul), "amx"
// (avx512vnni with prompts' matmuls on AMX tiles, gemm_amx.cpp).
std::vector<std::string> available_isas();  // those this CPU runs, worst first
// Switches the kernels (tests, benchmarks). Returns false, changing nothing, for an unknown or unsupported name.
bool set_isa(const std::string& name);

// Matmuls of this many tokens or more are prefill panels (gemm_impl.h); their int4 activations are read in place.
constexpr int64_t kPanelMinT = 32;
// Decode (one token) on AVX-512 reads a thread's rows of a matrix as decode_streams() sequential streams far apart
// (gemm_impl.h, qgemm_factored_avx512.cpp, qgemm_digits_avx512.cpp; bf16 rows on AVX2 as two) when they hold at
// least kDecodeStreamsMinBytes of weights. Which rows are read side by side changes no row's sum. Four by default
// (chosen on an AMD Zen 5 core, whose read sweep gave 20 GB/s as one stream, 31 as two, 35-39 as four, and kept on
// an Intel Xeon); two on AMD Zen 4 (CPU family 0x19 with AVX-512), where four streams a thread read 10 GB/s against
// one stream's 26 and decode of the E2B-width model was 8-20 % faster with two at one thread and up to 1.65x at two
// (docs/performance.md).
// VATIC_CPU_DECODE_STREAMS=2 or 4 overrides the choice.
int decode_streams();
bool set_decode_streams(int n);  // 2 or 4 (tests, benchmarks); false, changing nothing, for any other count
// Calls f(std::integral_constant<int, S>{}) with S = decode_streams(), or with 2 where the kernel takes no more
// (Max = 2: AVX2's sixteen registers).
template <int Max = 4, class F>
inline void with_decode_streams(F&& f) {
  if constexpr (Max >= 4)
    if (decode_streams() == 4) return f(std::integral_constant<int, 4>{});
  f(std::integral_constant<int, 2>{});
}
constexpr int64_t kDecodeStreamsMinBytes = int64_t(512) << 10;
// Each of those streams asks for its weights this many bytes ahead, into every cache level (prefetcht0). On an
// Intel Xeon (2 cores, AVX-512 + AMX) decode of the E2B-width model then read its weights 6-18 % (bf16), 11-13 %
// (int8) and 13-21 % (int4) faster than with the hardware prefetchers alone; 512 and 2,048 bytes were about level
// with 1,024, a non-temporal prefetch (which skips L2 there) 2.5x slower.
constexpr int kDecodePrefetchBytes = 1024;
// Quantized streams also ask for the scales and biases of the row this many rows on (a row's are 48 bytes at
// K = 1,536 in groups of 64): int8 decode at E2B width +2-6 % at one and two threads on the same machine.
constexpr int64_t kDecodeScalesAhead = 4;

// x [T, K] (row stride ldx) -> out [T, K] contiguous, each 32-input chunk reordered to (even inputs, odd inputs).
void permute_int4_activations(const float* x, int64_t ldx, int64_t T, int64_t K, float* out);
// qgemm_x of the generic and AVX2 kernels (and AVX-512 prompts): int4 activations permuted below kPanelMinT
// tokens; int8, and prompts, read as they are.
int64_t qgemm_x_permuted(const float* x, int64_t ldx, int64_t T, int64_t K, int bits, int group,
                         std::vector<float>& out);

// Per-ISA tables (simd.cpp, gemm_*.cpp).
void fill_gemm_generic(Kernels& k);
void fill_gemm_avx2(Kernels& k);
void fill_gemm_avx512(Kernels& k);
void fill_gemm_avx512_vnni(Kernels& k);  // fill_gemm_avx512's, with VNNI's int4 qgemm
void fill_gemm_amx(Kernels& k);          // fill_gemm_avx512_vnni's, with prompts on AMX tiles
// Whether the CPU has AMX tiles with bf16 products and the OS lets this process use them (asked once).
bool cpu_has_amx();
void fill_vmath_generic(Kernels& k);
void fill_vmath_avx2(Kernels& k);
void fill_vmath_avx512(Kernels& k);

}  // namespace vatic::cpu
