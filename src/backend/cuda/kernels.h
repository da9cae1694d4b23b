#pragma once
// Launchers of the CUDA kernels (kernels.cu, compiled by nvcc). Plain structs and raw device pointers only, so the
// backend class (cuda_backend.cpp, C++20 with g++) and the kernels share nothing but this header. Every launcher
// queues work on `stream` and returns at once; shapes were checked by the caller.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vatic::cuda {

// Element types as the kernels see them (the values of vatic::DType).
enum ElemType : int { kF32 = 0, kBF16 = 1, kF16 = 2, kI32 = 3, kI64 = 4, kU8 = 5, kI8 = 6, kU32 = 7, kF8E4M3 = 8 };

constexpr int kMaxDims = 6;

// A strided view: element (i0, i1, ...) is at data + Σ i_d · stride[d] elements.
struct View {
  void* data = nullptr;
  int type = kF32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
};

// A weight matrix W [N, K] as the matmul kernels read it (one expert of a stacked [E, N, K] weight is at
// expert_stride elements / words further on). Dense: `data` of `type`, row stride ld (elements). Quantized
// (bits 4 or 8): `data` U32 words, ld in words; scales/biases of scale_type, row stride lds, expert stride
// expert_stride_s; group of `group` inputs.
struct Weight {
  const void* data = nullptr;
  int type = kBF16;
  int64_t ld = 0;
  int64_t expert_stride = 0;
  int bits = 0;
  int group = 0;
  const void* scales = nullptr;
  const void* biases = nullptr;
  int scale_type = kBF16;
  int64_t lds = 0;
  int64_t expert_stride_s = 0;
  bool computed = false;  // written by the kernel just before (Linear::computed): nothing reads it early
};

// Launch each kernel with programmatic stream serialization (compute capability 9.0 and later): the next kernel on
// the stream is launched while this one runs and waits, on the device, for it to finish.
void set_programmatic_launch(bool on);
// bf16 GEMVs of up to 8 input rows on tensor cores (each input split into three bf16 parts: exact products), or,
// off (the default), on the f32 FMA units. Decode and verification rows take the same path either way, so greedy
// speculative decoding equals plain decoding under both.
void set_gemv_tensor_cores(bool on);
// With programmatic launch, a chunked GEMV issues its first weight loads before it waits on the kernel before it
// (whose tail then overlaps them), unless a weight is `computed`. The backend turns it on (docs/gpu.md).
void set_gemv_early(bool on);
// Decode attention over a short run of slots in thread block clusters (on by default), and verification's
// attention in the register-lean form of the decode kernel (on by default; the same bits either way).
void set_cluster_attention(bool on, bool lean = true);
// Decode attention over long caches by groups of the query heads that share a key head (on by default).
void set_group_attention(bool on, int blocks = 0, int min_slots = 0, int min_keys = 0);
// A prompt's attention takes its query tiles in pairs (first with last) once they number four times the
// multiprocessors (on by default; the same bits either way), and computes its two products on the tensor cores in
// three tf32 parts each (`tensor_cores`; otherwise f32 multiply-adds on the CUDA cores). On the tensor cores, a
// prompt with fewer tiles splits the tiles that see the most keys into two blocks each, merged by a second launch
// (`split`; the scratch of attention_scratch_floats).
void set_prefill_attention(bool pairs, int multiprocessors, bool tensor_cores, bool split = true);
// How finely work is split (values <= 0 keep the defaults): the warps a chunked GEMV aims for when splitting each
// row's K, the fewest slots per split of decode attention, and the fewest weights of a quantized GEMV launch that
// reads the input's digits.
void set_launch_shape(int gemv_warps, int split_keys, int64_t digits_min_weights = 0);
// The residual norm kernel asks L2 for its residual row and norm weights before waiting on the kernel before it
// (on by default; the same bits either way).
void set_norm_prefetch(bool on);
// The input rows of a verification's chunked bf16 GEMV that one block takes at most (default 4): more rows go in
// groups over blocks that read each weight once from DRAM and again from L2 (rows <= 0: every block takes all of
// them). Each row's sum is the same whatever the grouping.
void set_gemv_group_rows(int rows);
// For measurements: the chunks of a row a bf16 routed-expert GEMV asks for at once (2 or 4, default 4; other
// values keep it; the same bits either way).
void set_expert_chunks(int chunks);
// For measurements: decode's bf16 gated, multiplied and several-matrix GEMVs without their bound of five blocks
// per SM (the same arithmetic).
void set_gemv_decode_bound(bool on);
// Kernel trace for measurements: every launch from now on writes (source line of its pdl_begin << 32 | grid
// width, global timer ns) to records[2i], records[2i + 1] (device-visible host memory) for its first `capacity`
// launches. False where the device refused.
bool set_kernel_trace(unsigned long long* records, unsigned capacity);

void copy(const View& src, const View& dst, cudaStream_t s);
void fill(const View& dst, float value, cudaStream_t s);

// y[t, n] (+)= Σ_k x[t, k] · W[n, k] for t < T (T ≤ 8): weights read once for all T rows.
//
// Quantized matrices of at least 2^25 weights read the input as 8-bit digits (dp4a) when `digits` is a device
// buffer of gemv_digits_bytes() that no other stream uses (the GEMV writes it in a launch of its own first); with
// null they take the f32 path. The choice depends on the matrix and on `digits` only, never on T.
size_t gemv_digits_bytes();
void gemv(const float* x, int64_t ldx, int T, const Weight& w, int64_t N, int64_t K, float* y, int64_t ldy,
          bool accumulate, cudaStream_t s, void* digits = nullptr);
// The gated GEMV: y[t, n] = act(x[t] · gate[n]) · (x[t] · up[n]) with `up`, else act(x[t] · gate[n]) · m[t, n]
// (row stride ldm); act is a vatic::Unary value. Returns false, launching nothing, when the weights are not of a
// layout it reads (T above 8, unaligned rows, gate and up of different encodings): the caller composes instead.
bool gemv_gated(const float* x, int64_t ldx, int T, const Weight& gate, const Weight* up, const float* m,
                int64_t ldm, int act, int64_t N, int64_t K, float* y, int64_t ldy, cudaStream_t s,
                void* digits = nullptr);
// Whether two weights go through one code path of the chunked GEMV (one gemv_many launch can take both).
bool same_encoding(const Weight& a, const Weight& b);
// Several matrices of one input in one launch: y[i][t, n] = x[t] · w[i][n] for n < N[i], i < count (at most 3).
// Returns false, launching nothing, where gemv_gated would (or when the matrices' encodings differ).
bool gemv_many(const float* x, int64_t ldx, int T, int count, const Weight* w, const int64_t* N, int64_t K,
               float* const* y, const int64_t* ldy, cudaStream_t s, void* digits = nullptr);
// The residual add of a normed branch whose last op is a GEMV, in that GEMV's launch: f = x · Wᵀ (T ≤ 8 rows of
// D = N outputs, written to f), y = (res + rms_norm(f)·w) · scale and, with n, n = rms_norm(y)·w2 (w, w2 may be
// null). The block that finishes last normalises the rows, one warp per row: it is told so by `counter`, a device
// word that is zero before the launch and that it zeroes again (kernels on one stream run one after another, so
// one word serves every launch). Returns false, launching nothing, where gemv_gated would.
struct ResidualNorm {
  const float* res = nullptr;
  const float* w = nullptr;
  const float* w2 = nullptr;
  float eps = 0.0f, scale = 1.0f;
  float* f = nullptr;
  float* y = nullptr;
  float* n = nullptr;
  unsigned* counter = nullptr;
};
bool gemv_residual_norm(const float* x, int64_t ldx, int T, const Weight& w, int64_t N, int64_t K,
                        const ResidualNorm& r, cudaStream_t s, void* digits = nullptr);
// Routed rows: y[r, :] = x[r / per, :] · W[experts[r]]ᵀ for r < R. `distinct` (device, or null) is increased by
// the number of distinct experts among experts[0..R).
// With `up`: y = act(x · wᵀ) ⊙ (x · upᵀ) per routed row (up of w's shape and encoding), in one launch. Each
// distinct expert adds `matrices` to `distinct` (2 for a gate and up stored apart, 1 for halves of one stack).
void gemv_experts(const float* x, int64_t ldx, int64_t per, const int32_t* experts, int64_t R, const Weight& w,
                  int64_t N, int64_t K, float* y, int64_t ldy, unsigned long long* distinct, cudaStream_t s,
                  const Weight* up = nullptr, int act = 0, int matrices = 1);
// Rows [n0, n0 + n) of W (expert 0) dequantized / converted to F32 [n, K] (row stride K).
// x [T, K] (row stride ldx) as three bf16 planes [3][T, K] (out, 6·T·K bytes) whose sum is x exactly: the
// prefill GEMM of bf16 weights runs on tensor cores as three bf16 GEMMs with exact products.
void split_bf16x3(const float* x, int64_t ldx, int64_t T, int64_t K, void* out, cudaStream_t s);
void dequantize_rows(const Weight& w, int64_t n0, int64_t n, int64_t K, float* out, cudaStream_t s);

// out[i, :] = table[ids[i], :] · scale (dense of any float type, or quantized); an id outside [0, V) writes zeros,
// sets bad_id[0] = 1 and bad_id[1] to the id.
void embedding(const Weight& table, int64_t V, int64_t D, const int32_t* ids, int64_t n, float scale, float* out,
               int64_t ldo, int* bad_id, cudaStream_t s);
// y = x + f and n = rms_norm(y)·w over rows of D, with rms_norm's arithmetic (n has its bits).
void add_norm(const float* x, const float* f, const float* w, int64_t rows, int64_t D, float eps, float* y, float* n,
              cudaStream_t s);
void rms_norm(const float* x, int64_t ldx, const float* w, int64_t rows, int64_t D, float eps, float* y, int64_t ldy,
              cudaStream_t s);
// rms_norm of rows of D (row stride ldx) into up to four contiguous outputs, y[j] = rms_norm(x)·(w[j] or 1)·s[j] (the
// scale skipped where it is 1), with the row's sum of squares taken once.
constexpr int kMaxNormOuts = 4;
struct NormOuts {
  const float* w[kMaxNormOuts] = {};
  float s[kMaxNormOuts] = {};
  float* y[kMaxNormOuts] = {};
  int count = 0;
};
void rms_norm_many(const float* x, int64_t ldx, int64_t rows, int64_t D, float eps, const NormOuts& outs,
                   cudaStream_t s);
// add_rms_norm, then rms_norm_many of y (rows of D, y contiguous), in one launch with the bits of those two.
void add_rms_norm_many(const float* x, const float* f, const float* w, int64_t rows, int64_t D, float eps,
                       float scale, float* y, const NormOuts& outs, cudaStream_t s);
// y = (x + rms_norm(f)·w) · scale over rows of D.
void add_rms_norm(const float* x, const float* f, const float* w, int64_t rows, int64_t D, float eps, float scale,
                  float* y, cudaStream_t s);
// add_rms_norm, then n = rms_norm(y)·w2 (w2 may be null) over the same rows.
// With f_parts > 0 the branch is three products, f, f + f_parts and f + 2·f_parts (each rows × D), summed first.
void add_rms_norm_norm(const float* x, const float* f, const float* w, int64_t rows, int64_t D, float eps,
                       float scale, float* y, const float* w2, float* n, cudaStream_t s, int64_t f_parts = 0);
// y = rope(rms_norm(x)·w) for contiguous x, y [T, H, D] (D <= kMaxNormRopeD), n frequencies.
void rms_norm_rope(const float* x, const float* w, int64_t T, int64_t H, int64_t D, float eps, const int32_t* pos,
                   const float* inv_freq, int64_t n, bool interleaved, float* y, cudaStream_t s);
constexpr int64_t kMaxNormRopeD = 8192;
// rms_norm_rope of up to three contiguous [T, H[g], D] tensors in one launch; a tensor with rope[g] false is only
// normed (as rms_norm). w[g] may be null. A tensor with cache[g] set goes there instead of y[g], into the slots
// kv_write would put it in (cache [C, H[g], D] contiguous; slot_pos marked by tensor `marks`; a position outside
// the cache is skipped and reported through bad as kv_write does).
struct NormRopeJob {
  const float* x[3];
  const float* w[3];
  float* y[3];
  int64_t H[3];
  bool rope[3];
  int count;
  int64_t T, D;
  float eps;
  float* cache[3];
  int64_t C;
  bool ring;
  int marks;
  int32_t* slot_pos;
  int* bad;
};
void rms_norm_rope_many(const NormRopeJob& j, const int32_t* pos, const float* inv_freq, int64_t n, bool interleaved,
                        cudaStream_t s);
// Multi-head latent attention's step between its projections, one launch: for each token t, the cache entry
// [rms_norm(kv[t, :L])·w | rope(kv[t, L:L+R])] into keys [C, 1, L + R] at the slot of slot_pos_of[t] (as kv_write:
// slot_pos marked, a position outside the cache skipped and reported through bad), and each head of q [T, H, R]
// (strides sqT, sqH, 1) rotated into q_out (strides soT, soH, 1); rotations at pos[t], n = R / 2 frequencies.
struct LatentEntryArgs {
  const float* kv;
  int64_t ldkv, T, L, R;
  const float* w;
  float eps;
  const float* q;
  int64_t H, sqT, sqH;
  float* q_out;
  int64_t soT, soH;
  const int32_t* pos;
  const int32_t* slot_pos_of;
  const float* inv_freq;
  int64_t n;
  bool interleaved;
  float* keys;
  int64_t C;
  bool ring;
  int32_t* slot_pos;
  int* bad;
};
void latent_entry(const LatentEntryArgs& a, cudaStream_t s);
// x [T, H, D] with strides (sT, sH, 1); n frequencies.
void rope(float* x, int64_t T, int64_t H, int64_t D, int64_t sT, int64_t sH, const int32_t* pos, const float* inv_freq,
          int64_t n, bool interleaved, cudaStream_t s);

struct AttentionArgs {
  const float* q;
  int64_t T, Hq, D, sqT, sqH;
  const float* k;
  int64_t S, Hkv, skS, skH;
  const float* v;
  int64_t Dv, svS, svH;
  const int32_t* q_pos;
  const int32_t* k_pos;
  float scale;
  int window;
  float* out;
  int64_t soT, soH;
};
// `scratch` holds attention_scratch_floats(a) floats (none when it is 0: the keys are not split). With split keys
// the last block of each (query, head) to finish merges the splits, told so by `counters` (kAttentionCounters
// device words, zero before the launch and zeroed again by it).
size_t attention_scratch_floats(const AttentionArgs& a);
void attention(const AttentionArgs& a, float* scratch, unsigned* counters, cudaStream_t s);
constexpr int kAttentionCounters = 1024;
constexpr int kMaxAttentionDv = 512;
constexpr int kMaxAttentionD = 1024;

enum Elementwise : int { kAdd, kMul };
void binary(Elementwise op, const float* a, const float* b, int64_t n, int64_t m, float* y, cudaStream_t s);
void scale(const float* a, float v, int64_t n, float* y, cudaStream_t s);
// op: the values of vatic::Unary.
void unary(int op, const float* a, int64_t n, float* y, cudaStream_t s);
// y = (p + p[T·N]) + p[2·T·N] for up to three outputs of T rows: the three products of a prompt's stacked bf16
// parts, [3, T, N] each, summed into rows of N at y + r·ldy.
struct SumPartsJob {
  const float* parts[3] = {};
  float* y[3] = {};
  int64_t N[3] = {}, ldy[3] = {};
  int64_t T = 0;
  int count = 0;
};
void sum_parts(const SumPartsJob& j, cudaStream_t s);
// y[i] = act(g) · u over n elements in rows of `cols`: row r of g at g + r·ldg, of u at u + r·ldu, of y at y + r·cols.
// With g_parts (u_parts) > 0, g (u) is the sum of three products at g, g + g_parts and g + 2·g_parts.
void gated(int op, const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t cols, int64_t n, float* y,
           cudaStream_t s, int64_t g_parts = 0, int64_t u_parts = 0);
void softcap(const float* a, float cap, int64_t n, float* y, cudaStream_t s);
void softmax(const float* a, int64_t rows, int64_t D, float* y, cudaStream_t s);
// Rows of up to kRankTopkMax columns take one pass for any k (each element's rank counted in shared memory); longer
// ones k passes, or two passes over many blocks for k = 1 (`scratch`: topk_scratch_floats(rows, N, k) floats).
constexpr int64_t kRankTopkMax = 4096;
size_t topk_scratch_floats(int64_t rows, int64_t N, int k);
void topk(const float* a, int64_t rows, int64_t N, int k, float* values, int32_t* indices, float* scratch,
          cudaStream_t s);
void combine_rows(const float* rows, const float* weights, int64_t T, int64_t k, int64_t D, float* out,
                  cudaStream_t s);
// y = x + (combine_rows(rows, weights) + shared) (shared may be null) and n = rms_norm(y)·w over rows of D, with the
// bits of combine_rows, add and add_norm.
void combine_add_norm(const float* rows, const float* weights, const float* shared, const float* x, int64_t T,
                      int64_t k, int64_t D, const float* w, float eps, float* y, float* n, cudaStream_t s);
// combine_rows, then y = add_rms_norm(x, rms_norm(dense)·w_dense + rms_norm(combined)·w_routed) with w and
// scale (and with n, n = rms_norm(y)·w2) in one launch, with the bits of those kernels. tmp holds
// [T, combine_post_norms_tmp_floats(D)] floats: the branches' sum, and the combined row where a row is too
// long to be held in registers.
int64_t combine_post_norms_tmp_floats(int64_t D);
void combine_post_norms(const float* rows, const float* weights, const float* dense, int64_t T, int64_t k, int64_t D,
                        const float* w_dense, const float* w_routed, const float* x, const float* w, float eps,
                        float scale, float* y, const float* w2, float* n, float* tmp, cudaStream_t s);

// out[i, :] = table[ids[i], :] (I32 rows of C); a row outside [0, R) writes -1s and sets bad[0] = 1, bad[1] = it.
void gather_rows(const int32_t* table, int64_t R, int64_t C, const int32_t* ids, int64_t n, int32_t* out, int* bad,
                 cudaStream_t s);
// out[index[i]] = values[i]; an index outside [0, V) is skipped and reported through bad as above.
void scatter(const float* values, const int32_t* index, int64_t n, float* out, int64_t V, int* bad, cudaStream_t s);

// Backend::masked_logits in one launch: blocks for the tokens of each chosen cluster (a warp takes four tokens'
// dot products with y at once) and blocks that write -inf for the tokens of every other cluster. Up to
// kMaxMaskedClusters clusters; a cluster or token id out of range is reported through bad as above.
constexpr int64_t kMaxMaskedClusters = 8192;
void masked_logits(const float* y, const Weight& table, int64_t V, int64_t K, const int32_t* groups, int64_t C,
                   int64_t per, const int32_t* clusters, int k, float* logits, int* bad, cudaStream_t s);

struct RouteArgs {
  const float* a;
  int64_t T, E;
  int kind;  // 0 softmax, 1 sigmoid
  int k;
  bool renormalize;
  float scale;
  const float* bias;          // or null
  const float* expert_scale;  // or null
  int groups, groups_kept;
  float* weights;
  int32_t* experts;
};
void route(const RouteArgs& a, cudaStream_t s);
constexpr int kMaxRouteExperts = 4096;

// KV cache write: row t of k [T, H, D] / v [T, H, Dv] (rows of D / Dv contiguous) goes to slot positions[t]
// (modulo C when ring) of keys [C, H, D] / values [C, H, Dv] (contiguous), and slot_pos[slot] = positions[t].
// A position outside the cache is skipped and reported through bad.
struct KvWriteArgs {
  const float* k;
  int64_t skT, skH;
  const float* v;
  int64_t svT, svH;
  const int32_t* positions;
  int64_t T, H, D, Dv, C;
  bool ring;
  float* keys;
  float* values;
  int32_t* slot_pos;
  int* bad;
};
void kv_write(const KvWriteArgs& a, cudaStream_t s);
void forget_positions(int32_t* slot_pos, int64_t C, int64_t n, cudaStream_t s);

// Sampling on the device (see Backend::logsumexp / mask_tokens / penalize).
void logsumexp(const float* a, int64_t rows, int64_t N, float scale, float* out, cudaStream_t s);
void residual_mass(const float* p, const float* q, int64_t rows, int64_t N, float p_scale, float p_shift,
                   float q_scale, float q_shift, float* out, cudaStream_t s);
void mask_tokens(float* x, int64_t N, const uint32_t* bits, cudaStream_t s);
void penalize(float* x, int64_t N, const int32_t* ids, const int32_t* counts, int64_t n, float repeat,
              float presence, float frequency, cudaStream_t s);
// Top-k for k up to kMaxChunkedTopk: each chunk of kTopkChunk columns is sorted in shared memory and keeps its best
// k, and the survivors are reduced the same way until one chunk is left. Same order as topk (ties: lower index).
// scratch_v / scratch_i: two buffers each of topk_chunked_scratch(rows, N, k) elements.
constexpr int kTopkChunk = 2048;
constexpr int kMaxChunkedTopk = kTopkChunk / 2;
int64_t topk_chunked_scratch(int64_t rows, int64_t N, int k);
void topk_chunked(const float* a, int64_t rows, int64_t N, int k, float* values, int32_t* indices, float* scratch_v,
                  int32_t* scratch_i, cudaStream_t s);

}  // namespace vatic::cuda
