// CUDA kernels of the device backend. Correctness first: every kernel computes in F32 with the same formulas as the
// CPU backend (accurate expf/tanhf/sincosf, no fast-math), so parity with the CPU holds to rounding.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/cuda/kernels.h"

namespace vatic::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;

__device__ __forceinline__ float bf16_to_float(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }
__device__ __forceinline__ uint16_t float_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
__device__ __forceinline__ float f16_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float f8_to_float(uint8_t v) {
  const int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
  float r;
  if (e == 0)
    r = ldexpf(static_cast<float>(m), -9);
  else if (e == 15 && m == 7)
    r = __int_as_float(0x7fc00000);
  else
    r = ldexpf(static_cast<float>(8 + m), e - 10);
  return s ? -r : r;
}

__device__ __forceinline__ float load(int type, const void* p, int64_t i) {
  switch (type) {
    case kF32: return static_cast<const float*>(p)[i];
    case kBF16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case kF16: return f16_to_float(static_cast<const uint16_t*>(p)[i]);
    case kF8E4M3: return f8_to_float(static_cast<const uint8_t*>(p)[i]);
    case kI32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    case kI64: return static_cast<float>(static_cast<const int64_t*>(p)[i]);
    default: return 0.0f;
  }
}

__device__ __forceinline__ void store(int type, void* p, int64_t i, float v) {
  switch (type) {
    case kF32: static_cast<float*>(p)[i] = v; break;
    case kBF16: static_cast<uint16_t*>(p)[i] = float_to_bf16(v); break;
    case kF16: static_cast<uint16_t*>(p)[i] = __half_as_ushort(__float2half_rn(v)); break;
    case kI32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    default: break;
  }
}

__device__ __forceinline__ int elem_size(int type) {
  switch (type) {
    case kF32: case kI32: case kU32: return 4;
    case kBF16: case kF16: return 2;
    case kI64: return 8;
    default: return 1;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The activations of vatic::Unary (GeluTanh, Silu, Sigmoid, Tanh, Exp), as the CPU computes them.
__device__ __forceinline__ float activate(int op, float x) {
  switch (op) {
    case 0: {  // GeluTanh
      const float c = 0.7978845608028654f;
      return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
    }
    case 1: return x / (1.0f + expf(-x));  // Silu
    case 2: return 1.0f / (1.0f + expf(-x));  // Sigmoid
    case 3: return tanhf(x);
    case 4: return expf(x);
    default: return x;
  }
}

// Block-wide sum / max for blockDim.x a multiple of 32 (at most 1024). `scratch` holds 32 floats.
__device__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = threadIdx.x < nw ? scratch[threadIdx.x] : 0.0f;
  if (warp == 0) r = warp_sum(r);
  if (threadIdx.x == 0) scratch[0] = r;
  __syncthreads();
  return scratch[0];
}
__device__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = threadIdx.x < nw ? scratch[threadIdx.x] : -INFINITY;
  if (warp == 0) r = warp_max(r);
  if (threadIdx.x == 0) scratch[0] = r;
  __syncthreads();
  return scratch[0];
}

// (value, index) ordering of top-k: larger value first, lower index on ties.
__device__ __forceinline__ bool better(float av, int ai, float bv, int bi) {
  return av > bv || (av == bv && ai < bi);
}
// Block-wide best (value, index) pair. `sv`/`si` hold 32 entries each.
__device__ void block_best(float& v, int& i, float* sv, int* si) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, v, o);
    int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (oi >= 0 && (i < 0 || better(ov, oi, v, i))) {
      v = ov;
      i = oi;
    }
  }
  __syncthreads();
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = i;
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < nw ? sv[lane] : -INFINITY;
    i = lane < nw ? si[lane] : -1;
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(0xffffffffu, v, o);
      int oi = __shfl_xor_sync(0xffffffffu, i, o);
      if (oi >= 0 && (i < 0 || better(ov, oi, v, i))) {
        v = ov;
        i = oi;
      }
    }
    if (lane == 0) {
      sv[0] = v;
      si[0] = i;
    }
  }
  __syncthreads();
  v = sv[0];
  i = si[0];
  __syncthreads();
}

constexpr int kArgmaxSlices = 128;

int blocks_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

// Programmatic dependent launch (Hopper and later): a kernel may be launched while the one before it on the
// stream still runs, so that its launch and block scheduling overlap that kernel's work. Every kernel begins with
// pdl_begin(): it waits until the kernels before it have finished and their writes are visible (so it reads and
// writes nothing before that), then lets the next kernel launch. Without the launch attribute both are no-ops.
//
// With a kernel trace on (set_kernel_trace), the first thread of each launch's first block also records, once the
// wait is over, the source line of its pdl_begin call, its grid's width and the global timer, in host memory: the
// time between two records is the time a kernel adds to the stream, also inside a replayed graph.
__constant__ unsigned long long* c_trace = nullptr;  // pairs (line << 32 | grid width, global timer in ns)
__constant__ unsigned c_trace_cap = 0;
__constant__ bool g_norm_prefetch_on = true;  // VATIC_NORM_PREFETCH=0: the residual norm's inputs not asked of L2 early
__device__ unsigned g_trace_next = 0;

__device__ __forceinline__ void pdl_begin_at(unsigned line) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && c_trace) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    const unsigned i = atomicAdd(&g_trace_next, 1u);
    if (i < c_trace_cap) {
      c_trace[2 * i] = static_cast<unsigned long long>(line) << 32 | gridDim.x;
      c_trace[2 * i + 1] = t;
    }
  }
}
#define pdl_begin() pdl_begin_at(__LINE__)

bool g_pdl = false;
bool g_gemv_mma = false;
bool g_gemv_early = false;
int g_gemv_warps = 4096;  // a chunked GEMV splits K until it has about this many warps
int g_gemv_group_rows = 4;  // verification's bf16 input rows a chunked GEMV block takes at most (0: all of them)
bool g_cluster_attention = true;  // VATIC_CLUSTER_ATTENTION=0 turns the cluster decode attention off
bool g_lean_attention = true;     // VATIC_LEAN_ATTENTION=0: verification's attention as decode's (for measuring)
bool g_group_attention = true;    // VATIC_GROUP_ATTENTION=0: long caches by single heads (for measuring)
bool g_tile_pairs = true;         // VATIC_TILE_PAIRS=0: a prompt's attention one tile of queries a block
bool g_gemv_decode_bound = true;  // VATIC_GEMV_DECODE_BOUND=0: decode's bf16 gated / several-matrix GEMVs unbounded
bool g_tile_split = true;         // VATIC_TILE_SPLIT=0: a short prompt's long tiles not split into two blocks
bool g_tile_mma = false;          // a prompt's attention on tensor cores (compute capability 8.0 and later)
int g_sms = 132;                  // the device's multiprocessors
int g_group_blocks = 1024;        // attention_group_kernel doubles its split while it would have more blocks a query
constexpr int64_t kGroupMinSlots = 2048;  // by default, caches of fewer slots keep the per-head kernels
int64_t g_group_min_slots = kGroupMinSlots;  // VATIC_GROUP_MIN_SLOTS: lower, for measuring
int g_group_min_keys = 32;                    // VATIC_GROUP_MIN_KEYS: a split's fewest slots (for measuring)
// Quantized GEMV launches of at least this many weights (gate and up together) read the input's digits: int4
// from 2^21 (E2B's projections: decode as fast, verification of four drafts 2.3 steps instead of 3.2), int8 from
// 2^25 (below it the digits' launch costs decode more than the GEMV saves). docs/performance.md has the runs.
int64_t g_digits_min_weights[2] = {int64_t(1) << 21, int64_t(1) << 25};  // [int4, int8]
int g_split_keys = 16;    // decode attention splits the slots until a split has fewer than twice this many
int g_expert_chunks = 4;  // bf16 routed GEMVs ask for this many chunks of a row at once (2 or 4)

// A launch with programmatic stream serialization (when on) and, for a `cluster` of more than one block, thread
// block clusters of that shape.
template <typename... Params, typename... Args>
void launch_in(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, dim3 cluster, cudaStream_t s,
               Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = s;
  cudaLaunchAttribute attribute[2];
  int n = 0;
  if (cluster.x * cluster.y * cluster.z > 1) {
    attribute[n].id = cudaLaunchAttributeClusterDimension;
    attribute[n].val.clusterDim.x = cluster.x;
    attribute[n].val.clusterDim.y = cluster.y;
    attribute[n].val.clusterDim.z = cluster.z;
    n++;
  }
  if (g_pdl) {
    attribute[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[n].val.programmaticStreamSerializationAllowed = 1;
    n++;
  }
  config.attrs = attribute;
  config.numAttrs = n;
  // A failed launch is left in cudaGetLastError for the backend's check after each op.
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
  launch_in(kernel, grid, block, smem, dim3(1, 1, 1), s, std::forward<Args>(args)...);
}

// ---------------------------------------------------------------- copy / fill

__global__ void copy_kernel(View src, View dst, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = i, so = 0, d_o = 0;
    for (int d = dst.ndim - 1; d >= 0; d--) {
      const int64_t idx = rem % dst.shape[d];
      rem /= dst.shape[d];
      so += idx * src.stride[d];
      d_o += idx * dst.stride[d];
    }
    if (src.type == dst.type) {
      switch (elem_size(src.type)) {
        case 8: static_cast<int64_t*>(dst.data)[d_o] = static_cast<const int64_t*>(src.data)[so]; break;
        case 4: static_cast<uint32_t*>(dst.data)[d_o] = static_cast<const uint32_t*>(src.data)[so]; break;
        case 2: static_cast<uint16_t*>(dst.data)[d_o] = static_cast<const uint16_t*>(src.data)[so]; break;
        default: static_cast<uint8_t*>(dst.data)[d_o] = static_cast<const uint8_t*>(src.data)[so]; break;
      }
    } else {
      store(dst.type, dst.data, d_o, load(src.type, src.data, so));
    }
  }
}

__global__ void fill_kernel(View dst, float value, int64_t n, bool contiguous) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (contiguous) {
      store(dst.type, dst.data, i, value);
      continue;
    }
    int64_t rem = i, off = 0;
    for (int d = dst.ndim - 1; d >= 0; d--) {
      off += (rem % dst.shape[d]) * dst.stride[d];
      rem /= dst.shape[d];
    }
    store(dst.type, dst.data, off, value);
  }
}

int64_t numel(const View& v) {
  int64_t n = 1;
  for (int d = 0; d < v.ndim; d++) n *= v.shape[d];
  return n;
}

// ---------------------------------------------------------------- matmul

// The eight bf16 weights of a 16-byte chunk as floats (a bf16 is the top half of a float).
__device__ __forceinline__ void bf16x8_floats(const uint4& q, float (&wv)[8]) {
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    wv[2 * j] = __uint_as_float(words[j] << 16);
    wv[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
  }
}

// acc + Σ x·w over one chunk of eight, from its two float4 halves of x, as eight fused multiply-adds in k order:
// the one order in which every bf16 GEMV sums a chunk, so that a verification's rows, a routed expert's and a
// decode step's carry the same bits. (One instruction per weight and input row; a product of the chunk summed
// first and then added took nine.)
__device__ __forceinline__ float dot8(float acc, const float4& a, const float4& b, const float (&wv)[8]) {
  acc = __fmaf_rn(a.x, wv[0], acc);
  acc = __fmaf_rn(a.y, wv[1], acc);
  acc = __fmaf_rn(a.z, wv[2], acc);
  acc = __fmaf_rn(a.w, wv[3], acc);
  acc = __fmaf_rn(b.x, wv[4], acc);
  acc = __fmaf_rn(b.y, wv[5], acc);
  acc = __fmaf_rn(b.z, wv[6], acc);
  return __fmaf_rn(b.w, wv[7], acc);
}

// Σ_k x[k] · W[n, k] for one weight row, by one warp; T rows of x at once.
// Lanes of `parts` warps share one row: this warp is part `part` of them. A caller that knows the weights are not
// quantized leaves that code out (Quantized = false: fewer registers, more warps resident).
template <int T, bool Quantized = true>
__device__ __forceinline__ void row_dot(const float* x, int64_t ldx, int rows, const Weight& w, const void* wrow,
                                        const void* srow, const void* brow, int64_t K, float (&acc)[T], int part,
                                        int parts) {
  const int lane = (threadIdx.x & 31) + 32 * part, stride = 32 * parts;
#pragma unroll
  for (int t = 0; t < T; t++) acc[t] = 0.0f;
  if (w.bits == 0) {
    const bool x_vec = (reinterpret_cast<uintptr_t>(x) % 16) == 0 && (ldx % 4) == 0;
    if (w.type == kBF16 && x_vec && (K % 8) == 0 && (reinterpret_cast<uintptr_t>(wrow) % 16) == 0) {
      const uint4* p = static_cast<const uint4*>(wrow);
#pragma unroll 2
      for (int64_t c = lane; c < K / 8; c += stride) {
        float wv[8];
        bf16x8_floats(p[c], wv);
#pragma unroll
        for (int t = 0; t < T; t++) {
          if (t >= rows) break;
          const float4* xp = reinterpret_cast<const float4*>(x + t * ldx + c * 8);
          acc[t] = dot8(acc[t], xp[0], xp[1], wv);
        }
      }
    } else {
      for (int64_t k = lane; k < K; k += stride) {
        const float wv = load(w.type, wrow, k);
#pragma unroll
        for (int t = 0; t < T; t++) {
          if (t >= rows) break;
          acc[t] += x[t * ldx + k] * wv;
        }
      }
    }
    return;
  }
  if constexpr (!Quantized) return;
  // Group-wise affine quantized: word c holds 32/bits values of inputs c·per ..; one scale/bias per group.
  const int per = 32 / w.bits;
  const uint32_t mask = (1u << w.bits) - 1u;
  const uint32_t* q = static_cast<const uint32_t*>(wrow);
  const int64_t words = K / per;
#pragma unroll 2
  for (int64_t c = lane; c < words; c += stride) {
    const uint32_t word = q[c];
    const int64_t k0 = c * per;
    const int64_t g = k0 / w.group;
    const float s = load(w.scale_type, srow, g), b = load(w.scale_type, brow, g);
    float wv[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (j < per) wv[j] = s * static_cast<float>((word >> (j * w.bits)) & mask) + b;
#pragma unroll
    for (int t = 0; t < T; t++) {
      if (t >= rows) break;
      const float* xr = x + t * ldx + k0;
      float a = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; j++)
        if (j < per) a += xr[j] * wv[j];
      acc[t] += a;
    }
  }
}

__device__ __forceinline__ const void* weight_row(const Weight& w, int64_t e, int64_t n) {
  const int es = w.bits ? 4 : (w.type == kF32 ? 4 : (w.type == kF8E4M3 ? 1 : 2));
  return static_cast<const uint8_t*>(w.data) + (e * w.expert_stride + n * w.ld) * es;
}
__device__ __forceinline__ const void* scale_row(const Weight& w, const void* base, int64_t e, int64_t n) {
  if (!w.bits) return nullptr;
  const int es = w.scale_type == kF32 ? 4 : 2;
  return static_cast<const uint8_t*>(base) + (e * w.expert_stride_s + n * w.lds) * es;
}

constexpr int kRowsPerBlock = 8;  // one warp per output row

// One output row per `Parts` warps (Parts > 1 splits K, for matrices with too few rows to fill the GPU).
template <int Parts>
__global__ void gemv_kernel(const float* x, int64_t ldx, int T, Weight w, int64_t N, int64_t K, float* y, int64_t ldy,
                            bool accumulate) {
  pdl_begin();
  __shared__ float partial[kRowsPerBlock][8];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * (kRowsPerBlock / Parts) + warp / Parts;
  const int part = warp % Parts;
  float acc[8];
  if (n < N)
    row_dot<8>(x, ldx, T, w, weight_row(w, 0, n), scale_row(w, w.scales, 0, n), scale_row(w, w.biases, 0, n), K, acc,
               part, Parts);
#pragma unroll
  for (int t = 0; t < 8; t++) {
    if (t >= T) break;
    const float v = warp_sum(n < N ? acc[t] : 0.0f);
    if (Parts == 1) {
      if (lane == 0 && n < N) y[t * ldy + n] = accumulate ? y[t * ldy + n] + v : v;
    } else if (lane == 0) {
      partial[warp][t] = v;
    }
  }
  if (Parts == 1) return;
  __syncthreads();
  if (part == 0 && lane < T && n < N) {
    float v = 0.0f;
    for (int p = 0; p < Parts; p++) v += partial[warp + p][lane];
    y[lane * ldy + n] = accumulate ? y[lane * ldy + n] + v : v;
  }
}

// Weights are read once: stream them past L1 so that the activations stay there.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// What a chunked GEMV launch computes (see gemv_chunks_kernel). Output rows [0, n_end[0]) come from w[0] into
// y[0], and with EPI 3 rows [n_end[i-1], n_end[i]) from w[i] into y[i] (several matrices of one input in one
// launch). EPI 1: w[1] is the up projection; EPI 2: m [T, N] (row stride ldm) the multiplier.
constexpr int kGemvSegments = 3;
struct GemvJob {
  const float* x;
  int64_t ldx;
  int T;
  Weight w[kGemvSegments];
  int64_t n_end[kGemvSegments];
  float* y[kGemvSegments];
  int64_t ldy[kGemvSegments];
  int segments;
  const float* m;
  int64_t ldm;
  int act;
  int64_t K;
  bool accumulate;
  bool early;  // the first weight loads are issued before the kernel before this one has finished
  ResidualNorm rn;  // applied after the products when rn.counter is set (EPI 0 only)
  // Quantized rows over the input's 8-bit digits (digits_kernel): planes [T][3][K], per chunk 2^e and Σ x [T][chunks].
  void* digits;  // the backend's buffer (gemv_digits_bytes), or null: no digits
  const int8_t* xd;
  const float* xsc;
  const float* xsm;
  // Verification: the input rows in `groups` groups of up to `group_rows`, each group's blocks beside the other
  // groups' blocks of the same weight rows (block b takes group b % groups), so that a weight read from DRAM by one
  // is read from L2 by the others; each warp keeps as few rows' sums as decode does. 0 or 1: one group.
  int groups;
  int group_rows;
};

// Threads that compute one row of a residual norm, whatever the block's size: the fused GEMV's last block (128 or
// 512 threads) and the standalone kernel (128) then sum in the same order, so a row has the same bits either way.
constexpr int kNormThreads = 128;

// y = (x + f · inv_rms(f) · w) · s and, with n, n = y · inv_rms(y) · w2, for one row of D by the block's first
// kNormThreads threads (every thread of the block calls it; the others add nothing to the sums). Each thread takes
// elements i0 + u·kNormThreads, eight at a time; f is read from L2 (other blocks of a fused launch wrote it).
// Rows of up to kNormThreads · 8 · kNormHeld elements are loaded once, every input in one round trip, and kept in
// registers; longer rows go in slices of eight per thread, each pass loading again. Both sum in the same order.
constexpr int kNormHeld = 2;

__device__ __forceinline__ float inv_rms_of(float ss, float Df, float eps, float* scratch) {
  return __frcp_rn(__fsqrt_rn(__fadd_rn(__fdiv_rn(block_sum(ss, scratch), Df), eps)));
}

// With Parts the branch is given as three products, f, f + fp and f + 2·fp (a prompt's three-part bf16 GEMMs
// stacked in one launch), summed here in the order the accumulating GEMMs sum them. (A template parameter: as a
// run-time choice it slowed decode's norms by half, their loads no longer all in flight at once.)
template <int Held = kNormHeld, bool Parts = false>
__device__ void residual_norm_row(const float* x, const float* f, const float* w, int64_t D, float eps, float s,
                                  float* y, const float* w2, float* n, float* scratch, int64_t fp = 0) {
  // Rounded intrinsics throughout: the compiler contracts nothing, whichever kernel this is inlined into.
  constexpr int U = 8;
  auto branch = [&](int64_t i) {
    if constexpr (Parts) return __fadd_rn(__fadd_rn(__ldcg(f + i), __ldcg(f + fp + i)), __ldcg(f + 2 * fp + i));
    return __ldcg(f + i);
  };
  const bool in = threadIdx.x < kNormThreads;
  const float Df = static_cast<float>(D);
  auto normed = [&](float fv, float inv, float wv) {
    return w ? __fmul_rn(__fmul_rn(fv, inv), wv) : __fmul_rn(fv, inv);
  };
  auto residual = [&](float xv, float nv) {
    float v = __fadd_rn(xv, nv);
    return s != 1.0f ? __fmul_rn(v, s) : v;
  };
  if (D <= kNormThreads * U * Held) {
    float fv[Held][U], xv[Held][U], wv[Held][U], w2v[Held][U];
#pragma unroll
    for (int h = 0; h < Held; h++)
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int64_t i = threadIdx.x + (h * U + u) * kNormThreads;
        const bool ok = in && i < D;
        fv[h][u] = ok ? branch(i) : 0.0f;
        xv[h][u] = ok ? x[i] : 0.0f;
        wv[h][u] = ok && w ? w[i] : 1.0f;
        w2v[h][u] = ok && n && w2 ? w2[i] : 1.0f;
      }
    float ss = 0.0f;
#pragma unroll
    for (int h = 0; h < Held; h++)
#pragma unroll
      for (int u = 0; u < U; u++) ss = __fadd_rn(ss, __fmul_rn(fv[h][u], fv[h][u]));
    const float inv = inv_rms_of(ss, Df, eps, scratch);
    float ss2 = 0.0f;
#pragma unroll
    for (int h = 0; h < Held; h++)
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int64_t i = threadIdx.x + (h * U + u) * kNormThreads;
        const float v = residual(xv[h][u], normed(fv[h][u], inv, wv[h][u]));
        xv[h][u] = v;  // y, kept for the second norm
        if (in && i < D) {
          y[i] = v;
          ss2 = __fadd_rn(ss2, __fmul_rn(v, v));
        }
      }
    if (!n) return;
    const float inv2 = inv_rms_of(ss2, Df, eps, scratch);
#pragma unroll
    for (int h = 0; h < Held; h++)
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int64_t i = threadIdx.x + (h * U + u) * kNormThreads;
        if (in && i < D) n[i] = w2 ? __fmul_rn(__fmul_rn(xv[h][u], inv2), w2v[h][u]) : __fmul_rn(xv[h][u], inv2);
      }
    return;
  }
  float ss = 0.0f;
  for (int64_t i0 = threadIdx.x; in && i0 < D; i0 += kNormThreads * U) {
    float v[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t i = i0 + u * kNormThreads;
      v[u] = i < D ? branch(i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < U; u++) ss = __fadd_rn(ss, __fmul_rn(v[u], v[u]));
  }
  const float inv = inv_rms_of(ss, Df, eps, scratch);
  float ss2 = 0.0f;
  for (int64_t i0 = threadIdx.x; in && i0 < D; i0 += kNormThreads * U) {
    float fv[U], xv[U], wv[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t i = i0 + u * kNormThreads;
      fv[u] = i < D ? branch(i) : 0.0f;
      xv[u] = i < D ? x[i] : 0.0f;
      wv[u] = i < D && w ? w[i] : 1.0f;
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t i = i0 + u * kNormThreads;
      if (i >= D) break;
      const float v = residual(xv[u], normed(fv[u], inv, wv[u]));
      y[i] = v;
      ss2 = __fadd_rn(ss2, __fmul_rn(v, v));
    }
  }
  if (!n) return;
  const float inv2 = inv_rms_of(ss2, Df, eps, scratch);
  for (int64_t i0 = threadIdx.x; in && i0 < D; i0 += kNormThreads * U) {
    float yv[U], wv[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t i = i0 + u * kNormThreads;
      yv[u] = i < D ? y[i] : 0.0f;
      wv[u] = i < D && w2 ? w2[i] : 1.0f;
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t i = i0 + u * kNormThreads;
      if (i < D) n[i] = w2 ? __fmul_rn(__fmul_rn(yv[u], inv2), wv[u]) : __fmul_rn(yv[u], inv2);
    }
  }
}

// The inputs of a fused launch's residual norm other than the products (the residual row and the norm weights),
// asked of L2 by one warp at the launch's start, so that the last block's norm finds them there.
__device__ __forceinline__ void residual_norm_warm(const ResidualNorm& r, int64_t D) {
  if (blockIdx.x != 0 || threadIdx.x >= 32) return;
  for (int64_t i = threadIdx.x * 32; i < D; i += 32 * 32) {  // a 128-byte line per lane
    asm volatile("prefetch.global.L2 [%0];" ::"l"(r.res + i));
    if (r.w) asm volatile("prefetch.global.L2 [%0];" ::"l"(r.w + i));
    if (r.n && r.w2) asm volatile("prefetch.global.L2 [%0];" ::"l"(r.w2 + i));
  }
}

// Called by every thread of every block of a one-row GEMV launch once its outputs are written: the block that
// finishes last applies the residual norm to the row and zeroes the counter for the next launch.
__device__ __forceinline__ void residual_norm_tail(const ResidualNorm r, int64_t D) {
  __shared__ unsigned ticket;
  __shared__ float scratch[32];
  // The block's outputs (ordered before thread 0's fence by the barrier) are visible before the block is counted.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    ticket = atomicAdd(r.counter, 1u);
  }
  __syncthreads();
  if (ticket != gridDim.x - 1) return;
  __threadfence();
  residual_norm_row(r.res, r.f, r.w, D, r.eps, r.scale, r.y, r.w2, r.n, scratch);
  if (threadIdx.x == 0) *r.counter = 0u;
}

__device__ __forceinline__ int dp4a_us(uint32_t codes, uint32_t digits, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(codes), "r"(digits), "r"(c));
  return d;
}

template <int TT, int R, int BITS, int EPI, bool DP = false>
__device__ __forceinline__ void gemv_chunks(const GemvJob& j, int parts) {
  constexpr int RO = EPI == 1 ? R / 2 : R;  // output rows per warp
  __shared__ float partial[4][R][TT];
  const int64_t ldx = j.ldx, K = j.K, N = j.n_end[EPI == 3 ? kGemvSegments - 1 : 0];
  // This block's group of input rows (see GemvJob::groups): rows t0 .. t0 + T - 1 of the launch.
  const int groups = j.groups > 1 ? j.groups : 1;
  const int64_t block = blockIdx.x / groups;
  const int t0 = groups > 1 ? static_cast<int>(blockIdx.x % groups) * j.group_rows : 0;
  const int T = groups > 1 ? min(j.group_rows, j.T - t0) : j.T;
  // Row n of the output: its matrix (segment) and its row there.
  auto segment = [&](int64_t n) { return EPI == 3 ? (n < j.n_end[0] ? 0 : n < j.n_end[1] ? 1 : 2) : 0; };
  auto local = [&](int64_t n, int seg) { return EPI == 3 && seg ? n - j.n_end[seg - 1] : n; };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // parts is 1, 2 or 4 (launch_gemv_chunks): shifts, not divisions.
  const int lp = parts >> 1 == 2 ? 2 : parts >> 1;
  const int group_warps = 4 >> lp;
  const int part = warp & (parts - 1);
  const int64_t n0 = (block * group_warps + (warp >> lp)) * RO;
  constexpr int vals = BITS ? 128 / BITS : 8;  // inputs per 16-byte chunk
  const int64_t chunks = K / vals;
  const float* __restrict__ x = j.x + t0 * ldx;
  const int8_t* __restrict__ xd_base = j.xd ? j.xd + static_cast<int64_t>(t0) * 3 * K : nullptr;
  const float* __restrict__ xsc_base = j.xsc ? j.xsc + t0 * chunks : nullptr;
  const float* __restrict__ xsm_base = j.xsm ? j.xsm + t0 * chunks : nullptr;
  // bf16 rows past the matrix's end read its last row (their sums are not written), so that no load is predicated.
  const uint4* rowp[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    const int64_t n = BITS == 0 ? min(n0 + r % RO, N - 1) : n0 + r % RO;
    const int seg = EPI == 1 ? (r >= RO) : segment(n);
    rowp[r] = n < N ? static_cast<const uint4*>(weight_row(j.w[seg], 0, local(n, seg))) : nullptr;
  }
  float acc[R][TT];
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int t = 0; t < TT; t++) acc[r][t] = 0.0f;
  // A lane's chunks go U at a time: all their loads are issued before any is used, so that a small matrix (a few
  // chunks per lane) is one memory round trip rather than one per chunk. The sums run in chunk order whatever U is,
  // so U may differ between decode and verification. Four bf16 chunks for one input row; two for two rows (with
  // four, two rows' launches took 140 registers, 12 warps per SM, and verified a token for 1.45 decode steps on E2B
  // where two chunks (100-110 registers) take 1.30); one for more, where a lane's sums of 3-4 input rows and 4
  // weight rows are many registers already (on an H100, 8 tokens verified for 1.61 steps of 31B where two chunks
  // took 1.77, E2B 2.03 where 2.12). Quantized chunks: two, and one from 3 input rows (31B's int8 verified 5 tokens
  // for 1.51 steps where two chunks took 1.67, int4 1.83 where 1.94).
  constexpr int U = BITS ? (TT >= 4 ? 1 : 2) : (TT == 1 ? 4 : TT == 2 ? 2 : 1);
  const int64_t stride = 32 * parts, first = lane + 32 * part;
  // Quantized: a chunk's group is its index shifted (a group is a power-of-two number of chunks, chunks_fit), and
  // its scale and bias (16-bit floats) are loaded with its codes, into one register, so that no load waits on
  // another.
  const int gshift = BITS ? __ffs(static_cast<int>(j.w[0].group / vals)) - 1 : 0;
  uint4 qs[U][R];
  uint32_t sb[U][R];
  auto load_chunks = [&](int64_t c0) {
#pragma unroll
    for (int ub = 0; ub < U; ub++) {
      const int64_t c = c0 + ub * stride;
      if constexpr (BITS == 0) {
        // Past the last chunk, the last chunk again (not summed): the loads need no predicate and no zeroing.
        const int64_t cc = c < chunks ? c : chunks - 1;
#pragma unroll
        for (int r = 0; r < R; r++) qs[ub][r] = load_stream(rowp[r] + cc);
      } else {
#pragma unroll
        for (int r = 0; r < R; r++) qs[ub][r] = rowp[r] && c < chunks ? load_stream(rowp[r] + c) : make_uint4(0, 0, 0, 0);
      }
      if constexpr (BITS != 0) {
        const int64_t g = c >> gshift;
#pragma unroll
        for (int r = 0; r < R; r++) {
          sb[ub][r] = 0u;
          if (rowp[r] && c < chunks) {
            const int64_t n = n0 + r % RO;
            const int seg = EPI == 1 ? (r >= RO) : segment(n);
            const Weight& wr = j.w[seg];
            const uint16_t* sp = static_cast<const uint16_t*>(scale_row(wr, wr.scales, 0, local(n, seg)));
            const uint16_t* bp = static_cast<const uint16_t*>(scale_row(wr, wr.biases, 0, local(n, seg)));
            sb[ub][r] = static_cast<uint32_t>(__ldg(sp + g)) | static_cast<uint32_t>(__ldg(bp + g)) << 16;
          }
        }
      }
    }
  };
  auto half_to_float = [&](uint32_t h) {
    return j.w[0].scale_type == kBF16 ? __uint_as_float(h << 16) : f16_to_float(static_cast<uint16_t>(h));
  };
  // Programmatic launch: this kernel may start while the one before it still runs (pdl_begin waits for it). Model
  // weights are not written by it, so with early loads (the default; VATIC_GEMV_EARLY=0 turns them off) decode's
  // launches (one or two input rows) issue their first loads before the wait, and the DRAM round trip overlaps that
  // kernel's tail; a weight computed by it (Weight::computed) is loaded after. Verification launches, and every
  // launch without early loads, load as before (in the loop for bf16): they are sensitive to register allocation.
  const bool early = TT <= 2 && groups == 1 && j.early;  // not for a grouped verification
  if (early) load_chunks(first);
  pdl_begin();
  if (EPI == 0 && j.rn.counter) residual_norm_warm(j.rn, N);
  if constexpr (BITS != 0)
    if (!early) load_chunks(first);
  for (int64_t c0 = first; c0 < chunks; c0 += stride * U) {
    if (c0 != first || (BITS == 0 && !early)) load_chunks(c0);
#pragma unroll
    for (int ub = 0; ub < U; ub++) {
      const int64_t c = c0 + ub * stride;
      if (c >= chunks) break;
      const uint4* q = qs[ub];
      if constexpr (BITS == 0) {
        // Converted once, used for every input row.
        float wv[R][8];
#pragma unroll
        for (int r = 0; r < R; r++) bf16x8_floats(q[r], wv[r]);
#pragma unroll
        for (int t = 0; t < TT; t++) {
          if (t >= T) break;
          const float4* xp = reinterpret_cast<const float4*>(x + t * ldx + c * 8);
          const float4 a = xp[0], b = xp[1];
#pragma unroll
          for (int r = 0; r < R; r++) acc[r][t] = dot8(acc[r][t], a, b, wv[r]);
        }
      } else {
        // Quantized: the chunk lies in one group, so Σ x·(s·q + b) = s·Σ x·q + b·Σ x. A code becomes a float by
        // one byte permute, with nothing to subtract: the word 0x000000qq is the subnormal float q·2^-149 (int4 codes
        // are first spread one per byte, the even ones and the odd ones of a word). Each code is made where it is
        // used, for every input row, and multiplied with x·2^64: Σ (x·2^64)·(q·2^-149) is Σ x·q scaled by 2^-85,
        // a power of two, so each rounding is the one of the unscaled sum (the scaled partial sums stay normal
        // unless |Σ x·q| < 2^-41) and the sum is scaled back exactly. (|x| must stay below 2^64.)
        float sc[R], bi[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
          sc[r] = half_to_float(sb[ub][r] & 0xffffu);
          bi[r] = half_to_float(sb[ub][r] >> 16);
        }
        if constexpr (DP) {
          // Over the input's digits: x ≈ 2^e · (d2·2^16 + d1·2^8 + d0) per chunk, so Σ x·q is 2^e times three
          // exact integer sums of codes by digits (dp4a: four at a time), and Σ x·(s·q + b) = s·2^e·Σ + b·Σ x.
          // Each input row's sums are its own, in the same order whatever T is.
#pragma unroll
          for (int t = 0; t < TT; t++) {
            if (t >= T) break;
            const int8_t* pl = xd_base + static_cast<int64_t>(t) * 3 * K + c * vals;
            uint4 xdv[3][BITS == 4 ? 2 : 1];
#pragma unroll
            for (int d = 0; d < 3; d++)
#pragma unroll
              for (int h = 0; h < (BITS == 4 ? 2 : 1); h++)
                xdv[d][h] = *reinterpret_cast<const uint4*>(pl + d * K + 16 * h);
            const float e2 = xsc_base[t * chunks + c], xsum = xsm_base[t * chunks + c];
#pragma unroll
            for (int r = 0; r < R; r++) {
              int sd[3] = {0, 0, 0};
#pragma unroll
              for (int wd = 0; wd < 4; wd++) {
                const uint32_t word = wd == 0 ? q[r].x : wd == 1 ? q[r].y : wd == 2 ? q[r].z : q[r].w;
                if constexpr (BITS == 4) {
                  // Inputs 8·wd .. 8·wd + 7: the even ones in the low nibbles, the odd ones in the high.
                  const uint32_t lo = word & 0x0F0F0F0Fu, hi = (word >> 4) & 0x0F0F0F0Fu;
#pragma unroll
                  for (int d = 0; d < 3; d++) {
                    const uint4 a = xdv[d][wd / 2];
                    sd[d] = dp4a_us(lo, (wd & 1) ? a.z : a.x, sd[d]);
                    sd[d] = dp4a_us(hi, (wd & 1) ? a.w : a.y, sd[d]);
                  }
                } else {
#pragma unroll
                  for (int d = 0; d < 3; d++) {
                    const uint4 a = xdv[d][0];
                    sd[d] = dp4a_us(word, wd == 0 ? a.x : wd == 1 ? a.y : wd == 2 ? a.z : a.w, sd[d]);
                  }
                }
              }
              const float v = __fadd_rn(__fmaf_rn(static_cast<float>(sd[2]), 65536.0f,
                                                  __fmul_rn(static_cast<float>(sd[1]), 256.0f)),
                                        static_cast<float>(sd[0]));
              acc[r][t] = __fmaf_rn(sc[r], __fmul_rn(v, e2), __fmaf_rn(bi[r], xsum, acc[r][t]));
            }
          }
          continue;
        }
        float dq[R][TT], sx[TT];
#pragma unroll
        for (int t = 0; t < TT; t++) {
          sx[t] = 0.0f;
#pragma unroll
          for (int r = 0; r < R; r++) dq[r][t] = 0.0f;
        }
        constexpr int per = 32 / BITS;  // codes per word: 8 or 4
#pragma unroll
        for (int j = 0; j < 4; j++) {
          // The word's codes one per byte: [0] codes 0, 2, 4, 6 (int4) or 0..3 (int8), [1] codes 1, 3, 5, 7 (int4).
          uint32_t bytes[R][2];
#pragma unroll
          for (int r = 0; r < R; r++) {
            const uint32_t word = j == 0 ? q[r].x : j == 1 ? q[r].y : j == 2 ? q[r].z : q[r].w;
            bytes[r][0] = BITS == 4 ? word & 0x0F0F0F0Fu : word;
            bytes[r][1] = BITS == 4 ? (word >> 4) & 0x0F0F0F0Fu : 0u;
          }
#pragma unroll
          for (int t = 0; t < TT; t++) {
            if (t >= T) break;
            const float* xr = x + t * ldx + c * vals + j * per;
            float xv[8];
            const float4 a = *reinterpret_cast<const float4*>(xr);
            xv[0] = a.x;
            xv[1] = a.y;
            xv[2] = a.z;
            xv[3] = a.w;
            if constexpr (BITS == 4) {
              const float4 b = *reinterpret_cast<const float4*>(xr + 4);
              xv[4] = b.x;
              xv[5] = b.y;
              xv[6] = b.z;
              xv[7] = b.w;
            }
#pragma unroll
            for (int i = 0; i < per; i++) {
              sx[t] += xv[i];
              const float xs = xv[i] * 0x1p64f;
              // Byte i (int8) or i / 2 of the even / odd half (int4) of the word, alone in a word.
              const int half = BITS == 4 ? i & 1 : 0, byte = BITS == 4 ? i >> 1 : i;
#pragma unroll
              for (int r = 0; r < R; r++) {
                const float code = __uint_as_float(__byte_perm(bytes[r][half], 0u, 0x4440u | byte));
                dq[r][t] += xs * code;
              }
            }
          }
        }
#pragma unroll
        for (int t = 0; t < TT; t++) {
          if (t >= T) break;
#pragma unroll
          for (int r = 0; r < R; r++) acc[r][t] += sc[r] * (dq[r][t] * 0x1p85f) + bi[r] * sx[t];
        }
      }
    }
  }
  // Row sums; then each output row's epilogue, by lane 0 (one part) or from the parts' sums in shared memory.
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int t = 0; t < TT; t++) {
      if (t >= T) break;
      acc[r][t] = warp_sum(acc[r][t]);
      if (parts > 1 && lane == 0) partial[warp][r][t] = acc[r][t];
    }
  auto finish = [&](int r, int t, float v, float v2) {
    const int64_t n = n0 + r;
    if (n >= N) return;
    if (EPI == 1) v = activate(j.act, v) * v2;
    if (EPI == 2) v = activate(j.act, v) * j.m[(t0 + t) * j.ldm + n];
    const int seg = segment(n);
    float* out = j.y[seg] + (t0 + t) * j.ldy[seg] + local(n, seg);
    *out = j.accumulate ? *out + v : v;
  };
  if (parts == 1) {
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < RO; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) {
          if (t >= T) break;
          finish(r, t, acc[r][t], EPI == 1 ? acc[(r + RO) % R][t] : 0.0f);
        }
    }
  } else {
    __syncthreads();
    if (part == 0 && lane < RO * TT) {
      const int r = lane / TT, t = lane % TT;
      if (t < T) {
        float v = 0.0f, v2 = 0.0f;
        for (int p = 0; p < parts; p++) {
          v += partial[warp + p][r][t];
          if (EPI == 1) v2 += partial[warp + p][(r + RO) % R][t];
        }
        finish(r, t, v, v2);
      }
    }
  }
  if (EPI == 0 && j.rn.counter) residual_norm_tail(j.rn, N);
}

template <int TT, int R, int BITS, int EPI>
__global__ void __launch_bounds__(128) gemv_chunks_kernel(const GemvJob j, int parts) {
  gemv_chunks<TT, R, BITS, EPI>(j, parts);
}

// A verification's bf16 launches of 3 to 8 input rows (one chunk in flight a lane), held to six blocks per SM (24
// warps): on an H100, 8 tokens of 31B verified for 1.56 steps, not 1.61. Two-row launches (two chunks in flight)
// are not: held so, they verified a token for 1.33 steps of 31B where they take 1.06. (A kernel of its own: a
// minimum of one block per SM on the others is not the same as none, and changed decode's code.)
template <int TT, int R, int EPI>
__global__ void __launch_bounds__(128, 6) gemv_verify_kernel(const GemvJob j, int parts) {
  gemv_chunks<TT, R, 0, EPI>(j, parts);
}

// A decode step's bf16 gated, multiplied and several-matrix launches (one input row), held to five blocks per SM
// (20 warps, at most 102 registers a thread): unbounded they take 114, four blocks, since their loads went
// unpredicated, and E4B decoded 2.5 % slower than at the 96 they took before (VATIC_GEMV_DECODE_BOUND=0: unbounded,
// for measuring). The same arithmetic either way.
template <int R, int EPI>
__global__ void __launch_bounds__(128, 5) gemv_decode_kernel(const GemvJob j, int parts) {
  gemv_chunks<1, R, 0, EPI>(j, parts);
}

// Quantized rows over the input's digits (digits_kernel), decode and verification alike.
template <int TT, int R, int BITS, int EPI>
__global__ void __launch_bounds__(128) gemv_digits_kernel(const GemvJob j, int parts) {
  gemv_chunks<TT, R, BITS, EPI, true>(j, parts);
}

// The input rows x [T, K] as three signed 8-bit digits per value over one exponent per chunk of 128 / BITS values:
// x ≈ 2^e · (d2·2^16 + d1·2^8 + d0) with |x / 2^e| < 2^22, e from the chunk's largest value (23 significant bits
// for it, as many absolute bits for the others), digits in the order dp4a pairs them with a chunk's codes (int4:
// per 8 inputs the even ones, then the odd ones); per chunk 2^e and Σ x. One thread per value, a chunk's values in
// consecutive lanes of one warp; each row on its own, so a row's digits do not depend on T.
template <int BITS>
__global__ void digits_kernel(const float* x, int64_t ldx, int T, int64_t K, int8_t* planes, float* scales,
                              float* sums) {
  constexpr int vals = 128 / BITS;
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool in = i < T * K;
  const int64_t t = in ? i / K : 0, k = in ? i % K : 0;
  const float v = in ? x[t * ldx + k] : 0.0f;
  float M = fabsf(v), sum = v;
#pragma unroll
  for (int o = vals / 2; o > 0; o >>= 1) {
    M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, o));
  }
  if (!in) return;
  const int e = M > 0.0f ? max(ilogbf(M) - 21, -149) : 0;
  const int m = __float2int_rn(ldexpf(v, -e));
  const int d0 = ((m & 0xff) ^ 0x80) - 0x80;
  const int m1 = (m - d0) >> 8;
  const int d1 = ((m1 & 0xff) ^ 0x80) - 0x80;
  const int d2 = (m1 - d1) >> 8;
  const int64_t c = k / vals;
  int64_t pos = k;
  if (BITS == 4) pos = (k & ~int64_t(7)) + (k & 1) * 4 + ((k & 7) >> 1);
  int8_t* p = planes + t * 3 * K + pos;
  p[0] = static_cast<int8_t>(d0);
  p[K] = static_cast<int8_t>(d1);
  p[2 * K] = static_cast<int8_t>(d2);
  if (k % vals == 0) {
    scales[t * (K / vals) + c] = ldexpf(1.0f, e);
    sums[t * (K / vals) + c] = sum;
  }
}

// One-row quantized launches wait on their loads more than on their arithmetic: their registers are capped for six
// blocks per SM (24 warps, where about 100 registers allowed 4 or 5), so that more loads are in flight.
template <int R, int BITS, int EPI>
__global__ void __launch_bounds__(128, 6) gemv_chunks_q1_kernel(const GemvJob j, int parts) {
  gemv_chunks<1, R, BITS, EPI>(j, parts);
}

// ---------------------------------------------------------------- tensor-core GEMV for bf16 weights

// x = hi + mid + lo exactly, each part a bf16 (x's 24 significant bits in three 8-bit pieces; each difference is
// exact by Sterbenz's lemma). A bf16 weight times a bf16 part is exact in f32, so the tensor cores' products are the
// f32 products x·w, only summed in the tensor cores' order. Two values per 32-bit register, the lower k first.
__device__ __forceinline__ void split_bf16x3(float a, float b, uint32_t& hi, uint32_t& mid, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  const float2 hf = __bfloat1622float2(h);
  const float ra = a - hf.x, rb = b - hf.y;
  const __nv_bfloat162 m = __floats2bfloat162_rn(ra, rb);
  const float2 mf = __bfloat1622float2(m);
  const __nv_bfloat162 l = __floats2bfloat162_rn(ra - mf.x, rb - mf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  mid = *reinterpret_cast<const uint32_t*>(&m);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// d += a · b for one 16×16 (a, bf16, row-major) by 16×8 (b, bf16) tile, f32 accumulators.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

constexpr int kMmaWarps = 16;  // the most warps a block has
constexpr int kMmaSteps = 2;   // k-steps whose loads a warp issues together (2 KB of weights each)

// The bf16 GEMV on tensor cores, for every T <= 8 (decode and verification take the same path, so a row's sum is
// the same bits whatever T is: the MMA computes each output column from its own inputs only). A warp owns a
// 16-row tile of weights and the 8 input rows as the MMA's 8 columns, each input row split into three bf16 parts
// that accumulate separately (added hi + mid, then + lo, at the end). A k-step covers 64 inputs, eight 16-byte
// chunks of each row: lane (g, t) (g = lane / 4, t = lane % 4) loads chunks t and t + 4 of weight rows g and g + 8
// and of input row g, so the four lanes of a row read 64 contiguous bytes per load (whole sectors). The k slots
// (2t, 2t+1, 2t+8, 2t+9) of the step's four k16 MMAs hold the lane's inputs in chunk order: a permutation of k
// shared by weights and inputs, so each product is the right one. A warp issues the loads of kMmaSteps steps
// before it computes any. `parts` warps split the k-steps (interleaved) and add their sums in a fixed order; with
// EPI 1 the gate's tile and the up projection's tile go to two sets of `parts` warps. A block has max(4, span)
// warps. Epilogues as in gemv_chunks_kernel.
template <int EPI>
__global__ void __launch_bounds__(32 * kMmaWarps) gemv_mma_kernel(const GemvJob j, int parts) {
  __shared__ float partial[kMmaWarps][4][32];
  const int64_t ldx = j.ldx, K = j.K, N = j.n_end[EPI == 3 ? kGemvSegments - 1 : 0];
  const int T = j.T;
  auto segment = [&](int64_t n) { return EPI == 3 ? (n < j.n_end[0] ? 0 : n < j.n_end[1] ? 1 : 2) : 0; };
  auto local = [&](int64_t n, int seg) { return EPI == 3 && seg ? n - j.n_end[seg - 1] : n; };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int span = EPI == 1 ? 2 * parts : parts;  // warps per row tile
  const int part = warp % parts, which = EPI == 1 ? (warp / parts) % 2 : 0, lead = warp - warp % span;
  const int tiles_per_block = static_cast<int>(blockDim.x >> 5) / span;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * tiles_per_block + warp / span) * 16;
  // This lane's weight rows g and g + 8 of the tile (EPI 1: of the gate or of the up projection).
  const uint4* rowp[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int64_t n = n0 + g + 8 * h;
    const int seg = EPI == 1 ? which : segment(n);
    rowp[h] = n < N ? static_cast<const uint4*>(weight_row(j.w[seg], 0, local(n, seg))) : nullptr;
  }
  pdl_begin();
  if (EPI == 0 && j.rn.counter) residual_norm_warm(j.rn, N);
  const float* xrow = g < T ? j.x + g * ldx : nullptr;
  const int64_t chunks = K / 8, steps = (chunks + 7) / 8;
  float acc[3][4];
#pragma unroll
  for (int s = 0; s < 3; s++)
#pragma unroll
    for (int i = 0; i < 4; i++) acc[s][i] = 0.0f;
  for (int64_t s0 = part; s0 < steps; s0 += static_cast<int64_t>(parts) * kMmaSteps) {
    uint4 q[kMmaSteps][2][2];  // [step][row half][chunk]
    float4 xs[kMmaSteps][4];
#pragma unroll
    for (int u = 0; u < kMmaSteps; u++) {
      const int64_t s = s0 + static_cast<int64_t>(u) * parts;
#pragma unroll
      for (int c2 = 0; c2 < 2; c2++) {
        const int64_t c = s * 8 + t + 4 * c2;
        const bool in = s < steps && c < chunks;
#pragma unroll
        for (int h = 0; h < 2; h++) q[u][h][c2] = in && rowp[h] ? load_stream(rowp[h] + c) : make_uint4(0, 0, 0, 0);
        if (in && xrow) {
          const float4* xp = reinterpret_cast<const float4*>(xrow + c * 8);
          xs[u][2 * c2] = xp[0];
          xs[u][2 * c2 + 1] = xp[1];
        } else {
          xs[u][2 * c2] = xs[u][2 * c2 + 1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kMmaSteps; u++) {
      if (s0 + static_cast<int64_t>(u) * parts >= steps) break;
#pragma unroll
      for (int k16 = 0; k16 < 4; k16++) {
        const float4 xv = xs[u][k16];
        uint32_t x3[3][2];  // [part][b0, b1]
        split_bf16x3(xv.x, xv.y, x3[0][0], x3[1][0], x3[2][0]);
        split_bf16x3(xv.z, xv.w, x3[0][1], x3[1][1], x3[2][1]);
        const uint4 &r0 = q[u][0][k16 / 2], &r1 = q[u][1][k16 / 2];
        const bool hi = k16 & 1;
        const uint32_t a[4] = {hi ? r0.z : r0.x, hi ? r1.z : r1.x, hi ? r0.w : r0.y, hi ? r1.w : r1.y};
#pragma unroll
        for (int s = 0; s < 3; s++) mma_bf16_16816(acc[s], a, x3[s][0], x3[s][1]);
      }
    }
  }
  // Accumulator i: weight row g + 8·(i / 2) of the tile, input row 2t + (i % 2).
  float v[4], v2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < 4; i++) v[i] = (acc[0][i] + acc[1][i]) + acc[2][i];
  bool writer = true;  // the warp that writes the tile's outputs
  if (span > 1) {
#pragma unroll
    for (int i = 0; i < 4; i++) partial[warp][i][lane] = v[i];
    __syncthreads();
    writer = warp == lead;
    if (writer) {
#pragma unroll
      for (int i = 0; i < 4; i++) {
        float sum = partial[lead][i][lane];
        for (int p = 1; p < parts; p++) sum += partial[lead + p][i][lane];
        v[i] = sum;
        if (EPI == 1) {
          float up = partial[lead + parts][i][lane];
          for (int p = 1; p < parts; p++) up += partial[lead + parts + p][i][lane];
          v2[i] = up;
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int tok = 2 * t + (i & 1);
    const int64_t n = n0 + g + 8 * (i >> 1);
    if (!writer || tok >= T || n >= N) continue;
    float val = v[i];
    if (EPI == 1) val = activate(j.act, val) * v2[i];
    if (EPI == 2) val = activate(j.act, val) * j.m[tok * j.ldm + n];
    const int seg = segment(n);
    float* out = j.y[seg] + tok * j.ldy[seg] + local(n, seg);
    *out = j.accumulate ? *out + val : val;
  }
  if (EPI == 0 && j.rn.counter) residual_norm_tail(j.rn, N);
}

// x [T, K] (row stride ldx) as three bf16 planes [3][T, K]: hi, mid and lo parts with hi + mid + lo = x.
// A row per blockIdx.y (and every gridDim.y-th after), four values a thread with `quads` (rows float4-aligned, as
// split_bf16x3 decides when it sizes the grid).
__global__ void split_bf16x3_kernel(const float* x, int64_t ldx, int64_t T, int64_t K, bool quads,
                                    __nv_bfloat16* out) {
  pdl_begin();
  const int64_t n = T * K;
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * (quads ? 4 : 1);
  if (c >= K) return;
  for (int64_t r = blockIdx.y; r < T; r += gridDim.y) {
    const int64_t i = r * K + c;
    if (quads) {
      const float4 v = *reinterpret_cast<const float4*>(x + r * ldx + c);
      uint2 h, m, l;
      split_bf16x3(v.x, v.y, h.x, m.x, l.x);
      split_bf16x3(v.z, v.w, h.y, m.y, l.y);
      *reinterpret_cast<uint2*>(out + i) = h;
      *reinterpret_cast<uint2*>(out + n + i) = m;
      *reinterpret_cast<uint2*>(out + 2 * n + i) = l;
    } else {
      uint32_t h, m, l;  // the value's parts in the low halves (the pair's second value is 0)
      split_bf16x3(x[r * ldx + c], 0.0f, h, m, l);
      out[i] = __ushort_as_bfloat16(static_cast<unsigned short>(h));
      out[n + i] = __ushort_as_bfloat16(static_cast<unsigned short>(m));
      out[2 * n + i] = __ushort_as_bfloat16(static_cast<unsigned short>(l));
    }
  }
}

// y = (p + p[n]) + p[2n] for up to three outputs (blockIdx.y), rows of N at y + r·ldy, four values a thread where
// the rows allow it: the products of gemm_bf16x3's stacked parts summed as its accumulating GEMMs sum them.
__global__ void sum_parts_kernel(const SumPartsJob j) {
  pdl_begin();
  const int g = blockIdx.y;
  const float* p = j.parts[g];
  const int64_t N = j.N[g], n = j.T * N, ldy = j.ldy[g];
  float* y = j.y[g];
  const bool quads =
      N % 4 == 0 && ldy % 4 == 0 && ((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (quads) {
    for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * 4; i < n; i += step * 4) {
      const float4 a = *reinterpret_cast<const float4*>(p + i), b = *reinterpret_cast<const float4*>(p + n + i),
                   c = *reinterpret_cast<const float4*>(p + 2 * n + i);
      const int64_t r = i / N, col = i - r * N;
      *reinterpret_cast<float4*>(y + r * ldy + col) =
          make_float4(__fadd_rn(__fadd_rn(a.x, b.x), c.x), __fadd_rn(__fadd_rn(a.y, b.y), c.y),
                      __fadd_rn(__fadd_rn(a.z, b.z), c.z), __fadd_rn(__fadd_rn(a.w, b.w), c.w));
    }
    return;
  }
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += step) {
    const int64_t r = i / N, col = i - r * N;
    y[r * ldy + col] = __fadd_rn(__fadd_rn(p[i], p[n + i]), p[2 * n + i]);
  }
}

// Over bf16 rows: Σ_k x[k]·a[k] (and with Two, Σ_k x[k]·b[k] of the up projection's row) by one warp, in
// row_dot's order (lane l takes the chunks of 8 inputs l, l + 32, ..., each chunk's products summed as row_dot
// sums them), but U chunks of both rows are asked for at once before any is used:
// row_dot keeps two of one row in flight and takes a gated pair's rows one after the other, which left the
// routed GEMVs well below the bandwidth (26B-A4B's gate and up experts at about 60 %).
template <int U, bool Two>
__device__ __forceinline__ void expert_dot_bf16(const float* x, const uint4* a, const uint4* b, int64_t K,
                                                float& sa, float& sb) {
  const int lane = threadIdx.x & 31;
  const int64_t chunks = K / 8;
  sa = 0.0f;
  sb = 0.0f;
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * U) {
    uint4 qa[U], qb[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t c = c0 + 32 * u;
      qa[u] = c < chunks ? load_stream(a + c) : make_uint4(0, 0, 0, 0);
      if constexpr (Two) qb[u] = c < chunks ? load_stream(b + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t c = c0 + 32 * u;
      if (c >= chunks) break;
      const float4* xp = reinterpret_cast<const float4*>(x + c * 8);
      const float4 p = xp[0], q = xp[1];
      float wv[8];
      bf16x8_floats(qa[u], wv);
      sa = dot8(sa, p, q, wv);
      if constexpr (Two) {
        bf16x8_floats(qb[u], wv);
        sb = dot8(sb, p, q, wv);
      }
    }
  }
}

// Whether expert_dot_bf16 reads these rows: bf16, whole 16-byte chunks, x and the rows 16-byte aligned (else
// row_dot).
__device__ __forceinline__ bool expert_rows_vec(const float* x, int64_t ldx, const Weight& w, int64_t K) {
  return w.bits == 0 && w.type == kBF16 && K % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         ldx % 4 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.ld % 8 == 0 &&
         w.expert_stride % 8 == 0;
}

// One routed row per block row (blockIdx.y), one output row per warp. Each row reads its expert's weights for
// itself, also where rows of several inputs (a verification's tokens) share an expert: a version that computed
// them all from one read was slower on the H200 (docs/gpu.md). `distinct` (or null) counts the experts of the
// launch, each once.
// Gated: the warp takes row n of both w (the gate) and u (the up projection) and writes act(gate) · up, with the
// bits of two launches and gated_kernel. Each distinct expert adds `matrices` to `distinct`. Bf16 rows take
// expert_dot_bf16 (U chunks at once), other rows row_dot.
template <bool Quantized, bool Gated, int U>
__global__ void gemv_experts_kernel(const float* x, int64_t ldx, int64_t per, const int32_t* experts,
                                    Weight w, Weight u, int act, int64_t N, int64_t K, float* y, int64_t ldy,
                                    unsigned long long* distinct, unsigned long long matrices) {
  pdl_begin();
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  const int64_t r = blockIdx.y;
  if (distinct && blockIdx.x == 0 && threadIdx.x == 0) {
    bool first = true;
    for (int64_t i = 0; i < r && first; i++) first = experts[i] != experts[r];
    if (first) atomicAdd(distinct, matrices);
  }
  if (n >= N) return;
  const int64_t e = experts[r];
  const float* xr = x + (r / per) * ldx;
  if (!Quantized && expert_rows_vec(x, ldx, w, K) && (!Gated || expert_rows_vec(x, ldx, u, K))) {
    float v, v2;
    expert_dot_bf16<U, Gated>(xr, static_cast<const uint4*>(weight_row(w, e, n)),
                              static_cast<const uint4*>(weight_row(u, e, n)), K, v, v2);
    v = warp_sum(v);
    if constexpr (Gated) {
      v2 = warp_sum(v2);
      if ((threadIdx.x & 31) == 0) y[r * ldy + n] = activate(act, v) * v2;
    } else {
      if ((threadIdx.x & 31) == 0) y[r * ldy + n] = v;
    }
    return;
  }
  float acc[1];
  row_dot<1, Quantized>(xr, ldx, 1, w, weight_row(w, e, n), scale_row(w, w.scales, e, n),
                        scale_row(w, w.biases, e, n), K, acc, 0, 1);
  const float v = warp_sum(acc[0]);
  if constexpr (Gated) {
    float acc2[1];
    row_dot<1, Quantized>(xr, ldx, 1, u, weight_row(u, e, n), scale_row(u, u.scales, e, n),
                          scale_row(u, u.biases, e, n), K, acc2, 0, 1);
    const float v2 = warp_sum(acc2[0]);
    if ((threadIdx.x & 31) == 0) y[r * ldy + n] = activate(act, v) * v2;
  } else {
    if ((threadIdx.x & 31) == 0) y[r * ldy + n] = v;
  }
}

__global__ void dequantize_kernel(Weight w, int64_t n0, int64_t n, int64_t K, float* out) {
  pdl_begin();
  const int64_t total = n * K;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / K, k = i % K;
    const void* row = weight_row(w, 0, n0 + r);
    if (!w.bits) {
      out[i] = load(w.type, row, k);
    } else {
      const int per = 32 / w.bits;
      const uint32_t word = static_cast<const uint32_t*>(row)[k / per];
      const uint32_t q = (word >> ((k % per) * w.bits)) & ((1u << w.bits) - 1u);
      const int64_t g = k / w.group;
      out[i] = load(w.scale_type, scale_row(w, w.scales, 0, n0 + r), g) * static_cast<float>(q) +
               load(w.scale_type, scale_row(w, w.biases, 0, n0 + r), g);
    }
  }
}

// ---------------------------------------------------------------- embedding, norms, rope

__global__ void embedding_kernel(Weight table, int64_t V, int64_t D, const int32_t* ids, float scale, float* out,
                                 int64_t ldo, int* bad_id) {
  pdl_begin();
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  float* o = out + i * ldo;
  if (id < 0 || id >= V) {
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) o[d] = 0.0f;
    if (threadIdx.x == 0) {
      bad_id[1] = id;
      atomicExch(bad_id, 1);
    }
    return;
  }
  const void* row = weight_row(table, 0, id);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float v;
    if (!table.bits) {
      v = load(table.type, row, d);
    } else {
      const int per = 32 / table.bits;
      const uint32_t word = static_cast<const uint32_t*>(row)[d / per];
      const uint32_t q = (word >> ((d % per) * table.bits)) & ((1u << table.bits) - 1u);
      const int64_t g = d / table.group;
      v = load(table.scale_type, scale_row(table, table.scales, 0, id), g) * static_cast<float>(q) +
          load(table.scale_type, scale_row(table, table.biases, 0, id), g);
    }
    o[d] = v * scale;
  }
}

// 1 / sqrt(mean(r²) + eps) of one row of D, summed by the whole block (every norm kernel sums the same way).
__device__ float inv_rms(const float* r, int64_t D, float eps, float* scratch) {
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss = __fmaf_rn(r[i], r[i], ss);
  ss = block_sum(ss, scratch);
  return 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
}

// y = x · inv (· w): a normed row, by the whole block.
__device__ __forceinline__ void normed_row(const float* x, float inv, const float* w, int64_t D, float* y) {
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) y[i] = w ? x[i] * inv * w[i] : x[i] * inv;
}

// One rope pair (x0, x1) turned by the angle of sine sn and cosine c, each product and sum rounded on its own (no
// contraction the compiler could choose differently where it is inlined): every rope path calls it, so that the
// fused ropes and rope_kernel agree bit for bit.
__device__ __forceinline__ float2 rotate_pair(float x0, float x1, float c, float sn) {
  return make_float2(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn)), __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, sn)));
}

// A row of the norm kernels held in registers: thread t holds elements t + k·blockDim.x (k < kRowRegs), all loaded
// at once, so that a row costs one memory round trip instead of one per pass (a one-row launch is bound by those
// round trips). Rows longer than kRowRegs·blockDim.x take inv_rms and normed_row; both sum a row's squares in the
// same order, so a row has the same bits either way.
constexpr int kRowRegs = 12;
__device__ __forceinline__ bool row_held(int64_t D) { return D <= kRowRegs * static_cast<int64_t>(blockDim.x); }
__device__ __forceinline__ int64_t held_index(int k) { return threadIdx.x + k * static_cast<int64_t>(blockDim.x); }
__device__ __forceinline__ void load_held(const float* r, int64_t D, float (&v)[kRowRegs]) {
#pragma unroll
  for (int k = 0; k < kRowRegs; k++) v[k] = held_index(k) < D ? r[held_index(k)] : 0.0f;
}
// inv_rms of a held row.
__device__ __forceinline__ float inv_rms_held(const float (&v)[kRowRegs], int64_t D, float eps, float* scratch) {
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kRowRegs; k++)
    if (held_index(k) < D) ss = __fmaf_rn(v[k], v[k], ss);
  ss = block_sum(ss, scratch);
  return 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
}
// y = x · inv (· w) (· sc) from a held row: normed_row's products, then the scale (rms_norm_many's outputs).
__device__ __forceinline__ void normed_held(const float (&v)[kRowRegs], float inv, const float* w, int64_t D,
                                            float* y, float sc = 1.0f) {
#pragma unroll
  for (int k = 0; k < kRowRegs; k++) {
    const int64_t i = held_index(k);
    if (i >= D) continue;
    const float u = w ? __fmul_rn(__fmul_rn(v[k], inv), w[i]) : __fmul_rn(v[k], inv);
    y[i] = sc != 1.0f ? __fmul_rn(u, sc) : u;
  }
}
// y = rms_norm(x)·(w or 1), one row of D by the whole block: held where it fits (its weights asked for before the
// sum's reduction), else inv_rms and normed_row. y may be x.
__device__ __forceinline__ void norm_row(const float* x, const float* w, int64_t D, float eps, float* y,
                                         float* scratch) {
  if (!row_held(D)) {
    normed_row(x, inv_rms(x, D, eps, scratch), w, D, y);
    return;
  }
  float v[kRowRegs], wv[kRowRegs];
  load_held(x, D, v);
  if (w) load_held(w, D, wv);
  const float inv = inv_rms_held(v, D, eps, scratch);
#pragma unroll
  for (int k = 0; k < kRowRegs; k++) {
    const int64_t i = held_index(k);
    if (i < D) y[i] = w ? v[k] * inv * wv[k] : v[k] * inv;
  }
}

// The cache slot of position p (a ring's slot, or p itself), or -1 after flagging a position that has none: the
// first bad position goes to bad[1] and bad[0] is set (the backend checks it after the op).
__device__ __forceinline__ int64_t kv_slot(int32_t p, int64_t C, bool ring, int* bad) {
  if (p < 0 || (!ring && p >= C)) {
    if (threadIdx.x == 0) {
      bad[1] = p;
      atomicExch(bad, 1);
    }
    return -1;
  }
  return ring ? p % C : p;
}

__global__ void __launch_bounds__(512) rms_norm_kernel(const float* x, int64_t ldx, const float* w, int64_t D,
                                                       float eps, float* y, int64_t ldy) {
  pdl_begin();
  __shared__ float scratch[32];
  norm_row(x + blockIdx.x * ldx, w, D, eps, y + blockIdx.x * ldy, scratch);
}

// A pre-norm residual step, one row per block of rms_norm_kernel's size: the sum is written, then normed by
// the same functions (each thread reads back the elements it wrote only after the barrier; the sum of squares
// reads them all), so n has the bits of add then rms_norm.
__global__ void __launch_bounds__(512) add_norm_kernel(const float* x, const float* f, const float* w,
                                                       int64_t D, float eps, float* y, float* n) {
  pdl_begin();
  __shared__ float scratch[32];
  const int64_t o = blockIdx.x * D;
  if (row_held(D)) {
    float v[kRowRegs];
#pragma unroll
    for (int k = 0; k < kRowRegs; k++) {
      const int64_t i = held_index(k);
      v[k] = i < D ? __fadd_rn(x[o + i], f[o + i]) : 0.0f;
      if (i < D) y[o + i] = v[k];
    }
    normed_held(v, inv_rms_held(v, D, eps, scratch), w, D, n + o);
    return;
  }
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) y[o + i] = x[o + i] + f[o + i];
  __syncthreads();
  normed_row(y + o, inv_rms(y + o, D, eps, scratch), w, D, n + o);
}

// One row of a residual norm per block of kNormThreads (see residual_norm_row). Before its wait on the kernel
// before, the block asks L2 for the residual row and the norm weights (a prefetch reads nothing into registers, so
// it is safe whatever is still being written), and the row's loads after the wait find them there.
template <int Held, bool Parts = false>
__global__ void add_rms_norm_kernel(const float* x, const float* f, const float* w, int64_t D, float eps, float s,
                                    float* y, const float* w2, float* n, int64_t fp) {
  if (g_norm_prefetch_on)
    for (int64_t i = threadIdx.x * 32; i < D; i += blockDim.x * 32) {  // a 128-byte line per thread
      asm volatile("prefetch.global.L2 [%0];" ::"l"(x + blockIdx.x * D + i));
      if (w) asm volatile("prefetch.global.L2 [%0];" ::"l"(w + i));
      if (n && w2) asm volatile("prefetch.global.L2 [%0];" ::"l"(w2 + i));
    }
  pdl_begin();
  __shared__ float scratch[32];
  const int64_t b = blockIdx.x;
  residual_norm_row<Held, Parts>(x + b * D, f + b * D, w, D, eps, s, y + b * D, w2, n ? n + b * D : nullptr, scratch,
                                 fp);
}

// rms_norm_kernel over one head row [D] of x [T, H, D], then rope_kernel's rotation of its pairs, in one block (the
// row waits in shared memory, D floats, between the two); for up to three tensors of one T and D, a block per
// (tensor, row, head) (rms_norm_rope launches it for one). A tensor without rope is only normed, with
// rms_norm_kernel's arithmetic.
constexpr int kRowHeld = 4;  // elements per thread that rms_norm_rope_many_kernel keeps in registers

__global__ void rms_norm_rope_many_kernel(const NormRopeJob j, const int32_t* pos, const float* f, int64_t n,
                                          bool interleaved) {
  pdl_begin();
  __shared__ float scratch[32];
  extern __shared__ float row[];
  int g = 0;
  int64_t b = blockIdx.x;
  while (g + 1 < j.count && b >= j.T * j.H[g]) b -= j.T * j.H[g++];
  const int64_t D = j.D;
  const float* xr = j.x[g] + b * D;
  const float* w = j.w[g];
  float* yr = j.y[g] + b * D;
  if (j.cache[g]) {  // a cache append's row: to its slot, as kv_write_kernel places it
    const int64_t t = b / j.H[g], h = b % j.H[g];
    const int32_t p = pos[t];
    const int64_t slot = kv_slot(p, j.C, j.ring, j.bad);
    if (slot < 0) return;
    yr = j.cache[g] + (slot * j.H[g] + h) * D;
    if (g == j.marks && h == 0 && threadIdx.x == 0) j.slot_pos[slot] = p;
  }
  const bool rope = j.rope[g];
  auto rotate = [&](int64_t i, float sn, float c) {
    const int64_t a = interleaved ? 2 * i : i, e = interleaved ? 2 * i + 1 : i + D / 2;
    const float2 r = rotate_pair(row[a], row[e], c, sn);
    row[a] = r.x;
    row[e] = r.y;
  };
  if (D <= kRowHeld * blockDim.x) {
    // The row, its weights, and the rotation's angles are all asked for at once (one memory round trip, the angles
    // computed while the sum of squares is reduced); the same arithmetic as the general path below.
    float xv[kRowHeld], wv[kRowHeld], sn[kRowHeld / 2], cs[kRowHeld / 2];
#pragma unroll
    for (int k = 0; k < kRowHeld; k++) {
      const int64_t i = threadIdx.x + k * blockDim.x;
      xv[k] = i < D ? xr[i] : 0.0f;
      wv[k] = i < D && w ? w[i] : 1.0f;
    }
    if (rope) {
      const float p = static_cast<float>(pos[b / j.H[g]]);
#pragma unroll
      for (int k = 0; k < kRowHeld / 2; k++) {
        const int64_t i = threadIdx.x + k * blockDim.x;
        if (i < n) sincosf(p * f[i], &sn[k], &cs[k]);
      }
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowHeld; k++)
      if (threadIdx.x + k * blockDim.x < D) ss = __fmaf_rn(xv[k], xv[k], ss);
    const float inv = 1.0f / sqrtf(block_sum(ss, scratch) / static_cast<float>(D) + j.eps);
    float* out = rope ? row : yr;
#pragma unroll
    for (int k = 0; k < kRowHeld; k++) {
      const int64_t i = threadIdx.x + k * blockDim.x;
      if (i < D) out[i] = w ? xv[k] * inv * wv[k] : xv[k] * inv;
    }
    if (!rope) return;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kRowHeld / 2; k++) {
      const int64_t i = threadIdx.x + k * blockDim.x;
      if (i < n) rotate(i, sn[k], cs[k]);
    }
  } else {
    if (!rope) {
      norm_row(xr, w, D, j.eps, yr, scratch);
      return;
    }
    norm_row(xr, w, D, j.eps, row, scratch);
    __syncthreads();
    const float p = static_cast<float>(pos[b / j.H[g]]);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float sn, c;
      sincosf(p * f[i], &sn, &c);
      rotate(i, sn, c);
    }
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = row[i];
}

// Multi-head latent attention's entries and rotated query parts (see latent_entry in kernels.h), two blocks per
// token of rms_norm_kernel's width (R = 2n: every rotary column is rotated): block (t, 0) norms the latent with
// inv_rms / normed_row straight into the cache slot and rotates the shared key beside it (rope_kernel's
// arithmetic); block (t, 1) rotates every query head's part.
__global__ void latent_entry_kernel(const LatentEntryArgs a) {
  pdl_begin();
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const float p = static_cast<float>(a.pos[t]);
  const int64_t R = a.R;
  auto pair = [&](int64_t i, int64_t* x0, int64_t* x1) {
    *x0 = a.interleaved ? 2 * i : i;
    *x1 = a.interleaved ? 2 * i + 1 : i + R / 2;
  };
  if (blockIdx.y == 0) {
    const int32_t sp = a.slot_pos_of[t];
    const int64_t slot = kv_slot(sp, a.C, a.ring, a.bad);
    if (slot < 0) return;
    const float* xr = a.kv + t * a.ldkv;
    float* e = a.keys + slot * (a.L + R);
    norm_row(xr, a.w, a.L, a.eps, e, scratch);
    for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
      float sn, c;
      sincosf(p * a.inv_freq[i], &sn, &c);
      int64_t i0, i1;
      pair(i, &i0, &i1);
      const float2 r = rotate_pair(xr[a.L + i0], xr[a.L + i1], c, sn);
      e[a.L + i0] = r.x;
      e[a.L + i1] = r.y;
    }
    if (threadIdx.x == 0) a.slot_pos[slot] = sp;
    return;
  }
  for (int64_t idx = threadIdx.x; idx < a.H * a.n; idx += blockDim.x) {
    const int64_t h = idx / a.n, i = idx % a.n;
    float sn, c;
    sincosf(p * a.inv_freq[i], &sn, &c);
    int64_t i0, i1;
    pair(i, &i0, &i1);
    const float* qr = a.q + t * a.sqT + h * a.sqH;
    float* o = a.q_out + t * a.soT + h * a.soH;
    const float2 r = rotate_pair(qr[i0], qr[i1], c, sn);
    o[i0] = r.x;
    o[i1] = r.y;
  }
}

__global__ void rope_kernel(float* x, int64_t T, int64_t H, int64_t D, int64_t sT, int64_t sH, const int32_t* pos,
                            const float* f, int64_t n, bool interleaved) {
  pdl_begin();
  const int64_t total = T * H * n;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % n, h = (idx / n) % H, t = idx / (n * H);
    float s, c;
    sincosf(static_cast<float>(pos[t]) * f[i], &s, &c);
    float* v = x + t * sT + h * sH;
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + D / 2;
    const float2 r = rotate_pair(v[a], v[b], c, s);
    v[a] = r.x;
    v[b] = r.y;
  }
}

// ---------------------------------------------------------------- attention

constexpr int kAttnWarps = 16;
constexpr int kAccPerLane = kMaxAttentionDv / 32;

// One block per (query, head): each of 16 warps streams its share of the keys with an online softmax, then the
// warps merge.
// The splits of one (query, head) merged into its output: their (max, denominator, numerators) rows in `part`,
// read from L2 (other blocks wrote them). Each split's weight is taken once, by one thread; the numerators' loads
// over the splits are independent, so they overlap.
__device__ void merge_splits(const AttentionArgs& a, const float* part, int splits, int64_t t, int64_t h) {
  __shared__ float wts[kAttentionCounters], dens[kAttentionCounters];
  __shared__ float red[32];
  const int64_t row = a.Dv + 2;
  // Each split's max and denominator in one round of loads; then its weight, by the thread that loaded it.
  float m = -INFINITY;
  for (int i = threadIdx.x; i < splits; i += blockDim.x) {
    const float mi = __ldcg(part + i * row), li = __ldcg(part + i * row + 1);
    wts[i] = mi;
    dens[i] = li;
    m = fmaxf(m, mi);
  }
  const float M = block_max(m, red);
  float den = 0.0f;
  for (int i = threadIdx.x; i < splits; i += blockDim.x) {
    const float mi = wts[i];
    const float wi = mi == -INFINITY ? 0.0f : expf(mi - M);
    wts[i] = wi;
    if (mi != -INFINITY) den += wi * dens[i];
  }
  den = block_sum(den, red);  // its barriers also publish wts
  float* o = a.out + t * a.soT + h * a.soH;
  for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) {
    if (M == -INFINITY) {
      o[d] = 0.0f;
      continue;
    }
    // Sixteen splits' loads at a time, then their terms in order (a short run of splits is one round trip too).
    float num = 0.0f;
    for (int i0 = 0; i0 < splits; i0 += 16) {
      float v[16];
#pragma unroll
      for (int u = 0; u < 16; u++) v[u] = i0 + u < splits ? __ldcg(part + (i0 + u) * row + 2 + d) : 0.0f;
#pragma unroll
      for (int u = 0; u < 16; u++)
        if (i0 + u < splits) num += wts[i0 + u] * v[u];
    }
    o[d] = num / den;
  }
}

// Called by every thread of a split's block once the block's (max, denominator, numerators) row is in `partial`:
// the block is counted once its row is visible, and the last split of this (query, head) to finish merges them all
// and zeroes the counter for the next launch.
__device__ void finish_split(const AttentionArgs& a, const float* partial, unsigned* counters, int64_t t, int64_t h) {
  __shared__ unsigned ticket;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    ticket = atomicAdd(counters + blockIdx.x, 1u);
  }
  __syncthreads();
  if (ticket != gridDim.y - 1) return;
  __threadfence();
  merge_splits(a, partial + static_cast<int64_t>(blockIdx.x) * gridDim.y * (a.Dv + 2), gridDim.y, t, h);
  if (threadIdx.x == 0) counters[blockIdx.x] = 0u;
}

// With gridDim.y > 1 (splits of the keys, for few queries over many keys), each block handles one split and leaves
// (max, denominator, numerators) in `partial`; the last of a (query, head)'s splits to finish merges them.
__global__ void __launch_bounds__(32 * kAttnWarps, 2) attention_kernel(AttentionArgs a, float* partial,
                                                                       unsigned* counters) {
  pdl_begin();
  extern __shared__ float smem[];
  float* qs = smem;                          // [D]
  float* accs = qs + a.D;                    // [warps][Dv]
  float* ms = accs + kAttnWarps * a.Dv;      // [warps]
  float* ls = ms + kAttnWarps;               // [warps]
  const int64_t t = blockIdx.x / a.Hq, h = blockIdx.x % a.Hq;
  const int64_t kh = h / (a.Hq / a.Hkv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* q = a.q + t * a.sqT + h * a.sqH;
  for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x) qs[d] = q[d];
  __syncthreads();
  const int32_t pq = a.q_pos[t];
  float m = -INFINITY, l = 0.0f;
  float acc[kAccPerLane];
#pragma unroll
  for (int j = 0; j < kAccPerLane; j++) acc[j] = 0.0f;
  const int64_t per_split = (a.S + gridDim.y - 1) / gridDim.y;
  const int64_t s_end = min(a.S, (blockIdx.y + 1) * per_split);
  // Each key costs one round trip to memory: its position is read one key ahead, and its key and value rows are
  // loaded together (when it is visible).
  const int64_t s0 = blockIdx.y * per_split + warp;
  int32_t pk_next = s0 < s_end ? a.k_pos[s0] : -1;
  for (int64_t s = s0; s < s_end; s += kAttnWarps) {
    const int32_t pk = pk_next;
    if (s + kAttnWarps < s_end) pk_next = a.k_pos[s + kAttnWarps];
    const bool visible = pk >= 0 && pk <= pq && (a.window <= 0 || pq - pk < a.window);
    if (!visible) continue;
    const float* kr = a.k + s * a.skS + kh * a.skH;
    const float* vr = a.v + s * a.svS + kh * a.svH;
    float vv[kAccPerLane];
#pragma unroll
    for (int j = 0; j < kAccPerLane; j++) {
      const int64_t d = lane + 32 * j;
      vv[j] = d < a.Dv ? vr[d] : 0.0f;
    }
    float dot = 0.0f;
#pragma unroll 8
    for (int64_t d = lane; d < a.D; d += 32) dot += qs[d] * kr[d];
    const float score = a.scale * warp_sum(dot);
    const float mn = fmaxf(m, score);
    const float c = expf(m - mn), p = expf(score - mn);
    l = l * c + p;
#pragma unroll
    for (int j = 0; j < kAccPerLane; j++) {
      const int64_t d = lane + 32 * j;
      if (d < a.Dv) acc[j] = acc[j] * c + p * vv[j];
    }
    m = mn;
  }
#pragma unroll
  for (int j = 0; j < kAccPerLane; j++) {
    const int64_t d = lane + 32 * j;
    if (d < a.Dv) accs[warp * a.Dv + d] = acc[j];
  }
  if (lane == 0) {
    ms[warp] = m;
    ls[warp] = l;
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; w++) M = fmaxf(M, ms[w]);
  if (gridDim.y > 1) {
    float* part = partial + (static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y) * (a.Dv + 2);
    for (int64_t d = threadIdx.x; d < a.Dv + 1; d += blockDim.x) {
      float num = 0.0f, den = 0.0f;
      for (int w = 0; w < kAttnWarps && M != -INFINITY; w++) {
        if (ms[w] == -INFINITY) continue;
        const float c = expf(ms[w] - M);
        if (d < a.Dv) num += c * accs[w * a.Dv + d];
        den += c * ls[w];
      }
      if (d < a.Dv)
        part[2 + d] = num;
      else
        part[1] = den;
    }
    if (threadIdx.x == 0) part[0] = M;
    finish_split(a, partial, counters, t, h);
    return;
  }
  float* o = a.out + t * a.soT + h * a.soH;
  for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) {
    if (M == -INFINITY) {
      o[d] = 0.0f;
      continue;
    }
    float num = 0.0f, den = 0.0f;
    for (int w = 0; w < kAttnWarps; w++) {
      if (ms[w] == -INFINITY) continue;
      const float c = expf(ms[w] - M);
      num += c * accs[w * a.Dv + d];
      den += c * ls[w];
    }
    o[d] = num / den;
  }
}


// Prefill attention: a block takes 16 queries of one head and walks the keys in tiles of BK (32, or 16 for head
// dims above 256) staged in shared memory, as flash attention does on CUDA cores: each thread scores 1-2
// (query, key) pairs of the tile from float4 rows, a group of BK threads takes each query's online-softmax step
// with shuffles, and each thread accumulates one or two value columns for all 16 queries. A tile no query of the
// block can see (later positions, outside the window, empty slots) is skipped before its keys are loaded.
constexpr int kTileQ = 16, kTileThreads = 256;

__device__ __forceinline__ float group_max(float v, int width) {
  for (int o = width / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float group_sum(float v, int width) {
  for (int o = width / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ bool key_visible(int32_t pk, int32_t pq, int window) {
  return pk >= 0 && pk <= pq && (window <= 0 || pq - pk < window);
}

// Decode and verification attention for head rows of whole float4s (D, Dv <= 128·N): one block of kDecodeWarps
// warps per (query, head, split), as attention_kernel, but each lane holds 4·N dims of the query in registers
// (no staging, no barrier before the keys), and a warp has the key and value rows of KB keys in flight at once,
// float4 by float4. The first batch's rows are asked for together with their positions; later batches know their
// positions from the batch before, so that empty slots and keys out of sight are never read. The warps then merge
// through shared memory, and the splits as in attention_kernel. Every order of summation depends on the head dims,
// the slots and the split only, never on the query count.
//
// Over a short run of slots (a sliding window, a short context) the splits of a (query, head) form one thread block
// cluster instead (`Cluster`): each block leaves its (max, denominator, numerators) in its own shared memory, and
// after one cluster barrier every block merges a slice of the value dims from all of them through distributed
// shared memory. That takes the fence, the counter's atomic and the last block's reloads from L2 out of the
// kernel's chain (about a tenth of its time on a sliding layer of 528 slots; the rest is the blocks' own steps).
constexpr int kDecodeWarps = 4;
constexpr int kClusterSplits = 8;  // the portable cluster size

//
// Lean (verification's launches of head rows up to 256 dims): half the keys in flight per warp and registers capped
// at 64, so that a launch of several queries' blocks fits twice as many of them on an SM. A warp still takes its
// keys in the same order, one online-softmax step after another, so each query gets the bits a decode launch
// computes for it.
template <int N, int W, bool Cluster, bool Lean>
__device__ __forceinline__ void attention_decode(const AttentionArgs& a, float* partial, unsigned* counters) {
  constexpr int KB = (N <= 2 ? 4 : 2) / (Lean ? 2 : 1);  // keys in flight per warp
  __shared__ float4 accs[W][32 * N];
  __shared__ float ms[W], ls[W];
  pdl_begin();
  const int64_t t = blockIdx.x / a.Hq, h = blockIdx.x % a.Hq;
  const int64_t kh = h / (a.Hq / a.Hkv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t pq = a.q_pos[t];
  const int64_t per_split = (a.S + gridDim.y - 1) / gridDim.y;
  const int64_t s_begin = blockIdx.y * per_split, s_end = min(a.S, s_begin + per_split);
  const float* q = a.q + t * a.sqT + h * a.sqH;
  float4 qv[N];
#pragma unroll
  for (int j = 0; j < N; j++) {
    const int64_t d = 4 * (lane + 32 * j);
    qv[j] = d < a.D ? make_float4(q[d], q[d + 1], q[d + 2], q[d + 3]) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  float m = -INFINITY, l = 0.0f;
  float4 acc[N];
#pragma unroll
  for (int j = 0; j < N; j++) acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  constexpr int step = W * KB;  // keys of a batch over the block's warps
  int32_t pk[KB];
#pragma unroll
  for (int i = 0; i < KB; i++) {
    const int64_t s = s_begin + warp + W * i;
    pk[i] = s < s_end ? a.k_pos[s] : -1;
  }
  auto batch = [&](int64_t s0, auto first_batch) {
    constexpr bool first = decltype(first_batch)::value;
    float4 kr[KB][N], vr[KB][N];
    bool vis[KB];
#pragma unroll
    for (int i = 0; i < KB; i++) {
      const int64_t s = s0 + W * i;
      vis[i] = s < s_end && key_visible(pk[i], pq, a.window);
      // The first batch reads its rows without waiting for the positions (every slot below S is memory).
      const bool read = first ? s < s_end : vis[i];
      const float4* kp = reinterpret_cast<const float4*>(a.k + s * a.skS + kh * a.skH);
      const float4* vp = reinterpret_cast<const float4*>(a.v + s * a.svS + kh * a.svH);
#pragma unroll
      for (int j = 0; j < N; j++) {
        const int64_t d4 = lane + 32 * j;
        kr[i][j] = read && 4 * d4 < a.D ? kp[d4] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        vr[i][j] = read && 4 * d4 < a.Dv ? vp[d4] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
    // The next batch's positions, while this one is summed.
#pragma unroll
    for (int i = 0; i < KB; i++) {
      const int64_t s = s0 + step + W * i;
      pk[i] = s < s_end ? a.k_pos[s] : -1;
    }
    float dot[KB];
#pragma unroll
    for (int i = 0; i < KB; i++) {
      float d = 0.0f;
#pragma unroll
      for (int j = 0; j < N; j++)
        d += qv[j].x * kr[i][j].x + qv[j].y * kr[i][j].y + qv[j].z * kr[i][j].z + qv[j].w * kr[i][j].w;
      dot[i] = d;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int i = 0; i < KB; i++) dot[i] += __shfl_xor_sync(0xffffffffu, dot[i], o);
#pragma unroll
    for (int i = 0; i < KB; i++) {
      if (!vis[i]) continue;
      const float score = a.scale * dot[i];
      const float mn = fmaxf(m, score);
      const float c = expf(m - mn), p = expf(score - mn);
      l = l * c + p;
#pragma unroll
      for (int j = 0; j < N; j++) {
        acc[j].x = acc[j].x * c + p * vr[i][j].x;
        acc[j].y = acc[j].y * c + p * vr[i][j].y;
        acc[j].z = acc[j].z * c + p * vr[i][j].z;
        acc[j].w = acc[j].w * c + p * vr[i][j].w;
      }
      m = mn;
    }
  };
  if (s_begin + warp < s_end) batch(s_begin + warp, std::true_type{});
  for (int64_t s0 = s_begin + warp + step; s0 < s_end; s0 += step) batch(s0, std::false_type{});
#pragma unroll
  for (int j = 0; j < N; j++) accs[warp][lane + 32 * j] = acc[j];
  if (lane == 0) {
    ms[warp] = m;
    ls[warp] = l;
  }
  __syncthreads();
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < W; w++) M = fmaxf(M, ms[w]);
  float c[W], den = 0.0f;
#pragma unroll
  for (int w = 0; w < W; w++) {
    c[w] = ms[w] == -INFINITY ? 0.0f : expf(ms[w] - M);
    den += c[w] * ls[w];
  }
  const float* accf = reinterpret_cast<const float*>(accs);
  auto numerator = [&](int64_t d) {
    float num = 0.0f;
#pragma unroll
    for (int w = 0; w < W; w++) num += c[w] * accf[w * 128 * N + d];
    return num;
  };
  if constexpr (Cluster) {
    // This block's row, then the cluster's: block r of the cluster writes value dims [r·per, (r+1)·per), summing
    // the splits in order 0, 1, ... from each block's shared memory.
    __shared__ float part[kMaxAttentionDv];
    __shared__ float part_m, part_l;
    for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) part[d] = M == -INFINITY ? 0.0f : numerator(d);
    if (threadIdx.x == 0) {
      part_m = M;
      part_l = M == -INFINITY ? 0.0f : den;
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int R = static_cast<int>(gridDim.y);  // the cluster spans the splits
    float mr[kClusterSplits], lr[kClusterSplits];
#pragma unroll
    for (int r = 0; r < kClusterSplits; r++) {
      mr[r] = r < R ? *cluster.map_shared_rank(&part_m, r) : -INFINITY;
      lr[r] = r < R ? *cluster.map_shared_rank(&part_l, r) : 0.0f;
    }
    float Mc = -INFINITY;
#pragma unroll
    for (int r = 0; r < kClusterSplits; r++) Mc = fmaxf(Mc, mr[r]);
    float dc = 0.0f;
#pragma unroll
    for (int r = 0; r < kClusterSplits; r++) {
      mr[r] = mr[r] == -INFINITY ? 0.0f : expf(mr[r] - Mc);  // each split's weight
      dc += mr[r] * lr[r];
    }
    const int64_t per = (a.Dv + R - 1) / R, d_end = min(a.Dv, (blockIdx.y + 1) * per);
    float* o = a.out + t * a.soT + h * a.soH;
    for (int64_t d = blockIdx.y * per + threadIdx.x; d < d_end; d += blockDim.x) {
      float v[kClusterSplits];
#pragma unroll
      for (int r = 0; r < kClusterSplits; r++) v[r] = r < R ? cluster.map_shared_rank(part, r)[d] : 0.0f;
      float num = 0.0f;
#pragma unroll
      for (int r = 0; r < kClusterSplits; r++)
        if (r < R) num += mr[r] * v[r];
      o[d] = Mc == -INFINITY ? 0.0f : num / dc;
    }
    cluster.sync();  // no block leaves while another still reads its shared memory
    return;
  } else {
    if (gridDim.y > 1) {
      float* part = partial + (static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y) * (a.Dv + 2);
      for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) part[2 + d] = M == -INFINITY ? 0.0f : numerator(d);
      if (threadIdx.x == 0) {
        part[0] = M;
        part[1] = M == -INFINITY ? 0.0f : den;
      }
      finish_split(a, partial, counters, t, h);
      return;
    }
    float* o = a.out + t * a.soT + h * a.soH;
    for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) o[d] = M == -INFINITY ? 0.0f : numerator(d) / den;
  }
}

template <int N, int W = kDecodeWarps, bool Cluster = false>
__global__ void __launch_bounds__(32 * W) attention_decode_kernel(AttentionArgs a, float* partial, unsigned* counters) {
  attention_decode<N, W, Cluster, false>(a, partial, counters);
}
template <int N, int W, bool Cluster>
__global__ void __launch_bounds__(32 * W, 32 / W) attention_decode_lean_kernel(AttentionArgs a, float* partial,
                                                                              unsigned* counters) {
  attention_decode<N, W, Cluster, true>(a, partial, counters);
}

// Decode and verification attention by groups of query heads over long caches: one block of kGroupWarps warps per
// (query, key head, split of the slots) computes the G query heads that share the key head, so that each key and
// value row is read once per query instead of once per query head (the per-head kernel reads it G times, from L2
// after the first, and over tens of thousands of slots that traffic is what bounds it). Warp w owns dims
// [w·32P, (w+1)·32P) of the keys and values (P = 1 for head rows of 256, 2 for 512), P consecutive dims a lane.
// Keys come in tiles of KT = 32 / G: a lane multiplies its dims of the G queries with the tile's keys (G·KT = 32
// partial products), the warp sums them by halving (after five exchanges each lane holds the warp's sum of one
// (head, key) pair: the lane's index), the warps' sums meet in shared memory and every warp adds them in the same
// order, so that all warps agree on each score. Each lane then takes its head's online-softmax step for the tile
// (the KT lanes of a head together) and every warp accumulates its dims of the values for all G heads. The next
// tile's rows are loaded while this one is summed; keys no query can see are never loaded, and tiles without any
// are skipped. Each split leaves (max, denominator, numerators) per head for attention_group_merge_kernel. The
// split depends on the key heads and slots only, so a query verified among others gets the bits it gets alone.
constexpr int kGroupWarps = 8;
constexpr int kGroupMaxSplitKeys = 32 * kGroupWarps;  // a split's positions: one per thread

template <int H>
__device__ __forceinline__ void halve_sums(float (&v)[32], int lane) {
  // Lanes with bit H keep the upper H values and add their partner's; the others the lower ones.
  const bool upper = lane & H;
#pragma unroll
  for (int i = 0; i < H; i++) {
    const float send = upper ? v[i] : v[i + H];
    const float keep = upper ? v[i + H] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, H);
  }
}

template <int P, int G>
__global__ void __launch_bounds__(32 * kGroupWarps, 2) attention_group_kernel(AttentionArgs a, float* partial,
                                                                            int split_keys) {
  constexpr int KT = 32 / G;
  __shared__ float red[2][kGroupWarps][32];
  __shared__ uint32_t vis_bits[kGroupMaxSplitKeys / 32];
  pdl_begin();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = blockIdx.x / a.Hkv, kh = blockIdx.x % a.Hkv;
  const int64_t s_begin = static_cast<int64_t>(blockIdx.y) * split_keys, s_end = min(a.S, s_begin + split_keys);
  const int32_t pq = a.q_pos[t];
  {
    const int64_t s = s_begin + threadIdx.x;
    const bool vis = s < s_end && key_visible(a.k_pos[s], pq, a.window);
    const unsigned bits = __ballot_sync(0xffffffffu, vis);
    if (lane == 0) vis_bits[warp] = bits;
  }
  const int64_t d0 = static_cast<int64_t>(warp) * 32 * P + lane * P;
  float q[G][P], acc[G][P];
#pragma unroll
  for (int r = 0; r < G; r++)
#pragma unroll
    for (int p = 0; p < P; p++) {
      q[r][p] = a.q[t * a.sqT + (kh * G + r) * a.sqH + d0 + p];
      acc[r][p] = 0.0f;
    }
  __syncthreads();
  auto tile_bits = [&](int j0) { return (vis_bits[j0 >> 5] >> (j0 & 31)) & ((1u << KT) - 1u); };
  auto load_tile = [&](int j0, float (&kt)[KT][P], float (&vt)[KT][P]) {
    const uint32_t bits = tile_bits(j0);
#pragma unroll
    for (int j = 0; j < KT; j++) {
      const bool ok = (bits >> j) & 1u;
      const int64_t s = s_begin + j0 + j;
      const float* kp = a.k + s * a.skS + kh * a.skH + d0;
      const float* vp = a.v + s * a.svS + kh * a.svH + d0;
      if constexpr (P == 2) {
        const float2 kv = ok ? *reinterpret_cast<const float2*>(kp) : make_float2(0.0f, 0.0f);
        const float2 vv = ok ? *reinterpret_cast<const float2*>(vp) : make_float2(0.0f, 0.0f);
        kt[j][0] = kv.x;
        kt[j][1] = kv.y;
        vt[j][0] = vv.x;
        vt[j][1] = vv.y;
      } else {
        kt[j][0] = ok ? kp[0] : 0.0f;
        vt[j][0] = ok ? vp[0] : 0.0f;
      }
    }
  };
  // This lane's head (lane / KT) and key of the tile (lane % KT); its head's running max and denominator.
  const int my_key = lane % KT;
  float m = -INFINITY, l = 0.0f;
  const int n_keys = static_cast<int>(s_end - s_begin), tiles = (n_keys + KT - 1) / KT;
  float kc[KT][P], vc[KT][P], kn[KT][P], vn[KT][P];
  if (tiles > 0) load_tile(0, kc, vc);
  int buf = 0;
  for (int i = 0; i < tiles; i++) {
    if (i + 1 < tiles) load_tile((i + 1) * KT, kn, vn);
    const uint32_t bits = tile_bits(i * KT);
    if (bits) {
      float v[32];
#pragma unroll
      for (int r = 0; r < G; r++)
#pragma unroll
        for (int j = 0; j < KT; j++) {
          float d = 0.0f;
#pragma unroll
          for (int p = 0; p < P; p++) d += q[r][p] * kc[j][p];
          v[r * KT + j] = d;
        }
      halve_sums<16>(v, lane);
      halve_sums<8>(v, lane);
      halve_sums<4>(v, lane);
      halve_sums<2>(v, lane);
      halve_sums<1>(v, lane);
      red[buf][warp][lane] = v[0];
      __syncthreads();
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kGroupWarps; w++) sum += red[buf][w][lane];
      buf ^= 1;
      const bool vis = (bits >> my_key) & 1u;
      const float score = vis ? a.scale * sum : -INFINITY;
      float mt = score;
#pragma unroll
      for (int o = KT / 2; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
      const float mn = fmaxf(m, mt);  // finite: the tile has a visible key, for every head alike
      const float c = m == -INFINITY ? 0.0f : expf(m - mn);
      const float pr = vis ? expf(score - mn) : 0.0f;
      float ps = pr;
#pragma unroll
      for (int o = KT / 2; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
      l = l * c + ps;
      m = mn;
#pragma unroll
      for (int r = 0; r < G; r++) {
        const float cr = __shfl_sync(0xffffffffu, c, r * KT);
#pragma unroll
        for (int p = 0; p < P; p++) acc[r][p] *= cr;
#pragma unroll
        for (int j = 0; j < KT; j++) {
          const float pj = __shfl_sync(0xffffffffu, pr, r * KT + j);
#pragma unroll
          for (int p = 0; p < P; p++) acc[r][p] += pj * vc[j][p];
        }
      }
    }
    if (i + 1 < tiles)
#pragma unroll
      for (int j = 0; j < KT; j++)
#pragma unroll
        for (int p = 0; p < P; p++) {
          kc[j][p] = kn[j][p];
          vc[j][p] = vn[j][p];
        }
  }
  const int64_t row = a.Dv + 2;
#pragma unroll
  for (int r = 0; r < G; r++) {
    float* part = partial + ((t * a.Hq + kh * G + r) * gridDim.y + blockIdx.y) * row;
#pragma unroll
    for (int p = 0; p < P; p++) part[2 + d0 + p] = acc[r][p];
    if (warp == 0 && lane == r * KT) {
      part[0] = m;
      part[1] = l;
    }
  }
}

// The splits of attention_group_kernel merged: a block per (query, head, 32 value dims), its 8 warps taking every
// 8th split (eight splits' loads at a time), then adding their sums in warp order.
__global__ void __launch_bounds__(256) attention_group_merge_kernel(AttentionArgs a, const float* partial,
                                                                    int splits) {
  __shared__ float red[32];
  __shared__ float nums[8][32], dens[8];
  pdl_begin();
  const int64_t qh = blockIdx.x, t = qh / a.Hq, h = qh % a.Hq, row = a.Dv + 2;
  const float* part = partial + qh * splits * row;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < splits; i += blockDim.x) mx = fmaxf(mx, __ldcg(part + i * row));
  const float M = block_max(mx, red);
  const int grp = threadIdx.x >> 5, dl = threadIdx.x & 31;
  const int64_t d = static_cast<int64_t>(blockIdx.y) * 32 + dl;
  float num = 0.0f, den = 0.0f;
  for (int i0 = grp; i0 < splits; i0 += 8 * 8) {
    float mi[8], li[8], ni[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const int i = i0 + 8 * u;
      const bool ok = i < splits;
      mi[u] = ok ? __ldcg(part + i * row) : -INFINITY;
      li[u] = ok ? __ldcg(part + i * row + 1) : 0.0f;
      ni[u] = ok && d < a.Dv ? __ldcg(part + i * row + 2 + d) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 8; u++) {
      if (mi[u] == -INFINITY) continue;
      const float w = expf(mi[u] - M);
      num += w * ni[u];
      den += w * li[u];
    }
  }
  nums[grp][dl] = num;
  if (dl == 0) dens[grp] = den;
  __syncthreads();
  if (grp != 0 || d >= a.Dv) return;
  float n = 0.0f, dn = 0.0f;
#pragma unroll
  for (int g = 0; g < 8; g++) {
    n += nums[g][dl];
    dn += dens[g];
  }
  a.out[t * a.soT + h * a.soH + d] = M == -INFINITY ? 0.0f : n / dn;
}


// ---------------------------------------------------------------- a prompt's attention on tensor cores

// x ≈ big + small, each a tf32: big is x rounded to 11 significant bits, small the exact rest x - big rounded to 11
// (each half away from zero, by adding half a tf32 unit to the bits and masking; x is finite). A product of two
// such pairs without its small·small term is within about 2^-21 of the f32 product, so three tf32 MMAs
// (small·big, big·small, big·big, summed in f32) stand in for f32 multiply-adds. Five integer and float
// instructions a value (the `cvt.rna.tf32.f32` conversion took about ten, with its checks for infinities, and was
// most of the kernel's).
__device__ __forceinline__ uint32_t round_tf32(uint32_t bits) { return (bits + 0x1000u) & 0xffffe000u; }
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  big = round_tf32(__float_as_uint(x));
  small = round_tf32(__float_as_uint(x - __uint_as_float(big)));
}
// d += a · b for one 16×8 (a, tf32, row-major) by 8×8 (b) tile, f32 accumulators.
__device__ __forceinline__ void mma_tf32_1688(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// big += a_big·b_big and cross += a_small·b_big + a_big·b_small, with a's parts given (ab, as) and b's two values
// split here (big and cross may be the same accumulators).
__device__ __forceinline__ void mma_3xtf32(float (&big)[4], float (&cross)[4], const uint32_t (&ab)[4],
                                           const uint32_t (&as)[4], float b0, float b1) {
  uint32_t bb0, bs0, bb1, bs1;
  split_tf32(b0, bb0, bs0);
  split_tf32(b1, bb1, bs1);
  mma_tf32_1688(cross, as, bb0, bb1);
  mma_tf32_1688(cross, ab, bs0, bs1);
  mma_tf32_1688(big, ab, bb0, bb1);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// The shape of a flash_tile_kernel launch: keys a step (BK: 32, 16 or 8), the query rows either kept as their two
// tf32 parts (split_q) or as f32, and the shared-memory row strides, chosen so that every fragment load is free of
// bank conflicts: ldq ≡ 16 (mod 32) for the float4 loads of query and key rows, ldv ≡ 4 for value columns read
// two keys apart, kFlashLdp ≡ 8 for the probabilities' float2 loads.
constexpr int kFlashThreads = 256, kFlashLdp = 40;
struct FlashShape {
  int BK = 0, split_q = 0, Dp = 0, ldq = 0, ldv = 0, ksplit = 0;
  size_t smem = 0;
};
__host__ __device__ inline FlashShape flash_shape(int64_t D, int64_t Dv, int BK, bool split_q) {
  FlashShape f;
  f.BK = BK;
  f.split_q = split_q;
  f.Dp = static_cast<int>((D + 15) / 16 * 16);
  f.ldq = f.Dp % 32 == 0 ? f.Dp + 16 : f.Dp;
  f.ldv = static_cast<int>((Dv + 31) / 32 * 32 + 4);
  f.ksplit = 8 / (BK / 8);
  const int64_t floats = (split_q ? 2 : 1) * kTileQ * f.ldq + int64_t{BK} * f.ldq + int64_t{BK} * f.ldv +
                         int64_t{f.ksplit} * kTileQ * kFlashLdp + 3 * kTileQ;
  f.smem = sizeof(float) * floats + sizeof(int32_t) * (2 * BK + kTileQ + 32);
  return f;
}
constexpr size_t kTileSmemMax = 110 * 1024;  // two blocks a multiprocessor
// One part of a split tile: 16 rows of unnormalised sums, then the 16 running maxima and the 16 denominators.
__host__ __device__ inline int64_t flash_part_floats(int64_t Dv) { return kTileQ * Dv + 2 * kTileQ; }
FlashShape flash_pick(const AttentionArgs& a) {
  const std::pair<int, bool> order[] = {{32, true}, {32, false}, {16, false}, {8, false}};
  for (const auto& [bk, sq] : order) {
    const FlashShape f = flash_shape(a.D, a.Dv, bk, sq);
    if (f.smem <= kTileSmemMax) return f;
  }
  return FlashShape{};
}

// A prompt's attention as attention_tile_kernel (tiles of 16 queries, in pairs with `paired`, steps of BK keys
// that no query of the tile sees skipped), but both products on the tensor cores in three tf32 parts, and the
// steps pipelined: while a step's scores are computed its value rows arrive (cp.async), and while its softmax and
// P·V run the next visible step's key rows arrive. A step: the scores S = Q·Kᵀ by 8 warps, BK/8 column blocks of
// 8 keys times 8/(BK/8) interleaved parts of the head dims (chunks of 16), each part's sums to shared memory; each
// query's online-softmax step by one warp (a lane a key, the parts added in order); then O += P·V, a warp per 8
// value columns (and every 8th after). Within a 16-dim chunk lane (g, t) holds dims 4t..4t+3 of its rows, the
// first two in the first MMA's k slots (t, t + 4) and the last two in the second's, the same for queries and
// keys, so each product is the right one; likewise keys 2t, 2t + 1 of each 8 for P·V. Every query's sums depend
// on the head dims and the key steps only, not on the tile.
//
// With `parts_out` (split mode: no pairs) the grid is (heads, items) and the tiles from `split_from` on, the ones
// that see the most keys, are split in two: part p takes the visible steps whose index is ≡ p (mod 2) and writes
// its unnormalised sums, running maxima and denominators to `parts_out` for flash_merge_kernel (merging them here,
// in the last part to finish, spilled registers in the loops). Items run longest first: the two parts of the last
// tile, of the one before, ..., then the unsplit tiles from the last down, so the blocks of a prompt shorter than
// two waves end together instead of the longest tiles running on alone.
__global__ void __launch_bounds__(kFlashThreads, 2)
    flash_tile_kernel(AttentionArgs a, FlashShape f, int paired, int64_t split_from, float* parts_out) {
  pdl_begin();
  extern __shared__ float4 smem4[];
  const int D = static_cast<int>(a.D), Dv = static_cast<int>(a.Dv), BK = f.BK, ldq = f.ldq, ldv = f.ldv;
  float* qb = reinterpret_cast<float*>(smem4);      // [16][ldq] query rows (big parts when split)
  float* qsm = qb + (f.split_q ? kTileQ * ldq : 0);  // [16][ldq] their small parts (split_q)
  float* ks = qsm + kTileQ * ldq;                    // [BK][ldq]
  float* vs = ks + BK * ldq;                         // [BK][ldv]
  float* sp = vs + BK * ldv;                         // [ksplit][16][kFlashLdp] scores by part; P in part 0's place
  float* ms = sp + f.ksplit * kTileQ * kFlashLdp;    // [16] running max
  float* ls = ms + kTileQ;                           // [16] running denominator
  float* cs = ls + kTileQ;                           // [16] this step's rescaling of the accumulators
  int32_t* kp = reinterpret_cast<int32_t*>(cs + kTileQ);  // [2][BK] key positions of this step and the next
  int32_t* qp = kp + 2 * BK;                               // [16]
  int32_t* seen = qp + kTileQ;                             // [32] which of the steps scanned together has a key seen
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const bool split_mode = parts_out != nullptr;
  const int64_t h = split_mode ? blockIdx.x : blockIdx.y, kh = h / (a.Hq / a.Hkv);
  const int64_t tiles = (a.T + kTileQ - 1) / kTileQ, nsplit = tiles - split_from;
  const bool rows4 = ((reinterpret_cast<uintptr_t>(a.k) | reinterpret_cast<uintptr_t>(a.v)) & 15) == 0 &&
                     ((a.skS | a.skH | a.svS | a.svH | Dv) & 3) == 0;
  int part = 0, parts = 1;  // this block's share of the tile's visible steps (split mode)
  // Head dims past D and value columns past Dv (up to the next 8) are read as zeros; loads never write them.
  for (int i = tid; i < BK * (f.Dp - D); i += kFlashThreads) ks[(i / (f.Dp - D)) * ldq + D + i % (f.Dp - D)] = 0.0f;
  const int Dv8 = (Dv + 7) / 8 * 8;
  for (int i = tid; i < BK * (Dv8 - Dv); i += kFlashThreads) vs[(i / (Dv8 - Dv)) * ldv + Dv + i % (Dv8 - Dv)] = 0.0f;
  const int nbs = BK / 8, sblock = warp % nbs, spart = warp / nbs, nbv = Dv8 / 8, scan = kFlashThreads / BK;
  // The first step from `from` with a key that a query of the tile sees (a.S if none), its key positions written
  // to `kpb`: 256 / BK steps' positions at a time, one a thread. Ends with a barrier.
  auto next_step = [&](int64_t from, int32_t* kpb, int nq) -> int64_t {
    for (int64_t base = from; base < a.S; base += int64_t{scan} * BK) {
      const int64_t s = base + tid;
      const int32_t pk = s < a.S ? a.k_pos[s] : -1;
      bool vis = false;
      for (int qi = 0; qi < nq; qi++) vis = vis || key_visible(pk, qp[qi], a.window);
      const unsigned ball = __ballot_sync(0xffffffffu, vis);
      const unsigned seg = BK == 32 ? ball : (ball >> (lane / BK * BK)) & ((1u << BK) - 1);
      if (lane % BK == 0) seen[tid / BK] = seg != 0 && (parts == 1 || ((base / BK + tid / BK) & 1) == part);
      __syncthreads();
      int first = scan;
      for (int j = 0; j < scan; j++)
        if (seen[j]) {
          first = j;
          break;
        }
      if (first < scan) {
        if (tid / BK == first) kpb[tid % BK] = pk;
        __syncthreads();
        return base + int64_t{first} * BK;
      }
      __syncthreads();  // `seen` is read before the next scan writes it
    }
    __syncthreads();  // (also when `from` is past the last key)
    return a.S;
  };
  auto load_rows = [&](float* dst, int ld, const float* src, int64_t sS, int64_t sH, int n, int64_t s0) {
    for (int j = warp; j < BK; j += kFlashThreads / 32) {
      const int64_t s = s0 + j;
      const bool in = s < a.S;
      const float* r = src + (in ? s : 0) * sS + kh * sH;
      if (rows4) {
        for (int d4 = lane; d4 < n / 4; d4 += 32) cp_async16(dst + j * ld + 4 * d4, r + 4 * d4, in);
      } else {
        for (int d = lane; d < n; d += 32) dst[j * ld + d] = in ? r[d] : 0.0f;
      }
    }
    cp_async_commit();
  };
  for (int pass = 0; pass < 1 + paired; pass++) {
    int64_t tile = pass == 0 ? blockIdx.x : tiles - 1 - blockIdx.x;
    if (split_mode) {
      const int64_t item = blockIdx.y;
      if (item < 2 * nsplit) {
        tile = tiles - 1 - item / 2;
        part = static_cast<int>(item % 2);
        parts = 2;
      } else {
        tile = tiles - 1 - nsplit - (item - 2 * nsplit);
      }
    }
    if (pass > 0 && tile <= blockIdx.x) break;  // the middle tile of an odd count, done in the first pass
    // (The first tile's outputs are written, and its last step is consumed, behind the barrier ending its loop.)
    const int64_t t0 = tile * kTileQ;
    const int nq = static_cast<int>(a.T - t0 < kTileQ ? a.T - t0 : kTileQ);
    for (int qi = warp; qi < kTileQ; qi += kFlashThreads / 32)
      for (int d = lane; d < f.Dp; d += 32) {
        const float x = qi < nq && d < D ? a.q[(t0 + qi) * a.sqT + h * a.sqH + d] : 0.0f;
        if (f.split_q) {
          uint32_t big, small;
          split_tf32(x, big, small);
          qb[qi * ldq + d] = __uint_as_float(big);
          qsm[qi * ldq + d] = __uint_as_float(small);
        } else {
          qb[qi * ldq + d] = x;
        }
      }
    if (tid < kTileQ) {
      qp[tid] = tid < nq ? a.q_pos[t0 + tid] : -1;  // a padding query sees nothing
      ms[tid] = -INFINITY;
      ls[tid] = 0.0f;
    }
    __syncthreads();  // the queries' positions are in place
    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
      for (int c = 0; c < 4; c++) acc[i][c] = 0.0f;
    int cur = 0;
    int64_t s0 = next_step(0, kp, nq);
    if (s0 < a.S) load_rows(ks, ldq, a.k, a.skS, a.skH, D, s0);
    while (s0 < a.S) {
      load_rows(vs, ldv, a.v, a.svS, a.svH, Dv, s0);
      cp_async_wait<1>();
      __syncthreads();  // this step's key rows (and, the first time, the queries) are in place
      {
        float bb[2][4] = {}, cr[2][4] = {};  // big·big and the two cross terms, for each of a chunk's two MMAs
        const float* kr = ks + (sblock * 8 + g) * ldq + 4 * t;
        const float* q0 = qb + g * ldq + 4 * t;
        const float* q1 = q0 + 8 * ldq;
        const float* r0 = qsm + g * ldq + 4 * t;
        const float* r1 = r0 + 8 * ldq;
        for (int c = spart; c < f.Dp / 16; c += f.ksplit) {
          const float4 kv = *reinterpret_cast<const float4*>(kr + 16 * c);
          const float4 x0 = *reinterpret_cast<const float4*>(q0 + 16 * c);
          const float4 x1 = *reinterpret_cast<const float4*>(q1 + 16 * c);
          uint32_t ab[2][4], as[2][4];
          if (f.split_q) {
            const float4 y0 = *reinterpret_cast<const float4*>(r0 + 16 * c);
            const float4 y1 = *reinterpret_cast<const float4*>(r1 + 16 * c);
            ab[0][0] = __float_as_uint(x0.x), ab[0][1] = __float_as_uint(x1.x);
            ab[0][2] = __float_as_uint(x0.y), ab[0][3] = __float_as_uint(x1.y);
            ab[1][0] = __float_as_uint(x0.z), ab[1][1] = __float_as_uint(x1.z);
            ab[1][2] = __float_as_uint(x0.w), ab[1][3] = __float_as_uint(x1.w);
            as[0][0] = __float_as_uint(y0.x), as[0][1] = __float_as_uint(y1.x);
            as[0][2] = __float_as_uint(y0.y), as[0][3] = __float_as_uint(y1.y);
            as[1][0] = __float_as_uint(y0.z), as[1][1] = __float_as_uint(y1.z);
            as[1][2] = __float_as_uint(y0.w), as[1][3] = __float_as_uint(y1.w);
          } else {
            split_tf32(x0.x, ab[0][0], as[0][0]);
            split_tf32(x1.x, ab[0][1], as[0][1]);
            split_tf32(x0.y, ab[0][2], as[0][2]);
            split_tf32(x1.y, ab[0][3], as[0][3]);
            split_tf32(x0.z, ab[1][0], as[1][0]);
            split_tf32(x1.z, ab[1][1], as[1][1]);
            split_tf32(x0.w, ab[1][2], as[1][2]);
            split_tf32(x1.w, ab[1][3], as[1][3]);
          }
          mma_3xtf32(bb[0], cr[0], ab[0], as[0], kv.x, kv.y);
          mma_3xtf32(bb[1], cr[1], ab[1], as[1], kv.z, kv.w);
        }
        float sc[4];
#pragma unroll
        for (int i = 0; i < 4; i++) sc[i] = (bb[0][i] + bb[1][i]) + (cr[0][i] + cr[1][i]);
        float* out = sp + spart * kTileQ * kFlashLdp + sblock * 8 + 2 * t;
        *reinterpret_cast<float2*>(out + g * kFlashLdp) = make_float2(sc[0], sc[1]);
        *reinterpret_cast<float2*>(out + (g + 8) * kFlashLdp) = make_float2(sc[2], sc[3]);
      }
      // The next visible step (its barriers also put every part's scores in place and free the key rows), whose
      // key rows then arrive during this step's softmax and P·V.
      const int64_t s1 = next_step(s0 + BK, kp + (cur ^ 1) * BK, nq);
      if (s1 < a.S) {
        load_rows(ks, ldq, a.k, a.skS, a.skH, D, s1);
      } else {
        cp_async_commit();  // an empty group: the wait below counts the same groups either way
      }
      // Each query's online-softmax step by one warp, a lane a key; P replaces part 0's scores. A warp's two
      // queries side by side.
      {
        const int32_t* kpc = kp + cur * BK;
        float score[2], mo[2], mn[2], pr[2], sum[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
          const int qi = warp + 8 * r;
          float s = 0.0f;
          bool vis = false;
          if (lane < BK) {
            for (int p = 0; p < f.ksplit; p++) s += sp[(p * kTileQ + qi) * kFlashLdp + lane];
            vis = key_visible(kpc[lane], qp[qi], a.window);
          }
          score[r] = vis ? a.scale * s : -INFINITY;
          mo[r] = ms[qi];
          mn[r] = score[r];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
          for (int r = 0; r < 2; r++) mn[r] = fmaxf(mn[r], __shfl_xor_sync(0xffffffffu, mn[r], o));
#pragma unroll
        for (int r = 0; r < 2; r++) {
          mn[r] = fmaxf(mo[r], mn[r]);
          pr[r] = score[r] == -INFINITY ? 0.0f : expf(score[r] - mn[r]);
          sum[r] = pr[r];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
          for (int r = 0; r < 2; r++) sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], o);
#pragma unroll
        for (int r = 0; r < 2; r++) {
          const int qi = warp + 8 * r;
          if (lane < BK) sp[qi * kFlashLdp + lane] = pr[r];
          if (lane == 0) {
            const float c = mn[r] == -INFINITY ? 1.0f : expf(mo[r] - mn[r]);
            cs[qi] = c;
            ls[qi] = ls[qi] * c + sum[r];
            ms[qi] = mn[r];
          }
        }
      }
      cp_async_wait<1>();
      __syncthreads();  // the probabilities and this step's value rows are in place
      const float c0 = cs[g], c1 = cs[g + 8];
#pragma unroll
      for (int i = 0; i < 8; i++)
        if (warp + 8 * i < nbv) {
          acc[i][0] *= c0;
          acc[i][1] *= c0;
          acc[i][2] *= c1;
          acc[i][3] *= c1;
        }
      for (int k0 = 0; k0 < BK; k0 += 8) {
        const float2 p0 = *reinterpret_cast<const float2*>(sp + g * kFlashLdp + k0 + 2 * t);
        const float2 p1 = *reinterpret_cast<const float2*>(sp + (g + 8) * kFlashLdp + k0 + 2 * t);
        uint32_t pb[4], ps[4];
        split_tf32(p0.x, pb[0], ps[0]);
        split_tf32(p1.x, pb[1], ps[1]);
        split_tf32(p0.y, pb[2], ps[2]);
        split_tf32(p1.y, pb[3], ps[3]);
        const float* v0 = vs + (k0 + 2 * t) * ldv + g;
#pragma unroll
        for (int i = 0; i < 8; i++) {
          const int nb = warp + 8 * i;
          if (nb < nbv) mma_3xtf32(acc[i], acc[i], pb, ps, v0[8 * nb], v0[ldv + 8 * nb]);
        }
      }
      __syncthreads();  // P·V has read the value rows and the probabilities
      s0 = s1;
      cur ^= 1;
    }
    // The rows' outputs, or for a split tile this part's unnormalised sums, maxima and denominators for
    // flash_merge_kernel.
    float* mine = parts == 2 ? parts_out + ((h * nsplit + (tiles - 1 - tile)) * 2 + part) * flash_part_floats(Dv)
                             : nullptr;
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const int col = (warp + 8 * i) * 8 + 2 * t;
      if (col >= Dv) continue;
#pragma unroll
      for (int half = 0; half < 2; half++) {
        const int qi = g + 8 * half;
        if (!mine && qi >= nq) continue;
        const float l = ls[qi];
        float* o = mine ? mine + qi * Dv + col : a.out + (t0 + qi) * a.soT + h * a.soH + col;
        o[0] = mine ? acc[i][2 * half] : l > 0.0f ? acc[i][2 * half] / l : 0.0f;
        if (col + 1 < Dv) o[1] = mine ? acc[i][2 * half + 1] : l > 0.0f ? acc[i][2 * half + 1] / l : 0.0f;
      }
    }
    if (mine) {
      if (tid < kTileQ) {
        mine[kTileQ * Dv + tid] = ms[tid];
        mine[kTileQ * Dv + kTileQ + tid] = ls[tid];
      }
      break;
    }
    __syncthreads();  // the outputs have read the denominators before another tile replaces them
  }
}

// The outputs of flash_tile_kernel's split tiles: each query's two parts rescaled to their common maximum, summed
// and divided by the summed denominators. A block a (head, split tile, query).
__global__ void flash_merge_kernel(AttentionArgs a, int64_t split_from, const float* parts_out) {
  pdl_begin();
  const int Dv = static_cast<int>(a.Dv);
  const int64_t tiles = (a.T + kTileQ - 1) / kTileQ, nsplit = tiles - split_from;
  const int64_t h = blockIdx.x / nsplit, j = blockIdx.x % nsplit, qi = blockIdx.y;
  const int64_t t = (tiles - 1 - j) * kTileQ + qi;
  if (t >= a.T) return;
  const float* p0 = parts_out + (h * nsplit + j) * 2 * flash_part_floats(Dv);
  const float* p1 = p0 + flash_part_floats(Dv);
  const float m0 = p0[kTileQ * Dv + qi], m1 = p1[kTileQ * Dv + qi];
  const float m = fmaxf(m0, m1);
  const float w0 = m0 == -INFINITY ? 0.0f : expf(m0 - m), w1 = m1 == -INFINITY ? 0.0f : expf(m1 - m);
  const float l = p0[kTileQ * Dv + kTileQ + qi] * w0 + p1[kTileQ * Dv + kTileQ + qi] * w1;
  for (int col = threadIdx.x; col < Dv; col += blockDim.x)
    a.out[t * a.soT + h * a.soH + col] = l > 0.0f ? (p0[qi * Dv + col] * w0 + p1[qi * Dv + col] * w1) / l : 0.0f;
}

int attention_tile_keys(const AttentionArgs& a) { return a.D > 256 ? 16 : 32; }
size_t attention_tile_smem(const AttentionArgs& a) {
  const int64_t BK = attention_tile_keys(a);
  return sizeof(float) * ((kTileQ + BK) * (a.D + 4) + BK * a.Dv + BK * kTileQ + 3 * kTileQ) +
         sizeof(int32_t) * (BK + kTileQ);
}
bool attention_tiles(const AttentionArgs& a) {
  return a.T >= kTileQ && a.D % 4 == 0 && a.D <= kMaxAttentionD && a.Dv <= kMaxAttentionDv &&
         (attention_tile_smem(a) <= kTileSmemMax || (g_tile_mma && flash_pick(a).BK));
}

// A block takes one tile of 16 queries, or with `paired` tile i and then tile (tiles - 1 - i): under a causal mask
// tile i sees about i + 1 tiles of keys, so each pair holds about the same work and a long prompt's blocks end
// together instead of the last tiles' blocks running on alone.
__global__ void __launch_bounds__(kTileThreads) attention_tile_kernel(AttentionArgs a, int BK, int paired) {
  pdl_begin();
  extern __shared__ float4 smem4[];
  float* sm = reinterpret_cast<float*>(smem4);
  const int D = static_cast<int>(a.D), Dv = static_cast<int>(a.Dv), ld = D + 4;
  float* qs = sm;                           // [16][D + 4]
  float* ks = qs + kTileQ * ld;             // [BK][D + 4]
  float* vs = ks + BK * ld;                 // [BK][Dv]
  float* pt = vs + BK * Dv;                 // [BK][16]: the tile's probabilities, by key
  float* ms = pt + BK * kTileQ;             // [16] running max
  float* ls = ms + kTileQ;                  // [16] running denominator
  float* cs = ls + kTileQ;                  // [16] this tile's rescaling of the accumulators
  int32_t* kp = reinterpret_cast<int32_t*>(cs + kTileQ);  // [BK]
  int32_t* qp = kp + BK;                    // [16]
  __shared__ int any;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t h = blockIdx.y, kh = h / (a.Hq / a.Hkv), tiles = (a.T + kTileQ - 1) / kTileQ;
  // Key and value rows as float4s where every row starts on 16 bytes.
  const bool rows4 = ((reinterpret_cast<uintptr_t>(a.k) | reinterpret_cast<uintptr_t>(a.v)) & 15) == 0 &&
                     ((a.skS | a.skH | a.svS | a.svH | Dv) & 3) == 0;
  for (int pass = 0; pass < 1 + paired; pass++) {
    const int64_t tile = pass == 0 ? blockIdx.x : tiles - 1 - blockIdx.x;
    if (pass > 0) {
      if (tile <= blockIdx.x) break;  // the middle tile of an odd count, done in the first pass
      __syncthreads();                // the first tile's outputs are written before its state is replaced
    }
    const int64_t t0 = tile * kTileQ;
    const int nq = static_cast<int>(a.T - t0 < kTileQ ? a.T - t0 : kTileQ);
    for (int qi = warp; qi < kTileQ; qi += kTileThreads / 32)
      for (int d = lane; d < D; d += 32) qs[qi * ld + d] = qi < nq ? a.q[(t0 + qi) * a.sqT + h * a.sqH + d] : 0.0f;
    if (tid < kTileQ) {
      qp[tid] = tid < nq ? a.q_pos[t0 + tid] : -1;  // a padding query sees nothing
      ms[tid] = -INFINITY;
      ls[tid] = 0.0f;
    }
    const int rows = kTileThreads / BK, passes = kTileQ / rows;  // query rows per pass: 8 (2 passes) or 16 (1)
    const int kj = tid % BK, qrow = tid / BK;
    float acc[2][kTileQ];
#pragma unroll
    for (int c = 0; c < 2; c++)
#pragma unroll
      for (int qi = 0; qi < kTileQ; qi++) acc[c][qi] = 0.0f;
    for (int64_t s0 = 0; s0 < a.S; s0 += BK) {
      __syncthreads();  // the previous tile is consumed (and, the first time, the queries are in place)
      if (tid == 0) any = 0;
      __syncthreads();
      if (tid < BK) {
        const int64_t s = s0 + tid;
        const int32_t pk = s < a.S ? a.k_pos[s] : -1;
        kp[tid] = pk;
        bool vis = false;
        for (int qi = 0; qi < nq; qi++) vis = vis || key_visible(pk, qp[qi], a.window);
        if (vis) any = 1;
      }
      __syncthreads();
      if (!any) continue;
      for (int j = warp; j < BK; j += kTileThreads / 32) {
        const int64_t s = s0 + j;
        const bool in = s < a.S;
        const float* kr = a.k + s * a.skS + kh * a.skH;
        const float* vr = a.v + s * a.svS + kh * a.svH;
        if (rows4) {
          const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          for (int d = lane; d < D / 4; d += 32)
            reinterpret_cast<float4*>(ks + j * ld)[d] = in ? reinterpret_cast<const float4*>(kr)[d] : zero;
          for (int d = lane; d < Dv / 4; d += 32)
            reinterpret_cast<float4*>(vs + j * Dv)[d] = in ? reinterpret_cast<const float4*>(vr)[d] : zero;
        } else {
          for (int d = lane; d < D; d += 32) ks[j * ld + d] = in ? kr[d] : 0.0f;
          for (int d = lane; d < Dv; d += 32) vs[j * Dv + d] = in ? vr[d] : 0.0f;
        }
      }
      __syncthreads();
      // Scores of (qrow + p·rows, kj).
      float sc[2] = {0.0f, 0.0f};
      const float4* k4 = reinterpret_cast<const float4*>(ks + kj * ld);
      const float4* q4a = reinterpret_cast<const float4*>(qs + qrow * ld);
      const float4* q4b = reinterpret_cast<const float4*>(qs + (qrow + rows) * ld);
      for (int d4 = 0; d4 < D / 4; d4++) {
        const float4 kv = k4[d4];
        const float4 qa = q4a[d4];
        sc[0] += qa.x * kv.x + qa.y * kv.y + qa.z * kv.z + qa.w * kv.w;
        if (passes > 1) {
          const float4 qb = q4b[d4];
          sc[1] += qb.x * kv.x + qb.y * kv.y + qb.z * kv.z + qb.w * kv.w;
        }
      }
      // Each query's online-softmax step, by the BK threads that hold its scores.
      for (int p = 0; p < passes; p++) {
        const int qi = qrow + p * rows;
        const bool vis = key_visible(kp[kj], qp[qi], a.window);
        const float score = vis ? a.scale * sc[p] : -INFINITY;
        const float mo = ms[qi];
        const float mn = fmaxf(mo, group_max(score, BK));
        const float pr = vis ? expf(score - mn) : 0.0f;
        const float sum = group_sum(pr, BK);
        pt[kj * kTileQ + qi] = pr;
        __syncwarp();
        if (kj == 0) {
          const float c = mn == -INFINITY ? 1.0f : expf(mo - mn);
          cs[qi] = c;
          ls[qi] = ls[qi] * c + sum;
          ms[qi] = mn;
        }
      }
      __syncthreads();
#pragma unroll
      for (int c = 0; c < 2; c++) {
        const int d = tid + c * kTileThreads;
        if (d >= Dv) break;
#pragma unroll
        for (int qi = 0; qi < kTileQ; qi++) acc[c][qi] *= cs[qi];
        for (int j = 0; j < BK; j++) {
          const float v = vs[j * Dv + d];
          const float4* p4 = reinterpret_cast<const float4*>(pt + j * kTileQ);
#pragma unroll
          for (int q4 = 0; q4 < kTileQ / 4; q4++) {
            const float4 pv = p4[q4];
            acc[c][4 * q4] += pv.x * v;
            acc[c][4 * q4 + 1] += pv.y * v;
            acc[c][4 * q4 + 2] += pv.z * v;
            acc[c][4 * q4 + 3] += pv.w * v;
          }
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < 2; c++) {
      const int d = tid + c * kTileThreads;
      if (d >= Dv) break;
#pragma unroll
      for (int qi = 0; qi < kTileQ; qi++) {
        if (qi >= nq) break;
        const float l = ls[qi];
        a.out[(t0 + qi) * a.soT + h * a.soH + d] = l > 0.0f ? acc[c][qi] / l : 0.0f;
      }
    }
  }
}

// ---------------------------------------------------------------- elementwise


__global__ void binary_kernel(int op, const float* a, const float* b, int64_t n, int64_t m, float* y) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = a[i], v = b[m == n ? i : i % m];
    y[i] = op == kAdd ? u + v : u * v;
  }
}
__global__ void scale_kernel(const float* a, float s, int64_t n, float* y) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = a[i] * s;
}
__global__ void unary_kernel(int op, const float* a, int64_t n, float* y) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = activate(op, a[i]);
}
// With gp (up) > 0, g (u) is three products at g, g + gp, g + 2·gp, summed in the accumulating GEMMs' order.
template <bool Parts>
__global__ void gated_kernel(int op, const float* g, int64_t ldg, int64_t gp, const float* u, int64_t ldu,
                             int64_t up, int64_t cols, int64_t n, float* y) {
  pdl_begin();
  auto sum3 = [](const float* p, int64_t ps, int64_t i) {
    if constexpr (Parts) return ps ? __fadd_rn(__fadd_rn(p[i], p[ps + i]), p[2 * ps + i]) : p[i];
    return p[i];
  };
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    y[i] = activate(op, sum3(g, gp, r * ldg + c)) * sum3(u, up, r * ldu + c);
  }
}
__global__ void softcap_kernel(const float* a, float cap, int64_t n, float* y) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = cap * tanhf(a[i] / cap);
}

__global__ void softmax_kernel(const float* a, int64_t D, float* y) {
  pdl_begin();
  __shared__ float scratch[32];
  const float* x = a + blockIdx.x * D;
  float* o = y + blockIdx.x * D;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) mx = fmaxf(mx, x[i]);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float e = expf(x[i] - mx);
    o[i] = e;
    sum += e;
  }
  sum = block_sum(sum, scratch);
  const float inv = 1.0f / sum;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) o[i] *= inv;
}

// k passes; pass j finds the best element ranked after the one pass j-1 found.
__global__ void topk_kernel(const float* a, int64_t N, int k, float* values, int32_t* indices) {
  pdl_begin();
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* x = a + blockIdx.x * N;
  float pv = INFINITY;
  int pi = -1;
  for (int j = 0; j < k; j++) {
    float bv = -INFINITY;
    int bi = -1;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      const float v = x[i];
      const int ii = static_cast<int>(i);
      const bool after = v < pv || (v == pv && ii > pi);
      if (after && (bi < 0 || better(v, ii, bv, bi))) {
        bv = v;
        bi = ii;
      }
    }
    block_best(bv, bi, sv, si);
    if (threadIdx.x == 0) {
      values[blockIdx.x * k + j] = bv;
      indices[blockIdx.x * k + j] = bi;
    }
    pv = bv;
    pi = bi;
  }
}

// Top-k of a short row (N <= kRankTopkMax) by rank: the row is staged in shared memory, each element counts the
// elements better than it (8 lanes share an element, each a strided eighth of the row) and, when that rank is below
// k, is written at it. One pass whatever k is; ranks are distinct, since ties go to the lower index. NaN ranks as
// -inf.
constexpr int kRankSplit = 8, kRankThreads = 256, kRankPerBlock = kRankThreads / kRankSplit;
__global__ void __launch_bounds__(kRankThreads) topk_rank_kernel(const float* a, int64_t N, int k, float* values,
                                                                 int32_t* indices) {
  pdl_begin();
  extern __shared__ float keys[];
  const float* x = a + blockIdx.y * N;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    const float v = x[i];
    keys[i] = v != v ? -INFINITY : v;
  }
  __syncthreads();
  const int e = blockIdx.x * kRankPerBlock + threadIdx.x / kRankSplit, part = threadIdx.x % kRankSplit;
  int rank = 0;
  if (e < N) {
    const float v = keys[e];
    for (int j = part; j < N; j += kRankSplit) rank += better(keys[j], j, v, e);
  }
#pragma unroll
  for (int o = kRankSplit / 2; o > 0; o >>= 1) rank += __shfl_xor_sync(0xffffffffu, rank, o);
  if (e < N && part == 0 && rank < k) {
    values[blockIdx.y * k + rank] = x[e];
    indices[blockIdx.y * k + rank] = e;
  }
}

// Top-1 of long rows in two passes: blocks of a row each find the best of their slice, then one block per row
// picks among them (ties go to the lower index in both passes).
__global__ void argmax_slices_kernel(const float* a, int64_t N, int slices, float* sv_out, int* si_out) {
  pdl_begin();
  __shared__ float sv[32];
  __shared__ int si[32];
  const int64_t row = blockIdx.y, per = (N + slices - 1) / slices;
  const int64_t begin = blockIdx.x * per, end = min(N, begin + per);
  const float* x = a + row * N;
  float bv = -INFINITY;
  int bi = -1;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float v = x[i];
    if (bi < 0 || better(v, static_cast<int>(i), bv, bi)) {
      bv = v;
      bi = static_cast<int>(i);
    }
  }
  block_best(bv, bi, sv, si);
  if (threadIdx.x == 0) {
    sv_out[row * slices + blockIdx.x] = bv;
    si_out[row * slices + blockIdx.x] = bi;
  }
}

__global__ void argmax_merge_kernel(const float* sv_in, const int* si_in, int slices, float* values, int32_t* indices) {
  pdl_begin();
  __shared__ float sv[32];
  __shared__ int si[32];
  float bv = -INFINITY;
  int bi = -1;
  for (int j = threadIdx.x; j < slices; j += blockDim.x) {
    const float v = sv_in[blockIdx.x * slices + j];
    const int i = si_in[blockIdx.x * slices + j];
    if (i >= 0 && (bi < 0 || better(v, i, bv, bi))) {
      bv = v;
      bi = i;
    }
  }
  block_best(bv, bi, sv, si);
  if (threadIdx.x == 0) {
    values[blockIdx.x] = bv;
    indices[blockIdx.x] = bi;
  }
}

__global__ void gather_rows_kernel(const int32_t* table, int64_t R, int64_t C, const int32_t* ids, int64_t n,
                                   int32_t* out, int* bad) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = ids[i / C];
    if (r < 0 || r >= R) {
      out[i] = -1;
      bad[1] = static_cast<int>(r);
      atomicExch(bad, 1);
      continue;
    }
    out[i] = table[r * C + i % C];
  }
}

__global__ void scatter_kernel(const float* values, const int32_t* index, int64_t n, float* out, int64_t V, int* bad) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = index[i];
    if (j < 0 || j >= V) {
      bad[1] = static_cast<int>(j);
      atomicExch(bad, 1);
      continue;
    }
    out[j] = values[i];
  }
}

// Backend::masked_logits. Blocks [0, k · split) take the chosen clusters, `split` blocks each, a warp four
// tokens; the blocks after them write -inf over a run of `fill_span` clusters each, skipping the chosen ones.
constexpr int kMaskedThreads = 256, kMaskedRowsPerWarp = 4;
constexpr int kMaskedRowsPerBlock = kMaskedThreads / 32 * kMaskedRowsPerWarp;
struct MaskedLogitsArgs {
  const float* y;
  Weight w;
  int64_t V, K, C, per;
  const int32_t* groups;
  const int32_t* clusters;
  int k, split;
  int64_t fill_span;
  bool vec;  // bf16 rows and y in 16-byte chunks
  float* logits;
  int* bad;
};
__global__ void __launch_bounds__(kMaskedThreads) masked_logits_kernel(MaskedLogitsArgs a) {
  pdl_begin();
  auto report = [&](int id) {
    a.bad[1] = id;
    atomicExch(a.bad, 1);
  };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (blockIdx.x < static_cast<unsigned>(a.k * a.split)) {
    const int32_t c = a.clusters[blockIdx.x / a.split];
    if (c < 0 || c >= a.C) {
      if (threadIdx.x == 0) report(c);
      return;
    }
    const int64_t first = (blockIdx.x % a.split) * int64_t(kMaskedRowsPerBlock) + warp * kMaskedRowsPerWarp;
    int32_t id[kMaskedRowsPerWarp];
    bool ok[kMaskedRowsPerWarp];
#pragma unroll
    for (int u = 0; u < kMaskedRowsPerWarp; u++) {
      const int64_t j = first + u;
      id[u] = j < a.per ? a.groups[c * a.per + j] : 0;
      ok[u] = j < a.per && id[u] >= 0 && id[u] < a.V;
      if (j < a.per && !ok[u] && lane == 0) report(id[u]);
    }
    float acc[kMaskedRowsPerWarp] = {};
    if (a.vec) {
      const float4* y4 = reinterpret_cast<const float4*>(a.y);
      for (int64_t ch = lane; ch < a.K / 8; ch += 32) {
        uint4 q[kMaskedRowsPerWarp];
#pragma unroll
        for (int u = 0; u < kMaskedRowsPerWarp; u++)
          q[u] = ok[u] ? static_cast<const uint4*>(weight_row(a.w, 0, id[u]))[ch] : make_uint4(0, 0, 0, 0);
        const float4 x0 = y4[2 * ch], x1 = y4[2 * ch + 1];
#pragma unroll
        for (int u = 0; u < kMaskedRowsPerWarp; u++) {
          float wv[8];
          bf16x8_floats(q[u], wv);
          acc[u] = dot8(acc[u], x0, x1, wv);
        }
      }
    } else {
#pragma unroll
      for (int u = 0; u < kMaskedRowsPerWarp; u++) {
        if (!ok[u]) continue;
        float r[1];
        row_dot<1>(a.y, a.K, 1, a.w, weight_row(a.w, 0, id[u]), scale_row(a.w, a.w.scales, 0, id[u]),
                   scale_row(a.w, a.w.biases, 0, id[u]), a.K, r, 0, 1);
        acc[u] = r[0];
      }
    }
#pragma unroll
    for (int u = 0; u < kMaskedRowsPerWarp; u++) {
      const float v = warp_sum(acc[u]);
      if (lane == 0 && ok[u]) a.logits[id[u]] = v;
    }
    return;
  }
  __shared__ uint32_t chosen[kMaxMaskedClusters / 32];
  for (int64_t i = threadIdx.x; i < (a.C + 31) / 32; i += blockDim.x) chosen[i] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < a.k; i += blockDim.x) {
    const int32_t c = a.clusters[i];
    if (c >= 0 && c < a.C) atomicOr(&chosen[c / 32], 1u << (c % 32));
  }
  __syncthreads();
  const int64_t c0 = (blockIdx.x - a.k * a.split) * a.fill_span, c1 = min(a.C, c0 + a.fill_span);
  for (int64_t i = c0 * a.per + threadIdx.x; i < c1 * a.per; i += blockDim.x) {
    const int64_t c = i / a.per;
    if (chosen[c / 32] >> (c % 32) & 1u) continue;
    const int32_t id = a.groups[i];
    if (id < 0 || id >= a.V)
      report(id);
    else
      a.logits[id] = -INFINITY;
  }
}

__global__ void kv_write_kernel(KvWriteArgs a) {
  pdl_begin();
  const int64_t t = blockIdx.x / a.H, h = blockIdx.x % a.H;
  const int32_t p = a.positions[t];
  const int64_t slot = kv_slot(p, a.C, a.ring, a.bad);
  if (slot < 0) return;
  const float* k = a.k + t * a.skT + h * a.skH;
  float* kd = a.keys + (slot * a.H + h) * a.D;
  for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x) kd[d] = k[d];
  if (a.Dv > 0) {
    const float* v = a.v + t * a.svT + h * a.svH;
    float* vd = a.values + (slot * a.H + h) * a.Dv;
    for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) vd[d] = v[d];
  }
  if (h == 0 && threadIdx.x == 0) a.slot_pos[slot] = p;
}

__global__ void forget_positions_kernel(int32_t* slot_pos, int64_t C, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < C;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (slot_pos[i] >= n) slot_pos[i] = -1;
}

// Element d of row t of combine_rows: Σ_j weights[t, j] · rows[t·k + j, d], j ascending, each step one FMA.
// Every combine kernel sums in this order (combine_held too, with its loops the other way round), so that the
// fused kernels keep combine_rows' bits.
__device__ __forceinline__ float combined(const float* rows, const float* weights, int64_t t, int64_t k,
                                          int64_t D, int64_t d) {
  float c = 0.0f;
  for (int64_t j = 0; j < k; j++) c = __fmaf_rn(weights[t * k + j], rows[(t * k + j) * D + d], c);
  return c;
}

__global__ void combine_rows_kernel(const float* rows, const float* weights, int64_t T, int64_t k, int64_t D,
                                    float* out) {
  pdl_begin();
  const int64_t total = T * D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = combined(rows, weights, i / D, k, D, i % D);
}

// Row t of combine_rows held: each of a thread's elements summed as `combined` sums it, with the experts' rows in
// the outer loop so that each one's loads for all of the elements go out together.
__device__ __forceinline__ void combine_held(const float* rows, const float* weights, int64_t t, int64_t k, int64_t D,
                                             float (&v)[kRowRegs]) {
#pragma unroll
  for (int kk = 0; kk < kRowRegs; kk++) v[kk] = 0.0f;
  for (int64_t j = 0; j < k; j++) {
    const float wj = weights[t * k + j];
    const float* r = rows + (t * k + j) * D;
#pragma unroll
    for (int kk = 0; kk < kRowRegs; kk++)
      if (held_index(kk) < D) v[kk] = __fmaf_rn(wj, r[held_index(kk)], v[kk]);
  }
}

// combine_rows, the add of s and add_norm in one block per row of add_norm_kernel's width: each element's sum in
// combine_rows_kernel's order, then + s, then x + that (their bits), and the row normed as add_norm_kernel does.
__global__ void __launch_bounds__(512)
    combine_add_norm_kernel(const float* rows, const float* weights, const float* s, const float* x,
                            int64_t k, int64_t D, const float* w, float eps, float* y, float* n) {
  pdl_begin();
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x, o = t * D;
  if (row_held(D)) {
    float v[kRowRegs];
    combine_held(rows, weights, t, k, D, v);
#pragma unroll
    for (int kk = 0; kk < kRowRegs; kk++) {
      const int64_t d = held_index(kk);
      if (d >= D) continue;
      const float f = s ? v[kk] + s[o + d] : v[kk];
      v[kk] = x[o + d] + f;
      y[o + d] = v[kk];
    }
    normed_held(v, inv_rms_held(v, D, eps, scratch), w, D, n + o);
    return;
  }
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    const float c = combined(rows, weights, t, k, D, d);
    const float f = s ? c + s[o + d] : c;
    y[o + d] = x[o + d] + f;
  }
  __syncthreads();
  normed_row(y + o, inv_rms(y + o, D, eps, scratch), w, D, n + o);
}

// combine_rows, rms_norm of the combined row and of the dense branch, their add, then add_rms_norm (and with
// n the next norm), one block per row of rms_norm_kernel's width: each step with its own kernel's arithmetic
// (the norms' sums by inv_rms at this width, the residual step by residual_norm_row on the first kNormThreads
// threads). The branches' sum goes through tmp (residual_norm_row reads its branch from L2), and for rows too
// long to be held the combined row before it: tmp is [T, combine_post_norms_tmp_floats(D)]. (512 threads for
// rows of 1,024 and more: bounded so that its held rows' registers fit a block of them.)
template <int Held>
__global__ void __launch_bounds__(512)
    combine_post_norms_kernel(const float* rows, const float* weights, const float* dense, int64_t k,
                              int64_t D, const float* wa, const float* wb, const float* x, const float* w,
                              float eps, float s, float* y, const float* w2, float* n, float* tmp) {
  pdl_begin();
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x, o = t * D;
  const bool held = row_held(D);
  float* m = tmp + t * (held ? D : 2 * D);  // the combined row (rows not held)
  float* f = held ? m : m + D;
  auto branch = [&](float v, float inv, const float* wt, int64_t d) {
    return wt ? __fmul_rn(__fmul_rn(v, inv), wt[d]) : __fmul_rn(v, inv);
  };
  if (held) {
    float a[kRowRegs], b[kRowRegs];
    load_held(dense + o, D, a);
    combine_held(rows, weights, t, k, D, b);
    const float inv_a = inv_rms_held(a, D, eps, scratch), inv_b = inv_rms_held(b, D, eps, scratch);
#pragma unroll
    for (int kk = 0; kk < kRowRegs; kk++) {
      const int64_t d = held_index(kk);
      if (d < D) f[d] = __fadd_rn(branch(a[kk], inv_a, wa, d), branch(b[kk], inv_b, wb, d));
    }
  } else {
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) m[d] = combined(rows, weights, t, k, D, d);
    __syncthreads();
    const float inv_a = inv_rms(dense + o, D, eps, scratch), inv_b = inv_rms(m, D, eps, scratch);
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
      f[d] = __fadd_rn(branch(dense[o + d], inv_a, wa, d), branch(m[d], inv_b, wb, d));
  }
  __syncthreads();
  residual_norm_row<Held>(x + o, f, w, D, eps, s, y + o, w2, n ? n + o : nullptr, scratch);
}

// rms_norm_kernel's row with several outputs: the row's inverse RMS once, then each y = x·inv (·w) (·s), row
// blockIdx.x of each output. By the whole block (of rms_norm_many_threads).
__device__ __forceinline__ void norm_many_row(const float* xr, int64_t D, float eps, const NormOuts& outs,
                                              float* scratch) {
  if (row_held(D)) {
    float v[kRowRegs];
    load_held(xr, D, v);
    const float inv = inv_rms_held(v, D, eps, scratch);
    for (int j = 0; j < outs.count; j++)
      normed_held(v, inv, outs.w[j], D, outs.y[j] + blockIdx.x * D, outs.s[j]);
    return;
  }
  const float inv = inv_rms(xr, D, eps, scratch);
  for (int j = 0; j < outs.count; j++) {
    const float* w = outs.w[j];
    const float sc = outs.s[j];
    float* yr = outs.y[j] + blockIdx.x * D;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
      const float v = w ? __fmul_rn(__fmul_rn(xr[i], inv), w[i]) : __fmul_rn(xr[i], inv);
      yr[i] = sc != 1.0f ? __fmul_rn(v, sc) : v;
    }
  }
}

__global__ void __launch_bounds__(512)
    rms_norm_many_kernel(const float* x, int64_t ldx, int64_t D, float eps, NormOuts outs) {
  pdl_begin();
  __shared__ float scratch[32];
  norm_many_row(x + blockIdx.x * ldx, D, eps, outs, scratch);
}

// add_rms_norm_kernel's residual step (on the first kNormThreads threads), then rms_norm_many_kernel's norms
// of the row it wrote (read back after the barrier), one row per block of rms_norm_many_kernel's width: their
// bits.
template <int Held>
__global__ void __launch_bounds__(512)
    add_rms_norm_many_kernel(const float* x, const float* f, const float* w, int64_t D, float eps, float s,
                             float* y, NormOuts outs) {
  pdl_begin();
  __shared__ float scratch[32];
  const int64_t o = blockIdx.x * D;
  residual_norm_row<Held>(x + o, f + o, w, D, eps, s, y + o, nullptr, nullptr, scratch);
  __syncthreads();
  norm_many_row(y + o, D, eps, outs, scratch);
}

constexpr int64_t kRouteRankExperts = 512;  // routers up to this many experts rank them in one pass
__global__ void route_kernel(RouteArgs a) {
  pdl_begin();
  extern __shared__ float sh[];
  float* prob = sh;               // [E]
  float* choice = prob + a.E;     // [E]
  float* gscore = choice + a.E;   // [groups]
  __shared__ float scratch[32];
  __shared__ int iscratch[32];
  __shared__ int chosen[64];
  const float* x = a.a + blockIdx.x * a.E;
  if (a.kind == 0) {
    float mx = -INFINITY;
    for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) mx = fmaxf(mx, x[e]);
    mx = block_max(mx, scratch);
    float sum = 0.0f;
    for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) {
      prob[e] = expf(x[e] - mx);
      sum += prob[e];
    }
    sum = block_sum(sum, scratch);
    const float inv = 1.0f / sum;
    for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) {
      prob[e] *= inv;
      choice[e] = prob[e];
    }
  } else {
    for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) {
      prob[e] = 1.0f / (1.0f + expf(-x[e]));
      choice[e] = prob[e] + (a.bias ? a.bias[e] : 0.0f);
    }
  }
  __syncthreads();
  if (a.groups > 1 && a.groups_kept < a.groups) {
    const int per = static_cast<int>(a.E / a.groups);
    for (int g = threadIdx.x; g < a.groups; g += blockDim.x) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int e = g * per; e < (g + 1) * per; e++) {
        if (choice[e] > b1) {
          b2 = b1;
          b1 = choice[e];
        } else if (choice[e] > b2) {
          b2 = choice[e];
        }
      }
      gscore[g] = per >= 2 ? b1 + b2 : b1;
    }
    __syncthreads();
    // A group is dropped when groups_kept others rank before it (higher score, or equal with a lower index).
    for (int g = threadIdx.x; g < a.groups; g += blockDim.x) {
      int ahead = 0;
      for (int o = 0; o < a.groups; o++)
        if (gscore[o] > gscore[g] || (gscore[o] == gscore[g] && o < g)) ahead++;
      if (ahead >= a.groups_kept)
        for (int e = g * per; e < (g + 1) * per; e++) choice[e] = -INFINITY;
    }
    __syncthreads();
  }
  if (a.E <= kRouteRankExperts) {
    // Each expert counts the experts better than it (higher choice, or equal with a lower index; NaN below all)
    // and takes the place that count gives it: the k best in order, in one pass over shared memory.
    auto key = [](float v) { return isnan(v) ? -INFINITY : v; };
    for (int e = threadIdx.x; e < a.E; e += blockDim.x) {
      const float v = key(choice[e]);
      int ahead = 0;
      for (int o = 0; o < a.E; o++) ahead += better(key(choice[o]), o, v, e);
      if (ahead < a.k) chosen[ahead] = e;
    }
  } else {
    // k rounds, each taking the best expert after the one before (in the same order).
    float pv = INFINITY;
    int pi = -1;
    for (int j = 0; j < a.k; j++) {
      float bv = -INFINITY;
      int bi = -1;
      for (int e = threadIdx.x; e < a.E; e += blockDim.x) {
        const float v = choice[e];
        const bool after = v < pv || (v == pv && e > pi);
        if (after && (bi < 0 || better(v, e, bv, bi))) {
          bv = v;
          bi = e;
        }
      }
      block_best(bv, bi, scratch, iscratch);
      if (threadIdx.x == 0) chosen[j] = bi;
      pv = bv;
      pi = bi;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int j = 0; j < a.k; j++) sum += prob[chosen[j]];
    const float norm = a.renormalize ? 1.0f / (a.kind == 1 ? sum + 1e-20f : sum) : 1.0f;
    for (int j = 0; j < a.k; j++) {
      const int e = chosen[j];
      a.weights[blockIdx.x * a.k + j] = prob[e] * norm * a.scale * (a.expert_scale ? a.expert_scale[e] : 1.0f);
      a.experts[blockIdx.x * a.k + j] = e;
    }
  }
}

}  // namespace

void set_programmatic_launch(bool on) { g_pdl = on; }
void set_gemv_tensor_cores(bool on) { g_gemv_mma = on; }
void set_gemv_early(bool on) { g_gemv_early = on; }
void set_cluster_attention(bool on, bool lean) {
  g_cluster_attention = on;
  g_lean_attention = lean;
}
void set_prefill_attention(bool pairs, int multiprocessors, bool tensor_cores, bool split) {
  g_tile_pairs = pairs;
  g_tile_split = split;
  g_tile_mma = tensor_cores;
  if (multiprocessors > 0) g_sms = multiprocessors;
}
void set_group_attention(bool on, int blocks, int min_slots, int min_keys) {
  g_group_attention = on;
  if (blocks > 0) g_group_blocks = blocks;
  if (min_slots > 0) g_group_min_slots = min_slots;
  if (min_keys > 0) g_group_min_keys = min_keys;
}
bool set_kernel_trace(unsigned long long* records, unsigned capacity) {
  unsigned zero = 0;
  return cudaMemcpyToSymbol(c_trace, &records, sizeof(records)) == cudaSuccess &&
         cudaMemcpyToSymbol(c_trace_cap, &capacity, sizeof(capacity)) == cudaSuccess &&
         cudaMemcpyToSymbol(g_trace_next, &zero, sizeof(zero)) == cudaSuccess;
}
void set_norm_prefetch(bool on) { cudaMemcpyToSymbol(g_norm_prefetch_on, &on, sizeof(on)); }
void set_gemv_decode_bound(bool on) { g_gemv_decode_bound = on; }
void set_gemv_group_rows(int rows) { g_gemv_group_rows = rows > 0 && rows <= 8 ? rows : 0; }
void set_expert_chunks(int chunks) {
  if (chunks == 2 || chunks == 4) g_expert_chunks = chunks;
}
void set_launch_shape(int gemv_warps, int split_keys, int64_t digits_min_weights) {
  if (gemv_warps > 0) g_gemv_warps = gemv_warps;
  if (digits_min_weights > 0) g_digits_min_weights[0] = g_digits_min_weights[1] = digits_min_weights;
  if (split_keys > 0) g_split_keys = split_keys;
}

void copy(const View& src, const View& dst, cudaStream_t s) {
  const int64_t n = numel(dst);
  if (n == 0) return;
  launch(copy_kernel, blocks_for(n), kThreads, 0, s, src, dst, n);
}

void fill(const View& dst, float value, cudaStream_t s) {
  const int64_t n = numel(dst);
  if (n == 0) return;
  bool contiguous = true;  // row-major without gaps: element i at offset i
  int64_t want = 1;
  for (int d = dst.ndim - 1; d >= 0; d--) {
    contiguous = contiguous && (dst.shape[d] == 1 || dst.stride[d] == want);
    want *= dst.shape[d];
  }
  launch(fill_kernel, blocks_for(n), kThreads, 0, s, dst, value, n, contiguous);
}

// The weight rows a warp of the chunked GEMV takes (EPI 1: gate and up rows together). Four share each x load (a
// verification's 8 input rows read x from L1 once per four weight rows, not two); with more than 2 input rows
// quantized codes take too many registers for four.
int gemv_rows_per_warp(int epi, int64_t N, int T, int bits) {
  const bool four = epi == 1 || N >= 4096;
  return four && (T <= 2 || bits == 0) ? 4 : 2;
}

template <int TT, int R, int BITS, int EPI>
void launch_gemv_chunks(const GemvJob& j, cudaStream_t s) {
  // Enough warps to keep the memory system busy: split K over 2 or 4 warps when the rows alone give too few, as
  // long as each warp still reads a few chunks.
  constexpr int RO = EPI == 1 ? R / 2 : R;
  const int64_t N = j.n_end[EPI == 3 ? kGemvSegments - 1 : 0];
  const int64_t vals = BITS ? 128 / BITS : 8, chunks = j.K / vals, row_groups = (N + RO - 1) / RO;
  // Quantized chunks carry 16 or 32 weights each (a bf16 chunk 8) and more arithmetic: they split down to one
  // chunk per lane. The split sets the order of a row's sum, so it is chosen from the rows per warp a decode
  // launch of this matrix takes, whatever this launch takes: a verification's rows keep a decode step's bits.
  const int decode_ro = gemv_rows_per_warp(EPI, N, 1, BITS) / (EPI == 1 ? 2 : 1);
  const int64_t decode_groups = (N + decode_ro - 1) / decode_ro;
  const int64_t per_lane = BITS ? 1 : 2;
  int parts = 1;
  while (parts < 4 && decode_groups * parts < g_gemv_warps && chunks / (32 * parts * 2) >= per_lane) parts *= 2;
  const int64_t blocks = (row_groups + (4 / parts) - 1) / (4 / parts) * (j.groups > 1 ? j.groups : 1);
  GemvJob job = j;
  job.early = g_gemv_early && g_pdl;
  for (int seg = 0; seg < kGemvSegments; seg++) job.early = job.early && !j.w[seg].computed;
  if constexpr (BITS != 0) {
    if (job.xd) return launch(gemv_digits_kernel<TT, R, BITS, EPI>, static_cast<unsigned>(blocks), 128, 0, s, job, parts);
  }
  if constexpr (BITS != 0 && TT == 1)
    launch(gemv_chunks_q1_kernel<R, BITS, EPI>, static_cast<unsigned>(blocks), 128, 0, s, job, parts);
  else if constexpr (BITS == 0 && TT >= 4)
    launch(gemv_verify_kernel<TT, R, EPI>, static_cast<unsigned>(blocks), 128, 0, s, job, parts);
  else if constexpr (BITS == 0 && TT == 1 && EPI != 0)
    launch(g_gemv_decode_bound ? gemv_decode_kernel<R, EPI> : gemv_chunks_kernel<1, R, 0, EPI>,
           static_cast<unsigned>(blocks), 128, 0, s, job, parts);
  else
    launch(gemv_chunks_kernel<TT, R, BITS, EPI>, static_cast<unsigned>(blocks), 128, 0, s, job, parts);
}

template <int R, int BITS, int EPI>
void launch_gemv_chunks_t(const GemvJob& j, cudaStream_t s) {
  const int rows = j.groups > 1 ? j.group_rows : j.T;  // input rows a block takes
  if (rows == 1) return launch_gemv_chunks<1, R, BITS, EPI>(j, s);
  if constexpr (R == 4 && BITS != 0) {
    return launch_gemv_chunks<2, R, BITS, EPI>(j, s);  // four rows of codes per warp are taken for T <= 2 only
  } else {
    if (rows == 2) return launch_gemv_chunks<2, R, BITS, EPI>(j, s);
    if (rows <= 4) return launch_gemv_chunks<4, R, BITS, EPI>(j, s);
    launch_gemv_chunks<8, R, BITS, EPI>(j, s);
  }
}

template <int R, int EPI>
void launch_gemv_chunks_bits(const GemvJob& j, cudaStream_t s) {
  if (j.w[0].bits == 4) return launch_gemv_chunks_t<R, 4, EPI>(j, s);
  if (j.w[0].bits == 8) return launch_gemv_chunks_t<R, 8, EPI>(j, s);
  launch_gemv_chunks_t<R, 0, EPI>(j, s);
}

template <int EPI>
void launch_gemv_mma(const GemvJob& j, cudaStream_t s) {
  // Enough warps to keep the memory system busy: split the k-steps over up to 16 warps (8 each for gate and up)
  // when the row tiles alone give too few, as long as each warp still has a full batch of steps.
  const int64_t N = j.n_end[EPI == 3 ? kGemvSegments - 1 : 0];
  const int64_t steps = (j.K / 8 + 7) / 8, tiles = (N + 15) / 16;
  const int sets = EPI == 1 ? 2 : 1;
  int parts = 1;
  while (sets * parts < kMmaWarps && tiles * sets * parts < g_gemv_warps && steps / (parts * 2) >= kMmaSteps)
    parts *= 2;
  const int span = sets * parts, block_warps = span < 4 ? 4 : span;
  const int64_t per_block = block_warps / span, blocks = (tiles + per_block - 1) / per_block;
  launch(gemv_mma_kernel<EPI>, static_cast<unsigned>(blocks), 32 * block_warps, 0, s, j, parts);
}

// Quantized launches of at least g_digits_min_weights weights (by bits; K up to kDigitsMaxK) are read over the
// input's digits: the digits' own launch pays for itself on them. The choice depends on the matrix only, so that
// decode and verification rows take the same path.
constexpr int64_t kDigitsMaxK = 65536;

constexpr int64_t kMaxGemvRows = 8;

size_t gemv_digits_bytes() {
  return static_cast<size_t>(kMaxGemvRows * 3 * kDigitsMaxK + 2 * kMaxGemvRows * (kDigitsMaxK / 16) * sizeof(float));
}

template <int EPI>
void launch_gemv_chunks_epi(const GemvJob& job, cudaStream_t s) {
  GemvJob j = job;
  const int64_t N = j.n_end[EPI == 3 ? kGemvSegments - 1 : 0];
  const int64_t weights = (EPI == 1 ? 2 : 1) * N * j.K;
  if (j.w[0].bits != 0 && j.digits && weights >= g_digits_min_weights[j.w[0].bits == 8] && j.K <= kDigitsMaxK &&
      j.T <= kMaxGemvRows) {
    const int bits = j.w[0].bits;
    int8_t* planes = static_cast<int8_t*>(j.digits);
    float* scales = reinterpret_cast<float*>(planes + kMaxGemvRows * 3 * kDigitsMaxK);
    float* sums = scales + kMaxGemvRows * kDigitsMaxK / 16;
    const int64_t n = j.T * j.K;
    const unsigned blocks = static_cast<unsigned>((n + 127) / 128);
    if (bits == 4)
      launch(digits_kernel<4>, blocks, 128, 0, s, j.x, j.ldx, j.T, j.K, planes, scales, sums);
    else
      launch(digits_kernel<8>, blocks, 128, 0, s, j.x, j.ldx, j.T, j.K, planes, scales, sums);
    j.xd = planes;
    j.xsc = scales;
    j.xsm = sums;
  }
  if (j.w[0].bits == 0 && g_gemv_mma) return launch_gemv_mma<EPI>(j, s);
  // Several input rows of bf16 weights (verification) in groups of at most g_gemv_group_rows over blocks that share
  // each weight read through L2: on an H100, E2B verifies 8 tokens for 2.17 decode steps instead of 2.47 (a warp
  // keeps 4 rows' sums instead of 8 and more warps fit), 31B is level. Quantized rows keep one group (2 rows a
  // group were slower for int4). A one-row launch's residual norm (rn) is never asked of several rows.
  if (g_gemv_group_rows > 0 && j.w[0].bits == 0 && j.T > g_gemv_group_rows && !j.rn.counter) {
    j.groups = (j.T + g_gemv_group_rows - 1) / g_gemv_group_rows;
    j.group_rows = (j.T + j.groups - 1) / j.groups;
  }
  const int rows = j.groups > 1 ? j.group_rows : j.T;
  if (gemv_rows_per_warp(EPI, j.n_end[EPI == 3 ? kGemvSegments - 1 : 0], rows, j.w[0].bits) == 4)
    launch_gemv_chunks_bits<4, EPI>(j, s);
  else
    launch_gemv_chunks_bits<2, EPI>(j, s);
}

// Whether the chunked GEMV can read `w`: bf16 or 4/8-bit rows of whole 16-byte chunks, 16-byte aligned, with each
// chunk inside one quantization group of a power-of-two number of chunks and 16-bit scales and biases; x rows of
// whole float4s.
bool chunks_fit(const float* x, int64_t ldx, const Weight& w, int64_t K) {
  const bool x_ok = reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
  const bool base_ok = reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
  if (!x_ok || !base_ok) return false;
  if (w.bits == 0) return w.type == kBF16 && K % 8 == 0 && w.ld % 8 == 0;
  if (w.bits != 4 && w.bits != 8) return false;
  const int64_t vals = 128 / w.bits, per_group = w.group / vals;
  const bool scales_16 = w.scale_type == kBF16 || w.scale_type == kF16;
  return K % vals == 0 && w.group % vals == 0 && (per_group & (per_group - 1)) == 0 && w.ld % 4 == 0 && scales_16;
}

GemvJob gemv_job(const float* x, int64_t ldx, int T, const Weight& w, int64_t N, int64_t K, float* y, int64_t ldy,
                 bool accumulate) {
  GemvJob j{};
  j.x = x;
  j.ldx = ldx;
  j.T = T;
  for (int i = 0; i < kGemvSegments; i++) {
    j.w[i] = w;
    j.n_end[i] = N;
    j.y[i] = y;
    j.ldy[i] = ldy;
  }
  j.segments = 1;
  j.K = K;
  j.accumulate = accumulate;
  return j;
}

// Whether two weights go through one code path of the chunked GEMV: the same encoding, group and scale type.
bool same_encoding(const Weight& a, const Weight& b) {
  return a.bits == b.bits && a.type == b.type && (!a.bits || (a.group == b.group && a.scale_type == b.scale_type));
}

void gemv(const float* x, int64_t ldx, int T, const Weight& w, int64_t N, int64_t K, float* y, int64_t ldy,
          bool accumulate, cudaStream_t s, void* digits) {
  if (chunks_fit(x, ldx, w, K)) {
    GemvJob j = gemv_job(x, ldx, T, w, N, K, y, ldy, accumulate);
    j.digits = digits;
    launch_gemv_chunks_epi<0>(j, s);
    return;
  }
  // Fewer than ~16k rows leave most of the GPU idle at one warp per row: split each row's K over 4 warps.
  if (N < 16384 && K >= 512) {
    const int64_t blocks = (N + kRowsPerBlock / 4 - 1) / (kRowsPerBlock / 4);
    launch(gemv_kernel<4>, static_cast<unsigned>(blocks), 32 * kRowsPerBlock, 0, s, x, ldx, T, w, N, K, y, ldy, accumulate);
    return;
  }
  const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  launch(gemv_kernel<1>, static_cast<unsigned>(blocks), 32 * kRowsPerBlock, 0, s, x, ldx, T, w, N, K, y, ldy, accumulate);
}

bool gemv_gated(const float* x, int64_t ldx, int T, const Weight& gate, const Weight* up, const float* m,
                int64_t ldm, int act, int64_t N, int64_t K, float* y, int64_t ldy, cudaStream_t s, void* digits) {
  if (T < 1 || T > 8 || !chunks_fit(x, ldx, gate, K)) return false;
  if (up) {
    if (!chunks_fit(x, ldx, *up, K) || !same_encoding(gate, *up)) return false;
    GemvJob j = gemv_job(x, ldx, T, gate, N, K, y, ldy, false);
    j.digits = digits;
    j.w[1] = *up;
    j.act = act;
    launch_gemv_chunks_epi<1>(j, s);
  } else {
    GemvJob j = gemv_job(x, ldx, T, gate, N, K, y, ldy, false);
    j.digits = digits;
    j.m = m;
    j.ldm = ldm;
    j.act = act;
    launch_gemv_chunks_epi<2>(j, s);
  }
  return true;
}

bool gemv_residual_norm(const float* x, int64_t ldx, int T, const Weight& w, int64_t N, int64_t K,
                        const ResidualNorm& r, cudaStream_t s, void* digits) {
  if (T != 1 || !chunks_fit(x, ldx, w, K) || !r.counter) return false;
  GemvJob j = gemv_job(x, ldx, T, w, N, K, r.f, N, false);
  j.digits = digits;
  j.rn = r;
  launch_gemv_chunks_epi<0>(j, s);
  return true;
}

bool gemv_many(const float* x, int64_t ldx, int T, int count, const Weight* w, const int64_t* N, int64_t K,
               float* const* y, const int64_t* ldy, cudaStream_t s, void* digits) {
  if (T < 1 || T > 8 || count < 1 || count > kGemvSegments) return false;
  for (int i = 0; i < count; i++)
    if (!chunks_fit(x, ldx, w[i], K) || !same_encoding(w[0], w[i])) return false;
  GemvJob j = gemv_job(x, ldx, T, w[0], N[0], K, y[0], ldy[0], false);
  int64_t end = 0;
  for (int i = 0; i < kGemvSegments; i++) {
    const int src = i < count ? i : count - 1;  // unused segments are empty: they end where the last one does
    if (i < count) end += N[i];
    j.w[i] = w[src];
    j.n_end[i] = end;
    j.y[i] = y[src];
    j.ldy[i] = ldy[src];
  }
  j.segments = count;
  j.digits = digits;
  launch_gemv_chunks_epi<3>(j, s);
  return true;
}

void gemv_experts(const float* x, int64_t ldx, int64_t per, const int32_t* experts, int64_t R, const Weight& w,
                  int64_t N, int64_t K, float* y, int64_t ldy, unsigned long long* distinct, cudaStream_t s,
                  const Weight* up, int act, int matrices) {
  auto kernel = w.bits ? (up ? gemv_experts_kernel<true, true, 1> : gemv_experts_kernel<true, false, 1>)
                : g_expert_chunks == 2
                    ? (up ? gemv_experts_kernel<false, true, 2> : gemv_experts_kernel<false, false, 2>)
                    : (up ? gemv_experts_kernel<false, true, 4> : gemv_experts_kernel<false, false, 4>);
  const Weight u = up ? *up : w;
  const int64_t chunk = (65535 / per) * per;  // whole input rows per launch (grid.y is at most 65535)
  for (int64_t r0 = 0; r0 < R; r0 += chunk) {
    const int64_t r1 = R - r0 < chunk ? R : r0 + chunk;
    dim3 grid(static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(r1 - r0));
    // Rows r0.. read x rows (r0 + i) / per: shift x by whole input rows only when r0 is a multiple of per.
    launch(kernel, grid, 32 * kRowsPerBlock, 0, s, x + (r0 / per) * ldx, ldx, per, experts + r0, w, u, act, N, K,
           y + r0 * ldy, ldy, distinct, static_cast<unsigned long long>(matrices));
  }
}

void split_bf16x3(const float* x, int64_t ldx, int64_t T, int64_t K, void* out, cudaStream_t s) {
  if (T * K == 0) return;
  const bool quads = K % 4 == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t per_row = quads ? K / 4 : K;
  const dim3 grid(static_cast<unsigned>((per_row + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(T, 65535)));
  launch(split_bf16x3_kernel, grid, kThreads, 0, s, x, ldx, T, K, quads, static_cast<__nv_bfloat16*>(out));
}

void dequantize_rows(const Weight& w, int64_t n0, int64_t n, int64_t K, float* out, cudaStream_t s) {
  launch(dequantize_kernel, blocks_for(n * K), kThreads, 0, s, w, n0, n, K, out);
}

void embedding(const Weight& table, int64_t V, int64_t D, const int32_t* ids, int64_t n, float scale, float* out,
               int64_t ldo, int* bad_id, cudaStream_t s) {
  if (n == 0) return;
  launch(embedding_kernel, static_cast<unsigned>(n), kThreads, 0, s, table, V, D, ids, scale, out, ldo, bad_id);
}

void add_norm(const float* x, const float* f, const float* w, int64_t rows, int64_t D, float eps, float* y, float* n,
              cudaStream_t s) {
  if (rows == 0) return;
  launch(add_norm_kernel, static_cast<unsigned>(rows), D >= 1024 ? 512 : 128, 0, s, x, f, w, D, eps, y, n);
}
void rms_norm(const float* x, int64_t ldx, const float* w, int64_t rows, int64_t D, float eps, float* y, int64_t ldy,
              cudaStream_t s) {
  if (rows == 0) return;
  launch(rms_norm_kernel, static_cast<unsigned>(rows), D >= 1024 ? 512 : 128, 0, s, x, ldx, w, D, eps, y, ldy);
}

// The standalone residual norms (not the GEMV's tail, whose registers are the GEMV's) hold rows of up to 3,072 in
// registers (Gemma 4 26B-A4B's 2,816, E4B's 2,560); the same bits as the slices they would otherwise take.
constexpr int kNormHeldLong = 3;
bool long_norm_row(int64_t D) {
  return D > kNormThreads * 8 * kNormHeld && D <= kNormThreads * 8 * kNormHeldLong;
}
auto add_rms_norm_of(int64_t D) {
  return long_norm_row(D) ? add_rms_norm_kernel<kNormHeldLong> : add_rms_norm_kernel<kNormHeld>;
}

void add_rms_norm(const float* x, const float* f, const float* w, int64_t rows, int64_t D, float eps, float scale,
                  float* y, cudaStream_t s) {
  if (rows == 0) return;
  launch(add_rms_norm_of(D), static_cast<unsigned>(rows), kNormThreads, 0, s, x, f, w, D, eps, scale, y,
         static_cast<const float*>(nullptr), static_cast<float*>(nullptr), int64_t{0});
}

void add_rms_norm_norm(const float* x, const float* f, const float* w, int64_t rows, int64_t D, float eps,
                       float scale, float* y, const float* w2, float* n, cudaStream_t s, int64_t f_parts) {
  if (rows == 0) return;
  if (f_parts) {
    launch(long_norm_row(D) ? add_rms_norm_kernel<kNormHeldLong, true> : add_rms_norm_kernel<kNormHeld, true>,
           static_cast<unsigned>(rows), kNormThreads, 0, s, x, f, w, D, eps, scale, y, w2, n, f_parts);
    return;
  }
  launch(add_rms_norm_of(D), static_cast<unsigned>(rows), kNormThreads, 0, s, x, f, w, D, eps, scale, y, w2, n,
         int64_t{0});
}

void rms_norm_rope(const float* x, const float* w, int64_t T, int64_t H, int64_t D, float eps, const int32_t* pos,
                   const float* inv_freq, int64_t n, bool interleaved, float* y, cudaStream_t s) {
  NormRopeJob j{};
  j.x[0] = x;
  j.w[0] = w;
  j.y[0] = y;
  j.H[0] = H;
  j.rope[0] = true;
  j.count = 1;
  j.T = T;
  j.D = D;
  j.eps = eps;
  rms_norm_rope_many(j, pos, inv_freq, n, interleaved, s);
}

void rms_norm_rope_many(const NormRopeJob& j, const int32_t* pos, const float* inv_freq, int64_t n, bool interleaved,
                        cudaStream_t s) {
  int64_t blocks = 0;
  for (int g = 0; g < j.count; g++) blocks += j.T * j.H[g];
  if (blocks == 0) return;
  launch(rms_norm_rope_many_kernel, static_cast<unsigned>(blocks), j.D >= 1024 ? 512 : 128, j.D * sizeof(float), s, j,
         pos, inv_freq, n, interleaved);
}

void latent_entry(const LatentEntryArgs& a, cudaStream_t s) {
  if (a.T == 0) return;
  launch(latent_entry_kernel, dim3(static_cast<unsigned>(a.T), 2), a.L >= 1024 ? 512 : 128, 0, s, a);
}

void rope(float* x, int64_t T, int64_t H, int64_t D, int64_t sT, int64_t sH, const int32_t* pos, const float* inv_freq,
          int64_t n, bool interleaved, cudaStream_t s) {
  const int64_t total = T * H * n;
  if (total == 0) return;
  launch(rope_kernel, blocks_for(total), kThreads, 0, s, x, T, H, D, sT, sH, pos, inv_freq, n, interleaved);
}

int attention_decode_width(const AttentionArgs& a);

// Decode attention over a short run of slots takes the cluster kernel: the splits (up to kClusterSplits, a
// power of two, enough for one batch of keys each where the slots allow) merge through distributed shared
// memory. Its warps per block come from the heads (16 for up to 8 query heads, else 8, so that a step's
// blocks fit the GPU at once; 16 for 26B-A4B's 16 heads, whose sliding window of 1,024 then takes this
// kernel, was slower: 23.9 against 20.8 us a layer on an H100), and it is chosen when no split takes more
// than three batches. Like the split, this depends on the heads and the slots only. Returns the splits, or 0
// when the kernel does not apply.
int attention_cluster_warps(const AttentionArgs& a) { return a.Hq <= 8 ? 16 : 8; }
int attention_cluster_splits(const AttentionArgs& a) {
  const int n = attention_decode_width(a);
  if (!n || !g_cluster_attention) return 0;
  const int64_t step = attention_cluster_warps(a) * (n <= 2 ? 4 : 2);  // keys of one batch over a block's warps
  int64_t splits = 1;
  while (splits < kClusterSplits && a.S > splits * step) splits *= 2;
  const int64_t per_split = (a.S + splits - 1) / splits;
  return per_split <= 3 * step ? static_cast<int>(splits) : 0;
}

int attention_splits(const AttentionArgs& a) {
  // Few (query, head) blocks over many keys leave most SMs idle, and each warp's keys follow one another: split the
  // keys so that one query's heads make up to a thousand blocks, each with at least 16 keys (one per warp). The
  // split depends on the heads and keys only, never on the query count: a query verified among others is summed
  // in the same order as when it is decoded alone, so it gets the same bits.
  if (a.T * a.Hq > kAttentionCounters) return 1;
  int64_t splits = 1;
  while (a.Hq * splits * 2 <= 1024 && a.S / (splits * 2) >= g_split_keys) splits *= 2;
  return static_cast<int>(splits);
}

// The float4s per lane of attention_decode_kernel for these heads (1, 2, 4, or 5 for GLM's latent rows of 576), or
// 0 when its float4 loads cannot read them (head dims above 640 or not multiples of 4, rows not 16-byte aligned).
int attention_decode_width(const AttentionArgs& a) {
  const bool aligned = reinterpret_cast<uintptr_t>(a.k) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v) % 16 == 0 &&
                       a.skS % 4 == 0 && a.skH % 4 == 0 && a.svS % 4 == 0 && a.svH % 4 == 0;
  if (!aligned || a.D % 4 || a.Dv % 4) return 0;
  const int64_t widest = a.D > a.Dv ? a.D : a.Dv;
  return widest <= 128 ? 1 : widest <= 256 ? 2 : widest <= 512 ? 4 : widest <= 640 ? 5 : 0;
}

// The slots a split of attention_group_kernel takes, or 0 when it does not apply: groups of 2, 4 or 8 query heads per
// key head, key and value rows of 256 or 512 dims (float2-aligned for 512; groups of 2 only at 256), a cache of
// g_group_min_slots slots or more that the cluster kernel does not take (a threshold set below the default takes
// them ahead of the cluster kernel). Splits of 32 slots, doubled (up to 256) while the launch would have more than
// 1,024 blocks a query (VATIC_GROUP_BLOCKS; half of a full cache's slots are empty after it doubles, and fewer,
// longer splits left SMs idle: E2B at 32k tokens 200 against 259 tok/s). Like the other splits, this depends on the
// heads and slots only.
int attention_group_split_keys(const AttentionArgs& a) {
  if (!g_group_attention || a.S < g_group_min_slots || a.Hkv <= 0 || a.Hq % a.Hkv) return 0;
  const int64_t G = a.Hq / a.Hkv;
  if ((G != 2 && G != 4 && G != 8) || a.D != a.Dv || (a.D != 256 && a.D != 512)) return 0;
  if (G == 2 && a.D == 512) return 0;  // 16 keys a tile of 512-dim rows would not fit in registers
  if (a.D == 512 && (reinterpret_cast<uintptr_t>(a.k) % 8 || reinterpret_cast<uintptr_t>(a.v) % 8 || a.skS % 2 ||
                     a.skH % 2 || a.svS % 2 || a.svH % 2))
    return 0;
  if (g_group_min_slots >= kGroupMinSlots && attention_cluster_splits(a)) return 0;
  int64_t keys = std::max<int64_t>(g_group_min_keys, 32 / G);  // at least one tile of keys
  while (keys < kGroupMaxSplitKeys && a.Hkv * ((a.S + keys - 1) / keys) > g_group_blocks) keys *= 2;
  return (a.S + keys - 1) / keys <= 65535 ? static_cast<int>(keys) : 0;
}

// Whether a prompt's tiles go in pairs: only once the pairs still give each multiprocessor two blocks (two fit on
// one). On an H100, E2B's 512-token prompt (256 tiles on 132 multiprocessors) was 6 % slower in pairs, 2,048
// tokens 5 % faster.
bool attention_tile_paired(const AttentionArgs& a) {
  return g_tile_pairs && (a.T + kTileQ - 1) / kTileQ * a.Hq >= 4 * int64_t{g_sms};
}

// The first tile that flash_tile_kernel splits in two (the tile count when none is): without pairs, the tiles that
// see more than a quarter of the keys the last one sees (estimated from the positions' usual layout: the prompt
// after S - T cached keys, each query seeing the keys before it and within the window; a cache's empty slots count
// as keys here, so a cache with spare slots has more of its tiles split than the rule intends).
int64_t flash_split_from(const AttentionArgs& a) {
  const int64_t tiles = (a.T + kTileQ - 1) / kTileQ;
  if (!g_tile_split || !g_tile_mma || !attention_tiles(a) || !flash_pick(a).BK || attention_tile_paired(a))
    return tiles;
  auto keys = [&](int64_t i) {
    int64_t k = std::min<int64_t>(a.S, a.S - a.T + (i + 1) * kTileQ);
    return a.window > 0 ? std::min<int64_t>(k, a.window + kTileQ) : k;
  };
  const int64_t last = keys(tiles - 1);
  int64_t from = tiles;
  while (from > 0 && 4 * keys(from - 1) > last) from--;
  return from;
}

size_t attention_scratch_floats(const AttentionArgs& a) {
  if (attention_tiles(a)) {
    const int64_t tiles = (a.T + kTileQ - 1) / kTileQ, from = flash_split_from(a);
    return static_cast<size_t>(a.Hq * (tiles - from) * 2 * flash_part_floats(a.Dv));
  }
  if (const int keys = attention_group_split_keys(a))
    return static_cast<size_t>(a.T * a.Hq * ((a.S + keys - 1) / keys) * (a.Dv + 2));
  if (attention_cluster_splits(a)) return 0;
  const int splits = attention_splits(a);
  return splits > 1 ? static_cast<size_t>(a.T * a.Hq * splits * (a.Dv + 2)) : 0;
}

// The decode attention kernel for head rows of up to 128·n dims (n = attention_decode_width: 1, 2, 4 or 5).
// Launches of several queries (verification) take the lean kernel for rows of up to 256 dims (the same bits).
template <int W, bool Cluster>
auto attention_decode_of(int n, int64_t T) {
  if (T > 1 && g_lean_attention && n <= 2)
    return n == 1 ? attention_decode_lean_kernel<1, W, Cluster> : attention_decode_lean_kernel<2, W, Cluster>;
  return n == 1   ? attention_decode_kernel<1, W, Cluster>
         : n == 2 ? attention_decode_kernel<2, W, Cluster>
         : n == 4 ? attention_decode_kernel<4, W, Cluster>
                  : attention_decode_kernel<5, W, Cluster>;
}

void attention(const AttentionArgs& a, float* scratch, unsigned* counters, cudaStream_t s) {
  if (a.T * a.Hq == 0) return;
  if (attention_tiles(a)) {  // prefill
    static bool tiles_raised = false;
    if (!tiles_raised) {
      cudaFuncSetAttribute(attention_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kTileSmemMax);
      cudaFuncSetAttribute(flash_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kTileSmemMax);
      tiles_raised = true;
    }
    const int64_t tiles = (a.T + kTileQ - 1) / kTileQ;
    const int paired = attention_tile_paired(a) ? 1 : 0;
    dim3 grid(static_cast<unsigned>(paired ? (tiles + 1) / 2 : tiles), static_cast<unsigned>(a.Hq));
    if (const FlashShape f = g_tile_mma ? flash_pick(a) : FlashShape{}; f.BK) {
      const int64_t from = flash_split_from(a), nsplit = tiles - from;
      if (nsplit > 0) {
        launch(flash_tile_kernel, dim3(static_cast<unsigned>(a.Hq), static_cast<unsigned>(tiles + nsplit)),
               kFlashThreads, f.smem, s, a, f, 0, from, scratch);
        launch(flash_merge_kernel, dim3(static_cast<unsigned>(a.Hq * nsplit), kTileQ), 128, 0, s, a, from,
               static_cast<const float*>(scratch));
        return;
      }
      launch(flash_tile_kernel, grid, kFlashThreads, f.smem, s, a, f, paired, tiles, static_cast<float*>(nullptr));
      return;
    }
    launch(attention_tile_kernel, grid, kTileThreads, attention_tile_smem(a), s, a, attention_tile_keys(a), paired);
    return;
  }
  if (const int keys = attention_group_split_keys(a)) {
    const int splits = static_cast<int>((a.S + keys - 1) / keys);
    const dim3 grid(static_cast<unsigned>(a.T * a.Hkv), static_cast<unsigned>(splits));
    const int64_t G = a.Hq / a.Hkv;
    auto kernel = a.D == 256 ? (G == 2 ? attention_group_kernel<1, 2>
                                       : G == 4 ? attention_group_kernel<1, 4> : attention_group_kernel<1, 8>)
                             : (G == 4 ? attention_group_kernel<2, 4> : attention_group_kernel<2, 8>);
    launch(kernel, grid, 32 * kGroupWarps, 0, s, a, scratch, keys);
    const dim3 merge(static_cast<unsigned>(a.T * a.Hq), static_cast<unsigned>((a.Dv + 31) / 32));
    launch(attention_group_merge_kernel, merge, 256, 0, s, a, static_cast<const float*>(scratch), splits);
    return;
  }
  if (const int cs = attention_cluster_splits(a)) {
    const int n = attention_decode_width(a);
    const dim3 grid(static_cast<unsigned>(a.T * a.Hq), static_cast<unsigned>(cs));
    const dim3 cluster(1, static_cast<unsigned>(cs), 1);
    if (attention_cluster_warps(a) == 16)
      launch_in(attention_decode_of<16, true>(n, a.T), grid, 32 * 16, 0, cluster, s, a, scratch, counters);
    else
      launch_in(attention_decode_of<8, true>(n, a.T), grid, 32 * 8, 0, cluster, s, a, scratch, counters);
    return;
  }
  const int splits = attention_splits(a);
  dim3 grid(static_cast<unsigned>(a.T * a.Hq), static_cast<unsigned>(splits));
  if (const int n = attention_decode_width(a)) {
    launch(attention_decode_of<kDecodeWarps, false>(n, a.T), grid, 32 * kDecodeWarps, 0, s, a, scratch, counters);
    return;
  }
  const size_t smem = sizeof(float) * (a.D + kAttnWarps * a.Dv + 2 * kAttnWarps);
  static bool raised = false;
  if (!raised) {
    cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
    raised = true;
  }
  launch(attention_kernel, grid, 32 * kAttnWarps, smem, s, a, scratch, counters);
}

void binary(Elementwise op, const float* a, const float* b, int64_t n, int64_t m, float* y, cudaStream_t s) {
  if (n == 0) return;
  launch(binary_kernel, blocks_for(n), kThreads, 0, s, op, a, b, n, m, y);
}
void scale(const float* a, float v, int64_t n, float* y, cudaStream_t s) {
  if (n == 0) return;
  launch(scale_kernel, blocks_for(n), kThreads, 0, s, a, v, n, y);
}
void unary(int op, const float* a, int64_t n, float* y, cudaStream_t s) {
  if (n == 0) return;
  launch(unary_kernel, blocks_for(n), kThreads, 0, s, op, a, n, y);
}
void sum_parts(const SumPartsJob& j, cudaStream_t s) {
  int64_t most = 0;
  for (int g = 0; g < j.count; g++) most = std::max(most, j.T * j.N[g]);
  if (most == 0) return;
  launch(sum_parts_kernel, dim3(static_cast<unsigned>(blocks_for((most + 3) / 4)), static_cast<unsigned>(j.count)),
         kThreads, 0, s, j);
}
void gated(int op, const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t cols, int64_t n, float* y,
           cudaStream_t s, int64_t g_parts, int64_t u_parts) {
  if (n == 0) return;
  launch(g_parts || u_parts ? gated_kernel<true> : gated_kernel<false>, blocks_for(n), kThreads, 0, s, op, g, ldg,
         g_parts, u, ldu, u_parts, cols, n, y);
}
void softcap(const float* a, float cap, int64_t n, float* y, cudaStream_t s) {
  if (n == 0) return;
  launch(softcap_kernel, blocks_for(n), kThreads, 0, s, a, cap, n, y);
}
void softmax(const float* a, int64_t rows, int64_t D, float* y, cudaStream_t s) {
  if (rows == 0) return;
  launch(softmax_kernel, static_cast<unsigned>(rows), D >= 4096 ? 1024 : 256, 0, s, a, D, y);
}
size_t topk_scratch_floats(int64_t rows, int64_t N, int k) {
  return k == 1 && N >= 16384 && rows <= 64 ? static_cast<size_t>(2 * rows * kArgmaxSlices) : 0;
}

void topk(const float* a, int64_t rows, int64_t N, int k, float* values, int32_t* indices, float* scratch,
          cudaStream_t s) {
  if (rows == 0) return;
  if (N <= kRankTopkMax && rows <= 65535) {  // rows are the grid's second dimension
    const dim3 grid(static_cast<unsigned>((N + kRankPerBlock - 1) / kRankPerBlock), static_cast<unsigned>(rows));
    launch(topk_rank_kernel, grid, kRankThreads, N * sizeof(float), s, a, N, k, values, indices);
    return;
  }
  if (topk_scratch_floats(rows, N, k)) {
    float* sv = scratch;
    int* si = reinterpret_cast<int*>(scratch + rows * kArgmaxSlices);
    launch(argmax_slices_kernel, dim3(kArgmaxSlices, static_cast<unsigned>(rows)), 256, 0, s, a, N, kArgmaxSlices, sv, si);
    launch(argmax_merge_kernel, static_cast<unsigned>(rows), 128, 0, s, sv, si, kArgmaxSlices, values, indices);
    return;
  }
  launch(topk_kernel, static_cast<unsigned>(rows), N >= 4096 ? 1024 : 256, 0, s, a, N, k, values, indices);
}
void combine_rows(const float* rows, const float* weights, int64_t T, int64_t k, int64_t D, float* out,
                  cudaStream_t s) {
  if (T * D == 0) return;
  launch(combine_rows_kernel, blocks_for(T * D), kThreads, 0, s, rows, weights, T, k, D, out);
}
void combine_add_norm(const float* rows, const float* weights, const float* shared, const float* x, int64_t T,
                      int64_t k, int64_t D, const float* w, float eps, float* y, float* n, cudaStream_t s) {
  if (T * D == 0) return;
  launch(combine_add_norm_kernel, static_cast<unsigned>(T), D >= 1024 ? 512 : 128, 0, s, rows, weights, shared, x, k,
         D, w, eps, y, n);
}
static int combine_post_norms_threads(int64_t D) {
  return D >= 1024 ? 512 : 128;
}
int64_t combine_post_norms_tmp_floats(int64_t D) {
  return D <= kRowRegs * combine_post_norms_threads(D) ? D : 2 * D;
}
void combine_post_norms(const float* rows, const float* weights, const float* dense, int64_t T, int64_t k, int64_t D,
                        const float* w_dense, const float* w_routed, const float* x, const float* w, float eps,
                        float scale, float* y, const float* w2, float* n, float* tmp, cudaStream_t s) {
  if (T * D == 0) return;
  launch(long_norm_row(D) ? combine_post_norms_kernel<kNormHeldLong> : combine_post_norms_kernel<kNormHeld>,
         static_cast<unsigned>(T), combine_post_norms_threads(D), 0, s, rows, weights, dense, k, D, w_dense,
         w_routed, x, w, eps, scale, y, w2, n, tmp);
}
static int rms_norm_many_threads(int64_t D) {
  return D >= 1024 ? 512 : 128;
}
void rms_norm_many(const float* x, int64_t ldx, int64_t rows, int64_t D, float eps, const NormOuts& outs,
                   cudaStream_t s) {
  if (rows == 0) return;
  launch(rms_norm_many_kernel, static_cast<unsigned>(rows), rms_norm_many_threads(D), 0, s, x, ldx, D, eps,
         outs);
}
void add_rms_norm_many(const float* x, const float* f, const float* w, int64_t rows, int64_t D, float eps,
                       float scale, float* y, const NormOuts& outs, cudaStream_t s) {
  if (rows == 0) return;
  launch(long_norm_row(D) ? add_rms_norm_many_kernel<kNormHeldLong> : add_rms_norm_many_kernel<kNormHeld>,
         static_cast<unsigned>(rows), rms_norm_many_threads(D), 0, s, x, f, w, D, eps, scale, y, outs);
}
void gather_rows(const int32_t* table, int64_t R, int64_t C, const int32_t* ids, int64_t n, int32_t* out, int* bad,
                 cudaStream_t s) {
  if (n * C == 0) return;
  launch(gather_rows_kernel, blocks_for(n * C), kThreads, 0, s, table, R, C, ids, n, out, bad);
}
void scatter(const float* values, const int32_t* index, int64_t n, float* out, int64_t V, int* bad, cudaStream_t s) {
  if (n == 0) return;
  launch(scatter_kernel, blocks_for(n), kThreads, 0, s, values, index, n, out, V, bad);
}

void masked_logits(const float* y, const Weight& table, int64_t V, int64_t K, const int32_t* groups, int64_t C,
                   int64_t per, const int32_t* clusters, int k, float* logits, int* bad, cudaStream_t s) {
  if (V == 0) return;
  MaskedLogitsArgs a{};
  a.y = y;
  a.w = table;
  a.V = V;
  a.K = K;
  a.C = C;
  a.per = per;
  a.groups = groups;
  a.clusters = clusters;
  a.k = k;
  a.split = static_cast<int>((per + kMaskedRowsPerBlock - 1) / kMaskedRowsPerBlock);
  // About a wave of fill blocks, each over whole clusters.
  const int64_t fill_blocks = std::max<int64_t>(1, std::min<int64_t>(C, 2 * g_sms));
  a.fill_span = (C + fill_blocks - 1) / fill_blocks;
  a.vec = table.bits == 0 && table.type == kBF16 && K % 8 == 0 && table.ld % 8 == 0 &&
          reinterpret_cast<uintptr_t>(table.data) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
  a.logits = logits;
  a.bad = bad;
  const int64_t blocks = int64_t(k) * a.split + (C + a.fill_span - 1) / a.fill_span;
  launch(masked_logits_kernel, static_cast<unsigned>(blocks), kMaskedThreads, 0, s, a);
}

void route(const RouteArgs& a, cudaStream_t s) {
  if (a.T == 0) return;
  const size_t smem = sizeof(float) * (2 * a.E + a.groups);
  launch(route_kernel, static_cast<unsigned>(a.T), kThreads, smem, s, a);
}

void kv_write(const KvWriteArgs& a, cudaStream_t s) {
  if (a.T * a.H == 0) return;
  launch(kv_write_kernel, static_cast<unsigned>(a.T * a.H), 128, 0, s, a);
}
void forget_positions(int32_t* slot_pos, int64_t C, int64_t n, cudaStream_t s) {
  if (C == 0) return;
  launch(forget_positions_kernel, blocks_for(C), kThreads, 0, s, slot_pos, C, n);
}

// ---- Sampling on the device ----

__global__ void logsumexp_kernel(const float* a, int64_t N, float scale, float* out) {
  pdl_begin();
  __shared__ float scratch[32];
  const float* x = a + blockIdx.x * N;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) mx = fmaxf(mx, x[i]);
  mx = block_max(mx, scratch);
  if (mx == -INFINITY) {  // uniform across the block
    if (threadIdx.x == 0) out[blockIdx.x] = -INFINITY;
    return;
  }
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) sum += expf(scale * (x[i] - mx));
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = scale * mx + logf(sum);
}

__global__ void residual_mass_kernel(const float* p, const float* q, int64_t N, float ps, float pl, float qs,
                                     float ql, float* out) {
  pdl_begin();
  __shared__ float scratch[32];
  const float* a = p + blockIdx.x * N;
  const float* b = q + blockIdx.x * N;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    const float pa = isfinite(a[i]) ? expf(ps * a[i] - pl) : 0.0f;
    const float qb = isfinite(b[i]) ? expf(qs * b[i] - ql) : 0.0f;
    sum += fmaxf(0.0f, pa - qb);
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = sum;
}

__global__ void mask_tokens_kernel(float* x, int64_t N, const uint32_t* bits) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < N;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (!((bits[i >> 5] >> (i & 31)) & 1u)) x[i] = -INFINITY;
}

// One thread per (distinct) id. The explicit _rn intrinsics keep the host sampler's rounding (no fused multiply-add).
__global__ void penalize_kernel(float* x, int64_t N, const int32_t* ids, const int32_t* counts, int64_t n,
                                float repeat, float presence, float frequency) {
  pdl_begin();
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = ids[j];
    if (t < 0 || t >= N) continue;
    float l = x[t];
    if (repeat != 1.0f) l = l < 0 ? __fmul_rn(l, repeat) : __fdiv_rn(l, repeat);
    l = __fsub_rn(l, presence);
    l = __fsub_rn(l, __fmul_rn(frequency, static_cast<float>(counts[j])));
    x[t] = l;
  }
}

// Sorts one chunk of (value, index) pairs of a row descending in shared memory (bitonic) and writes its best k.
// in_i null: indices are the column numbers. Padding sorts last (-inf with the largest index).
__global__ void __launch_bounds__(1024) topk_chunk_kernel(const float* in_v, const int32_t* in_i, int64_t L, int k,
                                                         float* out_v, int32_t* out_i, int64_t chunks) {
  pdl_begin();
  __shared__ float sv[kTopkChunk];
  __shared__ int32_t si[kTopkChunk];
  const int64_t row = blockIdx.y, chunk = blockIdx.x, start = chunk * kTopkChunk;
  const float* rv = in_v + row * L;
  const int32_t* ri = in_i ? in_i + row * L : nullptr;
  for (int t = threadIdx.x; t < kTopkChunk; t += blockDim.x) {
    const int64_t c = start + t;
    if (c < L) {
      sv[t] = rv[c];
      si[t] = ri ? ri[c] : static_cast<int32_t>(c);
    } else {
      sv[t] = -INFINITY;
      si[t] = INT_MAX;
    }
  }
  __syncthreads();
  for (int size = 2; size <= kTopkChunk; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < kTopkChunk / 2; t += blockDim.x) {
        const int i = 2 * stride * (t / stride) + (t % stride), j = i + stride;
        const bool descending = (i & size) == 0;
        const bool swap = descending ? better(sv[j], si[j], sv[i], si[i]) : better(sv[i], si[i], sv[j], si[j]);
        if (swap) {
          const float v = sv[i];
          sv[i] = sv[j];
          sv[j] = v;
          const int32_t x = si[i];
          si[i] = si[j];
          si[j] = x;
        }
      }
      __syncthreads();
    }
  }
  float* ov = out_v + (row * chunks + chunk) * k;
  int32_t* oi = out_i + (row * chunks + chunk) * k;
  for (int t = threadIdx.x; t < k; t += blockDim.x) {
    ov[t] = sv[t];
    oi[t] = si[t];
  }
}

void logsumexp(const float* a, int64_t rows, int64_t N, float scale, float* out, cudaStream_t s) {
  if (rows == 0) return;
  launch(logsumexp_kernel, static_cast<unsigned>(rows), N >= 4096 ? 1024 : 256, 0, s, a, N, scale, out);
}
void residual_mass(const float* p, const float* q, int64_t rows, int64_t N, float p_scale, float p_shift,
                   float q_scale, float q_shift, float* out, cudaStream_t s) {
  if (rows == 0) return;
  launch(residual_mass_kernel, static_cast<unsigned>(rows), 256, 0, s, p, q, N, p_scale, p_shift, q_scale, q_shift,
         out);
}
void mask_tokens(float* x, int64_t N, const uint32_t* bits, cudaStream_t s) {
  if (N == 0) return;
  launch(mask_tokens_kernel, blocks_for(N), kThreads, 0, s, x, N, bits);
}
void penalize(float* x, int64_t N, const int32_t* ids, const int32_t* counts, int64_t n, float repeat,
              float presence, float frequency, cudaStream_t s) {
  if (n == 0) return;
  launch(penalize_kernel, blocks_for(n), kThreads, 0, s, x, N, ids, counts, n, repeat, presence, frequency);
}

int64_t topk_chunked_scratch(int64_t rows, int64_t N, int k) {
  return rows * ((N + kTopkChunk - 1) / kTopkChunk) * k;
}
void topk_chunked(const float* a, int64_t rows, int64_t N, int k, float* values, int32_t* indices, float* scratch_v,
                  int32_t* scratch_i, cudaStream_t s) {
  if (rows == 0) return;
  // Each pass leaves ceil(L / chunk) * k <= L / 2 + chunk / 2 < L survivors per row (k <= chunk / 2).
  const float* in_v = a;
  const int32_t* in_i = nullptr;
  int64_t L = N;
  int buf = 0;
  const int64_t half = topk_chunked_scratch(rows, N, k);
  for (;;) {
    const int64_t chunks = (L + kTopkChunk - 1) / kTopkChunk;
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(rows));
    if (chunks == 1) {
      launch(topk_chunk_kernel, grid, 1024, 0, s, in_v, in_i, L, k, values, indices, 1);
      return;
    }
    float* ov = scratch_v + buf * half;
    int32_t* oi = scratch_i + buf * half;
    launch(topk_chunk_kernel, grid, 1024, 0, s, in_v, in_i, L, k, ov, oi, chunks);
    in_v = ov;
    in_i = oi;
    L = chunks * k;
    buf ^= 1;
  }
}

}  // namespace vatic::cuda
