// The CUDA device backend: memory from a caching pool, every operation queued on one stream per device (the compute
// thread is the only one that queues work), cuBLAS for matmuls over many rows, our kernels (kernels.cu) for the
// rest. Nothing here waits for the device except download() and synchronize(): a forward pass is a stream of
// launches, which CUDA graphs can capture later.
#include "backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <utility>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/kernels.h"
#include "util/env.h"

namespace vatic {

namespace {

[[noreturn]] void cuda_fail(cudaError_t e, const char* what) {
  throw DeviceError(fmt::format("CUDA error in {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e)));
}
#define CUDA_OK(call, what)                   \
  do {                                        \
    cudaError_t err_ = (call);                \
    if (err_ != cudaSuccess) cuda_fail(err_, what); \
  } while (0)

// Whether environment variable `name` is set to `value`.
bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

// Fails with `what` when the last kernel launch did not start.
void check_launch(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) cuda_fail(e, what);
}

std::string gb(size_t bytes) { return fmt::format("{:.2f} GB", static_cast<double>(bytes) / 1e9); }

// Freed blocks are kept per size and handed out again (stream order makes reuse safe: one stream per device).
// Sizes round up to 512 bytes (small) or 2 MiB (large) so that similar requests share blocks.
class MemoryPool {
 public:
  explicit MemoryPool(int device) : device_(device) {}

  void* allocate(size_t bytes) {
    const size_t size = round(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    if (recording_ >= 0) {
      // A graph being recorded reuses its own freed blocks first; whatever it takes stays its own.
      auto a = arena_free_.lower_bound(size);
      if (a != arena_free_.end() && a->first <= size + size / 4) {
        void* p = a->second;
        arena_free_.erase(a);
        return p;
      }
      void* p = take_locked(size);
      owner_[p] = recording_;
      return p;
    }
    return take_locked(size);
  }

  void release(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto o = owner_.find(p);
    if (o != owner_.end()) {
      // A graph's block: free for the rest of its recording, then the graph's until the graph goes.
      if (o->second == recording_) arena_free_.emplace(sizes_.at(p), p);
      return;
    }
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    free_.emplace(it->second, p);
    cached_ += it->second;
    sizes_.erase(it);
  }

  // Blocks allocated between begin_arena(id) and end_arena() belong to graph `id` until drop_arena(id).
  void begin_arena(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    recording_ = id;
    arena_free_.clear();
  }
  void end_arena() {
    std::lock_guard<std::mutex> lock(mu_);
    recording_ = -1;
    arena_free_.clear();
  }
  void drop_arena(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = owner_.begin(); it != owner_.end();) {
      if (it->second != id) {
        ++it;
        continue;
      }
      void* p = it->first;
      const size_t size = sizes_.at(p);
      free_.emplace(size, p);
      cached_ += size;
      sizes_.erase(p);
      it = owner_.erase(it);
    }
  }

 private:
  void* take_locked(size_t size) {
    auto it = free_.lower_bound(size);
    if (it != free_.end() && it->first <= size + size / 4) {
      void* p = it->second;
      cached_ -= it->first;
      sizes_[p] = it->first;
      free_.erase(it);
      return p;
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_locked();
      e = cudaMalloc(&p, size);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      throw DeviceError(fmt::format("out of memory on cuda:{}: {} more requested, {} free of {}", device_, gb(size),
                                    gb(free), gb(total)));
    }
    sizes_[p] = size;
    in_use_ += size;
    return p;
  }

 public:
  size_t cached() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }

 private:
  static size_t round(size_t n) {
    if (n == 0) n = 1;
    if (n < (size_t(1) << 20)) return (n + 511) / 512 * 512;
    return (n + (size_t(2) << 20) - 1) / (size_t(2) << 20) * (size_t(2) << 20);
  }
  void release_locked() {
    cudaDeviceSynchronize();
    for (auto& [size, p] : free_) cudaFree(p);
    free_.clear();
    cached_ = 0;
  }

  int device_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::map<void*, size_t> sizes_;
  std::map<void*, int> owner_;             // blocks that belong to a graph
  std::multimap<size_t, void*> arena_free_;  // the recording graph's freed blocks
  int recording_ = -1;
  size_t cached_ = 0, in_use_ = 0;
};

class CudaStorage final : public Storage {
 public:
  CudaStorage(MemoryPool& pool, size_t bytes, Device device)
      : Storage(nullptr, bytes, device, false), pool_(pool) {
    data_ = pool_.allocate(bytes);
  }
  ~CudaStorage() override { pool_.release(data_); }

 private:
  MemoryPool& pool_;
};

cuda::ElemType elem(DType t) { return static_cast<cuda::ElemType>(static_cast<int>(t)); }

cuda::View view(const Tensor& t) {
  VATIC_CHECK(t.ndim() <= cuda::kMaxDims, "{} has more than {} dimensions", t.describe(), cuda::kMaxDims);
  cuda::View v;
  v.data = t.raw();
  v.type = elem(t.dtype());
  v.ndim = t.ndim();
  for (int d = 0; d < t.ndim(); d++) {
    v.shape[d] = t.dim(d);
    v.stride[d] = t.stride(d);
  }
  return v;
}

// W [N, K] (or stacked [E, N, K]) as the matmul kernels read it.
cuda::Weight weight(const Linear& w) {
  cuda::Weight r;
  VATIC_CHECK(w.weight.stride(-1) == 1, "weight {} rows must be contiguous", w.weight.describe());
  r.data = w.weight.raw();
  r.type = elem(w.weight.dtype());
  r.ld = w.weight.stride(-2);
  r.expert_stride = w.weight.ndim() == 3 ? w.weight.stride(0) : 0;
  r.computed = w.computed;
  if (w.quantized()) {
    VATIC_CHECK(w.weight.dtype() == DType::U32 && (w.bits == 4 || w.bits == 8) && w.group % (32 / w.bits) == 0 &&
                    w.scales.dtype() == w.biases.dtype() && w.scales.stride(-1) == 1 && w.biases.stride(-1) == 1 &&
                    w.scales.stride(-2) == w.biases.stride(-2) &&
                    (w.scales.dtype() == DType::BF16 || w.scales.dtype() == DType::F16 || w.scales.dtype() == DType::F32),
                "quantized weight {} ({} bits, group {}) has a layout the CUDA kernels do not take",
                w.weight.describe(), w.bits, w.group);
    r.bits = w.bits;
    r.group = w.group;
    r.scales = w.scales.raw();
    r.biases = w.biases.raw();
    r.scale_type = elem(w.scales.dtype());
    r.lds = w.scales.stride(-2);
    r.expert_stride_s = w.scales.ndim() == 3 ? w.scales.stride(0) : 0;
  } else {
    VATIC_CHECK(w.weight.dtype() == DType::F32 || w.weight.dtype() == DType::BF16 || w.weight.dtype() == DType::F16 ||
                    w.weight.dtype() == DType::F8_E4M3,
                "weight {}: unsupported dtype", w.weight.describe());
  }
  return r;
}

void check_rows(const Tensor& t, const char* what) {
  VATIC_CHECK(t.ndim() >= 1 && t.stride(-1) == 1, "{}: rows of {} must be contiguous", what, t.describe());
}
void check_f32_contiguous(const Tensor& t, const char* what) {
  VATIC_CHECK(t.dtype() == DType::F32 && t.is_contiguous(), "{} expects contiguous F32, got {}", what, t.describe());
}

// The residual-norm ops' operands: x, the branch f and the outputs y (and n) contiguous F32 of one size. Returns
// {rows, D} of f's last dimension.
std::pair<int64_t, int64_t> residual_rows(const char* op, const Tensor& x, const Tensor& f, const Tensor& y,
                                          const Tensor* n) {
  VATIC_CHECK(x.is_contiguous() && f.is_contiguous() && y.is_contiguous() && (!n || n->is_contiguous()) &&
                  x.dtype() == DType::F32 && f.dtype() == DType::F32 && x.numel() == f.numel() &&
                  y.numel() == x.numel() && (!n || n->numel() == x.numel()),
              "{} expects contiguous F32 of one shape, got {} and {}", op, x.describe(), f.describe());
  const int64_t D = f.dim(-1);
  return {f.numel() / std::max<int64_t>(D, 1), D};
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) : device_(Device::cuda(index)), index_(index), pool_(index) {
    bind_thread();
    cudaDeviceProp prop{};
    CUDA_OK(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
    description_ = fmt::format("{} ({})", prop.name, device_.str());
    // Programmatic dependent launch hides each kernel's launch behind the one before it (VATIC_PDL=0 turns it off).
    cuda::set_programmatic_launch(prop.major >= 9 && !env_is("VATIC_PDL", "0"));
    // Decode GEMVs that load their first weights before waiting on the kernel before them (VATIC_GEMV_EARLY=0 turns
    // it off).
    cuda::set_gemv_early(!env_is("VATIC_GEMV_EARLY", "0"));
    cuda::set_cluster_attention(!env_is("VATIC_CLUSTER_ATTENTION", "0"), !env_is("VATIC_LEAN_ATTENTION", "0"));
    cuda::set_group_attention(!env_is("VATIC_GROUP_ATTENTION", "0"), env_int("VATIC_GROUP_BLOCKS", 0, 1, 1 << 16),
                              env_int("VATIC_GROUP_MIN_SLOTS", 0, 1, 1 << 30),
                              env_int("VATIC_GROUP_MIN_KEYS", 0, 1, 256));
    cuda::set_prefill_attention(!env_is("VATIC_TILE_PAIRS", "0"), prop.multiProcessorCount,
                                prop.major >= 8 && !env_is("VATIC_TILE_MMA", "0"), !env_is("VATIC_TILE_SPLIT", "0"));
    // bf16 prefill GEMMs on tensor cores (compute capability 8.0 and later; VATIC_TENSOR_CORES=0: SGEMM), and the
    // bf16 GEMV of decode and verification too with VATIC_GEMV_TENSOR_CORES=1 (cheaper verification, slower decode:
    // docs/gpu.md).
    tensor_cores_ = prop.major >= 8 && !env_is("VATIC_TENSOR_CORES", "0");
    // A prompt's projections of one input (query, key and value; gate and up) side by side on streams of their own
    // (VATIC_GEMM_STREAMS=0: one after another on the backend's stream; the same sums either way).
    const bool gemm_streams = !env_is("VATIC_GEMM_STREAMS", "0");
    // A prompt's product whose output would not fill the multiprocessors takes its three parts in one GEMM, summed by
    // the op after it (VATIC_GEMM_STACK=0: three accumulating GEMMs; the same sums in the same order).
    gemm_stack_ = !env_is("VATIC_GEMM_STACK", "0");
    sms_ = prop.multiProcessorCount;
    cuda::set_gemv_tensor_cores(tensor_cores_ && env_is("VATIC_GEMV_TENSOR_CORES", "1"));
    // Tuning knobs for measurements (docs/gpu.md): VATIC_GEMV_WARPS, VATIC_ATTENTION_SPLIT_KEYS,
    // VATIC_GEMV_DIGITS_MIN (one threshold for int4 and int8).
    cuda::set_launch_shape(env_int("VATIC_GEMV_WARPS", 0, 1, 1 << 30),
                           env_int("VATIC_ATTENTION_SPLIT_KEYS", 0, 1, 1 << 30),
                           env_int("VATIC_GEMV_DIGITS_MIN", 0, 1, 1 << 30));
    cuda::set_expert_chunks(env_int("VATIC_EXPERT_CHUNKS", 0, 2, 4));
    // A verification's bf16 GEMV rows in groups of at most 4 a block, sharing weight reads through L2
    // (VATIC_GEMV_GROUP_ROWS=n: groups of n, 0: one group; the same bits either way).
    cuda::set_gemv_group_rows(env_int("VATIC_GEMV_GROUP_ROWS", 4, 0, 8));
    cuda::set_norm_prefetch(!env_is("VATIC_NORM_PREFETCH", "0"));
    cuda::set_gemv_decode_bound(!env_is("VATIC_GEMV_DECODE_BOUND", "0"));
    // The residual norm of a one-row projection in its own launch after the GEMV, as verification's rows take it,
    // or with VATIC_FUSED_NORMS=1 in the GEMV's last block (the same row function; docs/gpu.md). The own launch is
    // faster even for the drafters' rows of 256 (docs/performance.md).
    fused_norms_ = env_is("VATIC_FUSED_NORMS", "1");
    start_kernel_trace();
    CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    if (cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS) throw DeviceError("cuBLAS could not be initialised");
    cublasSetStream(blas_, stream_);
    if (tensor_cores_ && gemm_streams) make_side_streams();
    for (auto& s : staging_) {
      CUDA_OK(cudaMallocHost(&s.host, kStagingBytes), "cudaMallocHost");
      CUDA_OK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "cudaEventCreate");
    }
    CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&flag_host_), 2 * sizeof(int)), "cudaMallocHost");
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&flag_dev_), 2 * sizeof(int)), "cudaMalloc");
    CUDA_OK(cudaMemset(flag_dev_, 0, 2 * sizeof(int)), "cudaMemset");
    // The counters by which a fused launch's last blocks find out that they are the last (zero between launches;
    // launches on the stream run one after another, so they share them).
    const size_t counters = sizeof(unsigned) * cuda::kAttentionCounters;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&counter_dev_), counters), "cudaMalloc");
    CUDA_OK(cudaMemset(counter_dev_, 0, counters), "cudaMemset");
    // The input digits of the quantized GEMVs over large matrices (kernels.h), for this backend's stream only.
    CUDA_OK(cudaMalloc(&digits_dev_, cuda::gemv_digits_bytes()), "cudaMalloc");
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&distinct_experts_dev_), sizeof(unsigned long long)), "cudaMalloc");
    CUDA_OK(cudaMemset(distinct_experts_dev_, 0, sizeof(unsigned long long)), "cudaMemset");
  }

  // VATIC_KERNEL_TRACE=FILE (measurements, docs/gpu.md): every kernel launch records its pdl_begin line, grid
  // width and start time in host memory, written to FILE as CSV when the process exits.
  static void start_kernel_trace() {
    static const char* path = std::getenv("VATIC_KERNEL_TRACE");
    static unsigned long long* records = nullptr;
    constexpr unsigned kCapacity = 1u << 21;
    if (!path || !*path || records) return;
    auto give_up = [](const char* why) {
      std::fprintf(stderr, "vatic: VATIC_KERNEL_TRACE=%s: no trace will be written (%s)\n", path, why);
    };
    void* host = nullptr;
    if (cudaHostAlloc(&host, sizeof(unsigned long long) * 2 * kCapacity, cudaHostAllocMapped) != cudaSuccess) {
      cudaGetLastError();
      return give_up("mapped host memory could not be allocated");
    }
    std::memset(host, 0, sizeof(unsigned long long) * 2 * kCapacity);
    void* dev = nullptr;
    if (cudaHostGetDevicePointer(&dev, host, 0) != cudaSuccess ||
        !cuda::set_kernel_trace(static_cast<unsigned long long*>(dev), kCapacity)) {
      cudaGetLastError();
      cudaFreeHost(host);
      return give_up("the kernels could not be given the trace buffer");
    }
    records = static_cast<unsigned long long*>(host);
    std::atexit([] {
      std::FILE* f = std::fopen(path, "w");
      if (!f) {
        std::fprintf(stderr, "vatic: VATIC_KERNEL_TRACE=%s: cannot open the file: %s\n", path, std::strerror(errno));
        return;
      }
      std::fprintf(f, "line,grid,ns\n");
      for (unsigned i = 0; i < kCapacity && records[2 * i + 1]; i++)
        std::fprintf(f, "%llu,%llu,%llu\n", records[2 * i] >> 32, records[2 * i] & 0xffffffffull, records[2 * i + 1]);
      std::fclose(f);
    });
  }

  Device device() const override { return device_; }
  const char* name() const override { return "cuda"; }
  std::string description() const override { return description_; }
  DeviceMemory memory() const override {
    bind();
    size_t free = 0, total = 0;
    CUDA_OK(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return {free + pool_.cached(), total};
  }
  void synchronize() override {
    bind();
    not_recording("wait for the device");
    CUDA_OK(cudaStreamSynchronize(stream_), "synchronize");
    check_flags();
  }
  void set_profiling(bool on) override { profiling_ = on; }
  std::vector<std::pair<std::string, int64_t>> take_counts() override {
    bind();
    unsigned long long distinct = 0;
    CUDA_OK(cudaMemcpyAsync(&distinct, distinct_experts_dev_, sizeof(distinct), cudaMemcpyDeviceToHost, stream_),
            "cudaMemcpyAsync");
    CUDA_OK(cudaMemsetAsync(distinct_experts_dev_, 0, sizeof(distinct), stream_), "cudaMemsetAsync");
    CUDA_OK(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (!distinct) return {};
    return {{"distinct experts", static_cast<int64_t>(distinct)}};
  }
  std::vector<std::pair<std::string, double>> take_profile() override {
    bind();
    CUDA_OK(cudaStreamSynchronize(stream_), "profile");
    std::vector<std::pair<std::string, double>> samples;
    for (const Timing& t : timings_) {
      float ms = 0;
      CUDA_OK(cudaEventElapsedTime(&ms, t.start, t.stop), "profile");
      samples.push_back({t.name, ms * 1e-3});
      events_.push_back(t.start);
      events_.push_back(t.stop);
    }
    timings_.clear();
    return profile_table(samples);
  }
  void bind_thread() override {
    CUDA_OK(cudaSetDevice(index_), "cudaSetDevice");
    bound_ = index_;
  }

  Tensor empty(const Shape& shape, DType dtype) override {
    bind();
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    return Tensor(std::make_shared<CudaStorage>(pool_, bytes, device_), dtype, shape);
  }

  Tensor upload(const Tensor& host) override {
    VATIC_CHECK(host.device().is_cpu(), "upload: {} is not a host tensor", host.describe());
    bind();
    not_recording("copy host memory to the device");
    Tensor src = host;
    if (!src.is_contiguous()) {
      src = cpu_backend().empty(host.shape(), host.dtype());
      cpu_backend().copy(host, src);
    }
    Tensor out = empty(src.shape(), src.dtype());
    const size_t n = src.nbytes();
    const auto* from = static_cast<const uint8_t*>(src.raw());
    auto* to = static_cast<uint8_t*>(out.raw());
    if (n <= kDirectUploadBytes) {
      CUDA_OK(cudaMemcpyAsync(to, from, n, cudaMemcpyHostToDevice, stream_), "upload");
      return out;
    }
    // Large tensors (weights straight from the mmap'd file): through two pinned buffers, so reading the next chunk
    // overlaps the copy of the last one.
    size_t done = 0;
    int which = 0;
    while (done < n) {
      const size_t chunk = std::min(kStagingBytes, n - done);
      Staging& s = staging_[which];
      CUDA_OK(cudaEventSynchronize(s.done), "upload");
      std::memcpy(s.host, from + done, chunk);
      CUDA_OK(cudaMemcpyAsync(to + done, s.host, chunk, cudaMemcpyHostToDevice, stream_), "upload");
      CUDA_OK(cudaEventRecord(s.done, stream_), "upload");
      done += chunk;
      which ^= 1;
    }
    return out;
  }

  Tensor download(const Tensor& t) override {
    bind();
    not_recording("copy device memory to the host");
    Tensor src = t;
    if (!src.is_contiguous()) {
      src = empty(t.shape(), t.dtype());
      copy(t, src);
    }
    Tensor out = cpu_backend().empty(src.shape(), src.dtype());
    if (src.nbytes())
      CUDA_OK(cudaMemcpyAsync(out.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, stream_), "download");
    synchronize();
    return out;
  }

  void copy(const Tensor& src, const Tensor& dst) override {
    Timed timed_(*this, "copy");
    VATIC_CHECK(src.shape() == dst.shape(), "copy: shapes {} and {} differ", src.describe(), dst.describe());
    bind();
    if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
      if (src.nbytes())
        CUDA_OK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_), "copy");
      return;
    }
    if (src.dtype() != dst.dtype())
      VATIC_CHECK(is_number(src.dtype()) && is_writable(dst.dtype()), "copy: cannot convert {} to {}",
                  src.describe(), dst.describe());
    cuda::copy(view(src), view(dst), stream_);
    check_launch("copy");
  }

  void fill(const Tensor& dst, float value) override {
    Timed timed_(*this, "fill");
    VATIC_CHECK(is_writable(dst.dtype()), "fill: cannot write {}", dst.describe());
    bind();
    // Zeros (all bits clear in every number type) over contiguous memory: a memset (a cache's new slots, 1 MB in
    // about 10 us by the element-wise kernel).
    if (value == 0.0f && !std::signbit(value) && dst.is_contiguous()) {
      if (dst.nbytes()) CUDA_OK(cudaMemsetAsync(dst.raw(), 0, dst.nbytes(), stream_), "cudaMemsetAsync");
      return;
    }
    cuda::fill(view(dst), value, stream_);
    check_launch("fill");
  }

  void matmul(const Tensor& x, const Linear& w, const Tensor& y, bool accumulate) override {
    VATIC_CHECK(x.ndim() == 2 && y.ndim() == 2 && x.dtype() == DType::F32 && y.dtype() == DType::F32,
                "matmul expects F32 [T, K] input and output, got {} and {}", x.describe(), y.describe());
    check_rows(x, "matmul");
    check_rows(y, "matmul");
    const int64_t T = x.dim(0), K = x.dim(1), N = w.out_features();
    VATIC_CHECK(w.in_features() == K && y.dim(0) == T && y.dim(1) == N, "matmul: x {} · W{} -> y {}", x.describe(),
                w.weight.describe(), y.describe());
    if (w.quantized())
      VATIC_CHECK(K % w.group == 0, "matmul: {} inputs are not whole groups of {}", K, w.group);
    bind();
    if (T == 0 || N == 0) return;
    const cuda::Weight cw = weight(w);
    const int64_t ldx = x.stride(0), ldy = y.stride(0);
    Timed timed_(*this, T <= 8 ? "matmul (gemv)" : "matmul (sgemm)");
    if (T <= 8) {
      cuda::gemv(x.data<float>(), ldx, static_cast<int>(T), cw, N, K, y.data<float>(), ldy, accumulate, stream_,
                 digits_dev_);
      check_launch("matmul");
      return;
    }
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    // Row-major y[T, N] = x[T, K] · W[N, K]ᵀ is column-major yᵀ[N, T] = W · xᵀ.
    if (!w.quantized() && w.weight.dtype() == DType::F32) {
      blas_ok(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(T),
                          static_cast<int>(K), &one, w.weight.data<float>(), static_cast<int>(cw.ld), x.data<float>(),
                          static_cast<int>(ldx), &beta, y.data<float>(), static_cast<int>(ldy)),
              "matmul");
      return;
    }
    if (gemm_bf16x3_takes(w)) {
      gemm_bf16x3(x, {{w.weight.data<uint16_t>(), cw.ld, N, y.data<float>(), ldy}}, accumulate);
      return;
    }
    // Other weight types: F32 copies of row blocks, then the same SGEMM (exact F32 products, as on the CPU).
    const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(N, (int64_t(64) << 20) / 4 / std::max<int64_t>(K, 1)));
    Tensor scratch = empty({rows, K}, DType::F32);
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
      const int64_t n = std::min(rows, N - n0);
      cuda::dequantize_rows(cw, n0, n, K, scratch.data<float>(), stream_);
      check_launch("matmul");
      blas_ok(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(T),
                          static_cast<int>(K), &one, scratch.data<float>(), static_cast<int>(K), x.data<float>(),
                          static_cast<int>(ldx), &beta, y.data<float>() + n0, static_cast<int>(ldy)),
              "matmul");
    }
  }

  void embedding(const Linear& w, const Tensor& ids, float scale, const Tensor& out) override {
    Timed timed_(*this, "embedding");
    const int64_t n = ids.numel(), D = w.in_features(), V = w.out_features();
    VATIC_CHECK(out.dim(0) == n && out.dim(1) == D && out.dtype() == DType::F32 && out.stride(1) == 1,
                "embedding: output {} for {} ids of width {}", out.describe(), n, D);
    VATIC_CHECK(ids.dtype() == DType::I32 && ids.is_contiguous(), "embedding: ids {} must be contiguous I32",
                ids.describe());
    if (w.quantized()) VATIC_CHECK(D % w.group == 0, "embedding: {} columns are not whole groups", D);
    bind();
    cuda::embedding(weight(w), V, D, ids.data<int32_t>(), n, scale, out.data<float>(), out.stride(0), flag_dev_,
                    stream_);
    check_launch("embedding");
  }

  // A norm's weight as contiguous F32 (converted when stored otherwise); undefined without one.
  Tensor norm_weight(const Tensor* w, int64_t D, const char* op) {
    if (!w) return Tensor();
    VATIC_CHECK(w->numel() == D, "{} weight {} for rows of {}", op, w->describe(), D);
    if (w->dtype() == DType::F32 && w->is_contiguous()) return *w;
    Tensor wf = empty(w->shape(), DType::F32);
    copy(*w, wf);
    return wf;
  }

  void rms_norm(const Tensor& x, const Tensor* w, float eps, const Tensor& y) override {
    Timed timed_(*this, "rms_norm");
    auto rows = [](const Tensor& t) { return t.is_contiguous() || (t.ndim() == 2 && t.stride(1) == 1); };
    VATIC_CHECK(rows(x) && rows(y) && x.dtype() == DType::F32 && x.numel() == y.numel() && x.dim(-1) == y.dim(-1),
                "rms_norm expects F32 rows of unit stride, got {} -> {}", x.describe(), y.describe());
    const int64_t D = x.dim(-1), R = x.numel() / std::max<int64_t>(D, 1);
    auto ld = [&](const Tensor& t) { return t.is_contiguous() ? D : t.stride(0); };
    bind();
    const Tensor wf = norm_weight(w, D, "rms_norm");
    cuda::rms_norm(x.data<float>(), ld(x), w ? wf.data<float>() : nullptr, R, D, eps, y.data<float>(), ld(y),
                   stream_);
    check_launch("rms_norm");
  }

  void add_rms_norm(const Tensor& x, const Tensor& f, const Tensor* w, float eps, float scale,
                    const Tensor& y) override {
    Timed timed_(*this, "add_rms_norm");
    const auto [R, D] = residual_rows("add_rms_norm", x, f, y, nullptr);
    bind();
    const Tensor wf = norm_weight(w, D, "add_rms_norm");
    cuda::add_rms_norm(x.data<float>(), f.data<float>(), w ? wf.data<float>() : nullptr, R, D, eps, scale,
                       y.data<float>(), stream_);
    check_launch("add_rms_norm");
  }

  void add_norm(const Tensor& x, const Tensor& f, const Tensor* w, float eps, const Tensor& y,
                const Tensor& n) override {
    Timed timed_(*this, "add_norm");
    const auto [R, D] = residual_rows("add_norm", x, f, y, &n);
    bind();
    const Tensor wf = norm_weight(w, D, "add_norm");
    cuda::add_norm(x.data<float>(), f.data<float>(), w ? wf.data<float>() : nullptr, R, D, eps, y.data<float>(),
                   n.data<float>(), stream_);
    check_launch("add_norm");
  }

  void add_rms_norm_norm(const Tensor& x, const Tensor& f, const Tensor* w, float eps, float scale, const Tensor& y,
                         const Tensor* w_next, const Tensor& n) override {
    Timed timed_(*this, "add_rms_norm_norm");
    const auto [R, D] = residual_rows("add_rms_norm", x, f, y, &n);
    bind();
    const Tensor wf = norm_weight(w, D, "add_rms_norm"), wn = norm_weight(w_next, D, "rms_norm");
    cuda::add_rms_norm_norm(x.data<float>(), f.data<float>(), w ? wf.data<float>() : nullptr, R, D, eps, scale,
                            y.data<float>(), w_next ? wn.data<float>() : nullptr, n.data<float>(), stream_);
    check_launch("add_rms_norm");
  }

  void matmul_add_rms_norm(const Tensor& a, const Linear& W, const Tensor& x, const Tensor* w, float eps, float s,
                           const Tensor& y, const Tensor* w_next, const Tensor* n) override {
    const int64_t T = a.ndim() == 2 ? a.dim(0) : 0, K = a.ndim() == 2 ? a.dim(1) : 0, N = W.out_features();
    // One row with VATIC_FUSED_NORMS=1: the GEMV's last block adds and normalises. Otherwise the GEMV and then the
    // norm kernel, whose row arithmetic is the same (docs/gpu.md).
    const bool fits = fused_norms_ && T == 1 && a.dtype() == DType::F32 && a.stride(1) == 1 && W.in_features() == K &&
                      (!W.quantized() || K % W.group == 0) && x.dtype() == DType::F32 && x.is_contiguous() &&
                      y.is_contiguous() && x.numel() == T * N && y.numel() == T * N &&
                      (!n || (n->is_contiguous() && n->numel() == T * N));
    if (fits) {
      bind();
      const Tensor wf = norm_weight(w, N, "add_rms_norm"), wn = n ? norm_weight(w_next, N, "rms_norm") : Tensor();
      Tensor f = empty({T, N}, DType::F32);
      cuda::ResidualNorm r;
      r.res = x.data<float>();
      r.w = w ? wf.data<float>() : nullptr;
      r.w2 = n && w_next ? wn.data<float>() : nullptr;
      r.eps = eps;
      r.scale = s;
      r.f = f.data<float>();
      r.y = y.data<float>();
      r.n = n ? n->data<float>() : nullptr;
      r.counter = counter_dev_;
      Timed timed_(*this, "matmul_add_rms_norm (gemv)");
      if (cuda::gemv_residual_norm(a.data<float>(), a.stride(0), static_cast<int>(T), weight(W), N, K, r, stream_,
                                   digits_dev_)) {
        check_launch("matmul_add_rms_norm");
        return;
      }
    }
    const bool stacked = T > 8 && gemm_stacks(a, W) && x.dtype() == DType::F32 && x.is_contiguous() &&
                         y.is_contiguous() && x.numel() == T * N && y.numel() == T * N &&
                         (!n || (n->is_contiguous() && n->numel() == T * N));
    if (stacked) {
      bind();
      Timed timed_(*this, "matmul_add_rms_norm (stacked)");
      const Tensor wf = norm_weight(w, N, "add_rms_norm"), wn = n ? norm_weight(w_next, N, "rms_norm") : Tensor();
      const Tensor f = gemm_bf16x3_stacked(a, {&W})[0];
      cuda::add_rms_norm_norm(x.data<float>(), f.data<float>(), w ? wf.data<float>() : nullptr, T, N, eps, s,
                              y.data<float>(), n && w_next ? wn.data<float>() : nullptr, n ? n->data<float>() : nullptr,
                              stream_, T * N);
      check_launch("matmul_add_rms_norm");
      return;
    }
    Backend::matmul_add_rms_norm(a, W, x, w, eps, s, y, w_next, n);
  }

  void rms_norm_rope(const Tensor& x, const Tensor* w, float eps, const Tensor& positions, const Tensor& inv_freq,
                     bool interleaved, const Tensor& y) override {
    Timed timed_(*this, "rms_norm_rope");
    VATIC_CHECK(x.ndim() == 3 && x.is_contiguous() && y.is_contiguous() && x.dtype() == DType::F32 &&
                    y.dtype() == DType::F32 && y.numel() == x.numel(),
                "rms_norm_rope expects contiguous F32 [T, H, D], got {} and {}", x.describe(), y.describe());
    const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2), n = inv_freq.numel();
    VATIC_CHECK(2 * n <= D && D <= cuda::kMaxNormRopeD, "rms_norm_rope: {} frequencies for head dim {}", n, D);
    VATIC_CHECK(positions.dtype() == DType::I32 && positions.is_contiguous() && positions.numel() == T &&
                    inv_freq.dtype() == DType::F32 && inv_freq.is_contiguous(),
                "rope: positions {} and frequencies {}", positions.describe(), inv_freq.describe());
    bind();
    const Tensor wf = norm_weight(w, D, "rms_norm");
    cuda::rms_norm_rope(x.data<float>(), w ? wf.data<float>() : nullptr, T, H, D, eps, positions.data<int32_t>(),
                        inv_freq.data<float>(), n, interleaved, y.data<float>(), stream_);
    check_launch("rms_norm_rope");
  }

  void rms_norm_rope_many(const std::vector<NormRope>& parts, float eps, const Tensor& positions,
                          const Tensor& inv_freq, bool interleaved, const KvSlots* kv) override {
    const Tensor& x0 = *parts.front().x;
    bool fused = parts.size() <= 3 && x0.ndim() == 3 && x0.dim(2) <= cuda::kMaxNormRopeD &&
                 2 * inv_freq.numel() <= x0.dim(2) && positions.dtype() == DType::I32 &&
                 positions.is_contiguous() && positions.numel() == x0.dim(0) && inv_freq.dtype() == DType::F32 &&
                 inv_freq.is_contiguous();
    for (const NormRope& p : parts)
      fused = fused && p.x->ndim() == 3 && p.x->dim(0) == x0.dim(0) && p.x->dim(2) == x0.dim(2) &&
              p.x->is_contiguous() && p.y->is_contiguous() && p.x->dtype() == DType::F32 &&
              p.y->dtype() == DType::F32 && p.y->numel() == p.x->numel();
    // Into a cache: keys and values of the cache's head count and width, contiguous slots.
    if (kv)
      fused = fused && parts.size() == 3 && kv->keys.ndim() == 3 && kv->values.ndim() == 3 &&
              kv->keys.is_contiguous() && kv->values.is_contiguous() && kv->keys.dtype() == DType::F32 &&
              kv->values.dtype() == DType::F32 && kv->keys.dim(0) == kv->values.dim(0) &&
              kv->keys.dim(1) == parts[1].x->dim(1) && kv->keys.dim(2) == x0.dim(2) &&
              kv->values.dim(1) == parts[2].x->dim(1) && kv->values.dim(2) == x0.dim(2) &&
              kv->slot_pos.dtype() == DType::I32 && kv->slot_pos.is_contiguous() &&
              kv->slot_pos.numel() == kv->keys.dim(0);
    if (!fused) return Backend::rms_norm_rope_many(parts, eps, positions, inv_freq, interleaved, kv);
    Timed timed_(*this, "rms_norm_rope_many");
    bind();
    cuda::NormRopeJob j{};
    j.count = static_cast<int>(parts.size());
    j.T = x0.dim(0);
    j.D = x0.dim(2);
    j.eps = eps;
    Tensor wf[3];
    for (int g = 0; g < j.count; g++) {
      const NormRope& p = parts[static_cast<size_t>(g)];
      wf[g] = norm_weight(p.w, j.D, "rms_norm");
      j.x[g] = p.x->data<float>();
      j.w[g] = p.w ? wf[g].data<float>() : nullptr;
      j.y[g] = p.y->data<float>();
      j.H[g] = p.x->dim(1);
      j.rope[g] = p.rope;
    }
    j.marks = -1;
    if (kv) {
      j.cache[1] = kv->keys.data<float>();
      j.cache[2] = kv->values.data<float>();
      j.C = kv->keys.dim(0);
      j.ring = kv->ring;
      j.marks = 1;
      j.slot_pos = kv->slot_pos.data<int32_t>();
      j.bad = flag_dev_;
    }
    cuda::rms_norm_rope_many(j, positions.data<int32_t>(), inv_freq.data<float>(), inv_freq.numel(), interleaved,
                             stream_);
    check_launch("rms_norm_rope_many");
  }

  void latent_entry(const Tensor& kv, const Tensor* w, float eps, const Tensor& q, const Tensor& q_out,
                    const Tensor& positions, const Tensor& slot_positions, const Tensor& inv_freq, bool interleaved,
                    const KvSlots& slots) override {
    const int64_t T = kv.dim(0), R = q.dim(2), L = kv.dim(1) - R;
    auto i32 = [T](const Tensor& t) { return t.dtype() == DType::I32 && t.is_contiguous() && t.numel() == T; };
    const bool fused = kv.dtype() == DType::F32 && q.dtype() == DType::F32 && q_out.dtype() == DType::F32 &&
                       i32(positions) && i32(slot_positions) && inv_freq.dtype() == DType::F32 &&
                       inv_freq.is_contiguous() && 2 * inv_freq.numel() == R && slots.keys.dtype() == DType::F32 &&
                       slots.keys.is_contiguous() && slots.slot_pos.dtype() == DType::I32 &&
                       slots.slot_pos.is_contiguous() && slots.slot_pos.numel() == slots.keys.dim(0);
    if (!fused)
      return Backend::latent_entry(kv, w, eps, q, q_out, positions, slot_positions, inv_freq, interleaved, slots);
    Timed timed_(*this, "latent_entry");
    bind();
    const Tensor wf = norm_weight(w, L, "latent_entry");
    cuda::LatentEntryArgs a{};
    a.kv = kv.data<float>();
    a.ldkv = kv.stride(0);
    a.T = T;
    a.L = L;
    a.R = R;
    a.w = w ? wf.data<float>() : nullptr;
    a.eps = eps;
    a.q = q.data<float>();
    a.H = q.dim(1);
    a.sqT = q.stride(0);
    a.sqH = q.stride(1);
    a.q_out = q_out.data<float>();
    a.soT = q_out.stride(0);
    a.soH = q_out.stride(1);
    a.pos = positions.data<int32_t>();
    a.slot_pos_of = slot_positions.data<int32_t>();
    a.inv_freq = inv_freq.data<float>();
    a.n = inv_freq.numel();
    a.interleaved = interleaved;
    a.keys = slots.keys.data<float>();
    a.C = slots.keys.dim(0);
    a.ring = slots.ring;
    a.slot_pos = slots.slot_pos.data<int32_t>();
    a.bad = flag_dev_;
    cuda::latent_entry(a, stream_);
    check_launch("latent_entry");
  }

  void combine_add_norm(const Tensor& rows, const Tensor& weights, const Tensor* s, const Tensor& x, const Tensor* w,
                        float eps, const Tensor& y, const Tensor& n) override {
    Timed timed_(*this, "combine_add_norm");
    const auto [T, D] = residual_rows("combine_add_norm", x, x, y, &n);
    const int64_t k = weights.numel() / std::max<int64_t>(T, 1);
    VATIC_CHECK(rows.dtype() == DType::F32 && rows.is_contiguous() && rows.numel() == T * k * D &&
                    weights.dtype() == DType::F32 && weights.is_contiguous() && weights.numel() == T * k &&
                    (!s || (s->dtype() == DType::F32 && s->is_contiguous() && s->numel() == T * D)),
                "combine_add_norm: rows {} weights {} onto {}", rows.describe(), weights.describe(), x.describe());
    bind();
    const Tensor wf = norm_weight(w, D, "combine_add_norm");
    cuda::combine_add_norm(rows.data<float>(), weights.data<float>(), s ? s->data<float>() : nullptr, x.data<float>(),
                           T, k, D, w ? wf.data<float>() : nullptr, eps, y.data<float>(), n.data<float>(), stream_);
    check_launch("combine_add_norm");
  }

  void combine_post_norms(const Tensor& rows, const Tensor& weights, const Tensor& dense, const Tensor* w_dense,
                          const Tensor* w_routed, const Tensor& x, const Tensor* w, float eps, float s,
                          const Tensor& y, const Tensor* w_next, const Tensor* n) override {
    Timed timed_(*this, "combine_post_norms");
    const auto [T, D] = residual_rows("combine_post_norms", x, dense, y, n);
    const int64_t k = weights.numel() / std::max<int64_t>(T, 1);
    VATIC_CHECK(rows.dtype() == DType::F32 && rows.is_contiguous() && rows.numel() == T * k * D &&
                    weights.dtype() == DType::F32 && weights.is_contiguous() && weights.numel() == T * k,
                "combine_post_norms: rows {} weights {} onto {}", rows.describe(), weights.describe(), x.describe());
    bind();
    const Tensor wa = norm_weight(w_dense, D, "combine_post_norms"), wb = norm_weight(w_routed, D, "combine_post_norms"),
                 wf = norm_weight(w, D, "combine_post_norms"), wn = norm_weight(w_next, D, "combine_post_norms");
    const Tensor tmp = empty({T, cuda::combine_post_norms_tmp_floats(D)}, DType::F32);
    cuda::combine_post_norms(rows.data<float>(), weights.data<float>(), dense.data<float>(), T, k, D,
                             w_dense ? wa.data<float>() : nullptr, w_routed ? wb.data<float>() : nullptr,
                             x.data<float>(), w ? wf.data<float>() : nullptr, eps, s, y.data<float>(),
                             n && w_next ? wn.data<float>() : nullptr, n ? n->data<float>() : nullptr,
                             tmp.data<float>(), stream_);
    check_launch("combine_post_norms");
  }

  // Whether rms_norm_many's kernel takes these outputs of x's rows (contiguous F32 of x's shape, none in
  // place).
  static bool norm_outs_fit(const Tensor& x, const std::vector<ScaledNorm>& outs) {
    const int64_t D = x.dim(-1);
    bool fits = x.dtype() == DType::F32 && outs.size() <= cuda::kMaxNormOuts;
    for (const ScaledNorm& o : outs)
      fits = fits && o.y->is_contiguous() && o.y->dtype() == DType::F32 && o.y->numel() == x.numel() &&
             o.y->dim(-1) == D && o.y->data<float>() != x.data<float>();
    return fits;
  }
  // The kernels' form of the outputs (`held` keeps the weights' F32 copies alive).
  cuda::NormOuts norm_outs(const std::vector<ScaledNorm>& outs, int64_t D, std::vector<Tensor>& held) {
    cuda::NormOuts j;
    for (const ScaledNorm& o : outs) {
      held.push_back(norm_weight(o.w, D, "rms_norm_many"));
      j.w[j.count] = o.w ? held.back().data<float>() : nullptr;
      j.s[j.count] = o.s;
      j.y[j.count] = o.y->data<float>();
      j.count++;
    }
    return j;
  }

  void rms_norm_many(const Tensor& x, float eps, const std::vector<ScaledNorm>& outs) override {
    const int64_t D = x.dim(-1), R = x.numel() / std::max<int64_t>(D, 1);
    if (!(x.is_contiguous() || (x.ndim() == 2 && x.stride(1) == 1)) || !norm_outs_fit(x, outs))
      return Backend::rms_norm_many(x, eps, outs);
    Timed timed_(*this, "rms_norm_many");
    bind();
    std::vector<Tensor> wf;
    const cuda::NormOuts j = norm_outs(outs, D, wf);
    cuda::rms_norm_many(x.data<float>(), x.is_contiguous() ? D : x.stride(0), R, D, eps, j, stream_);
    check_launch("rms_norm_many");
  }

  void add_rms_norm_many(const Tensor& x, const Tensor& f, const Tensor* w, float eps, float s,
                         const Tensor& y, const std::vector<ScaledNorm>& outs) override {
    const auto [R, D] = residual_rows("add_rms_norm_many", x, f, y, nullptr);
    bool fits = norm_outs_fit(y, outs);
    for (const ScaledNorm& o : outs) fits = fits && o.y->data<float>() != x.data<float>();
    if (!fits) return Backend::add_rms_norm_many(x, f, w, eps, s, y, outs);
    Timed timed_(*this, "add_rms_norm_many");
    bind();
    const Tensor wf = norm_weight(w, D, "add_rms_norm_many");
    std::vector<Tensor> held;
    const cuda::NormOuts j = norm_outs(outs, D, held);
    cuda::add_rms_norm_many(x.data<float>(), f.data<float>(), w ? wf.data<float>() : nullptr, R, D, eps, s,
                            y.data<float>(), j, stream_);
    check_launch("add_rms_norm_many");
  }

  // Whether a prompt's matmul by w takes the three-part bf16 GEMMs on the tensor cores.
  bool gemm_bf16x3_takes(const Linear& w) const {
    return tensor_cores_ && !w.quantized() && w.weight.dtype() == DType::BF16;
  }
  // One product of gemm_bf16x3: y[T, N] (+)= x · Wᵀ for bf16 rows W[N, K] of stride ld.
  struct GemmJob {
    const uint16_t* w;
    int64_t ld, N;
    float* y;
    int64_t ldy;
  };
  // Each job's y (+)= x · Wᵀ, x [T, K] F32 rows on the tensor cores: x as three bf16 parts (hi + mid + lo = x
  // exactly), split once for all the jobs, and three bf16 GEMMs a job with f32 accumulation whose products are
  // exactly x·w, summed into y. Blocks of at most 64 MB of parts.
  void gemm_bf16x3(const Tensor& x, const std::vector<GemmJob>& jobs, bool accumulate) {
    const int64_t T = x.dim(0), K = x.dim(1), ldx = x.stride(0);
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(T, (int64_t(64) << 20) / 6 / std::max<int64_t>(K, 1)));
    Tensor parts = empty({3, rows, K}, DType::BF16);
    // Jobs after the first run on side streams beside it (each job's three GEMMs in order, so the same sums),
    // joined back before the parts are split again or freed: a small projection's GEMMs (a key or value
    // projection, 256 columns) fill few multiprocessors on their own.
    const size_t side = split_done_ ? std::min(jobs.size() - 1, side_.size()) : 0;
    for (int64_t t0 = 0; t0 < T; t0 += rows) {
      const int64_t n = std::min(rows, T - t0);
      cuda::split_bf16x3(x.data<float>() + t0 * ldx, ldx, n, K, parts.data<uint16_t>(), stream_);
      check_launch("matmul");
      if (side) {
        CUDA_OK(cudaEventRecord(split_done_, stream_), "cudaEventRecord");
      }
      for (size_t ji = 0; ji < jobs.size(); ji++) {
        const GemmJob& j = jobs[ji];
        const size_t lane = ji == 0 || side == 0 ? 0 : 1 + (ji - 1) % side;
        cublasHandle_t handle = lane ? side_[lane - 1].blas : blas_;
        if (lane) CUDA_OK(cudaStreamWaitEvent(side_[lane - 1].stream, split_done_, 0), "cudaStreamWaitEvent");
        for (int p = 0; p < 3; p++) {
          const float b = p ? 1.0f : beta;
          blas_ok(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(j.N), static_cast<int>(n),
                               static_cast<int>(K), &one, j.w, CUDA_R_16BF, static_cast<int>(j.ld),
                               parts.data<uint16_t>() + p * n * K, CUDA_R_16BF, static_cast<int>(K), &b,
                               j.y + t0 * j.ldy, CUDA_R_32F, static_cast<int>(j.ldy), CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT),
                  "matmul");
        }
      }
      for (size_t i = 0; i < side; i++) {
        CUDA_OK(cudaEventRecord(side_[i].done, side_[i].stream), "cudaEventRecord");
        CUDA_OK(cudaStreamWaitEvent(stream_, side_[i].done, 0), "cudaStreamWaitEvent");
      }
    }
  }
  // The side streams of gemm_bf16x3, each with a cuBLAS handle of its own (its own workspace); made with the
  // backend, not on first use, which may come while a graph is being recorded.
  void make_side_streams() {
    for (auto& s : side_) {
      CUDA_OK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreate");
      if (cublasCreate(&s.blas) != CUBLAS_STATUS_SUCCESS) throw DeviceError("cuBLAS could not be initialised");
      cublasSetStream(s.blas, s.stream);
      CUDA_OK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "cudaEventCreate");
    }
    CUDA_OK(cudaEventCreateWithFlags(&split_done_, cudaEventDisableTiming), "cudaEventCreate");
  }
  // Whether a prompt's product x · Wᵀ takes its three parts in one GEMM (gemm_bf16x3_stacked): one part's output
  // would be fewer 128 × 128 tiles than there are multiprocessors (a short prompt's narrow projections, whose
  // three accumulating GEMMs each leave most of the GPU idle and pay a launch each), and the parts fit one block.
  bool gemm_stacks(const Tensor& x, const Linear& w) const {
    if (!gemm_stack_ || x.ndim() != 2 || x.dtype() != DType::F32 || x.stride(1) != 1 || !gemm_bf16x3_takes(w) ||
        w.in_features() != x.dim(1))
      return false;
    const int64_t T = x.dim(0), K = x.dim(1), N = w.out_features();
    return T > 8 && (T + 127) / 128 * ((N + 127) / 128) < sms_ && 6 * T * K <= (int64_t(64) << 20);
  }
  // For each w (gemm_stacks true for all), the products of x's three bf16 parts with Wᵀ in one GEMM over the parts
  // stacked as 3T rows: [3, T, N], the hi, mid and lo products, for the op after it to sum in that order (the sums
  // the three accumulating GEMMs of gemm_bf16x3 make). x is split once for all of them.
  std::vector<Tensor> gemm_bf16x3_stacked(const Tensor& x, const std::vector<const Linear*>& ws) {
    const int64_t T = x.dim(0), K = x.dim(1);
    const float one = 1.0f, zero = 0.0f;
    Tensor parts = empty({3, T, K}, DType::BF16);
    cuda::split_bf16x3(x.data<float>(), x.stride(0), T, K, parts.data<uint16_t>(), stream_);
    check_launch("matmul");
    std::vector<Tensor> outs;
    for (const Linear* w : ws) {
      const int64_t N = w->out_features();
      Tensor out = empty({3, T, N}, DType::F32);
      blas_ok(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(3 * T),
                           static_cast<int>(K), &one, w->weight.data<uint16_t>(), CUDA_R_16BF,
                           static_cast<int>(w->weight.stride(0)), parts.data<uint16_t>(), CUDA_R_16BF,
                           static_cast<int>(K), &zero, out.data<float>(), CUDA_R_32F, static_cast<int>(N),
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "matmul");
      outs.push_back(out);
    }
    return outs;
  }
  // A prompt's matmuls of one input (up to three) when each takes its parts stacked (gemm_stacks): one split, a
  // GEMM a matrix, and one launch that sums each output's three products into it (false otherwise, nothing done).
  bool gemm_stacked_many(const Tensor& x, const std::vector<const Linear*>& ws, const std::vector<Tensor>& ys) {
    if (ws.empty() || ws.size() > 3) return false;
    for (size_t i = 0; i < ws.size(); i++) {
      const Tensor& y = ys[i];
      if (!gemm_stacks(x, *ws[i]) || y.ndim() != 2 || y.dtype() != DType::F32 || y.stride(1) != 1 ||
          y.dim(0) != x.dim(0) || y.dim(1) != ws[i]->out_features())
        return false;
    }
    bind();
    Timed timed_(*this, "matmul (stacked)");
    const std::vector<Tensor> p = gemm_bf16x3_stacked(x, ws);
    cuda::SumPartsJob j;
    j.T = x.dim(0);
    j.count = static_cast<int>(ws.size());
    for (size_t i = 0; i < ws.size(); i++) {
      j.parts[i] = p[i].data<float>();
      j.y[i] = ys[i].data<float>();
      j.N[i] = ws[i]->out_features();
      j.ldy[i] = ys[i].stride(0);
    }
    cuda::sum_parts(j, stream_);
    check_launch("matmul");
    return true;
  }
  // A prompt's matmuls of one input (x [T, K], T > 8), x split once, when they all take gemm_bf16x3 (false
  // otherwise, nothing done).
  bool gemm_bf16x3_many(const Tensor& x, const std::vector<const Linear*>& ws, const std::vector<Tensor>& ys) {
    if (x.ndim() != 2 || x.dim(0) <= 8 || x.dtype() != DType::F32 || x.stride(1) != 1) return false;
    for (size_t i = 0; i < ws.size(); i++) {
      const Linear& w = *ws[i];
      const Tensor& y = ys[i];
      if (!gemm_bf16x3_takes(w) || w.in_features() != x.dim(1) || y.ndim() != 2 || y.dtype() != DType::F32 ||
          y.stride(1) != 1 || y.dim(0) != x.dim(0) || y.dim(1) != w.out_features())
        return false;
    }
    bind();
    Timed timed_(*this, "matmul (sgemm)");
    std::vector<GemmJob> jobs;
    for (size_t i = 0; i < ws.size(); i++)
      jobs.push_back({ws[i]->weight.data<uint16_t>(), ws[i]->weight.stride(0), ws[i]->out_features(),
                      ys[i].data<float>(), ys[i].stride(0)});
    gemm_bf16x3(x, jobs, false);
    return true;
  }

  void matmul_many(const Tensor& x, const std::vector<const Linear*>& ws, const std::vector<Tensor>& ys) override {
    VATIC_CHECK(ws.size() == ys.size(), "matmul_many: {} matrices, {} outputs", ws.size(), ys.size());
    if (gemm_stacked_many(x, ws, ys)) return;
    if (gemm_bf16x3_many(x, ws, ys)) return;
    const int64_t T = x.ndim() == 2 ? x.dim(0) : 0;
    bool fused = T >= 1 && T <= 8 && ws.size() <= 3 && x.dtype() == DType::F32 && x.stride(-1) == 1;
    cuda::Weight cw[3];
    int64_t N[3], ldy[3];
    float* y[3];
    for (size_t i = 0; fused && i < ws.size(); i++) {
      const Linear& w = *ws[i];
      const Tensor& yi = ys[i];
      fused = w.in_features() == x.dim(1) && (!w.quantized() || x.dim(1) % w.group == 0) && yi.ndim() == 2 &&
              yi.dtype() == DType::F32 && yi.stride(1) == 1 && yi.dim(0) == T && yi.dim(1) == w.out_features();
      if (!fused) break;
      cw[i] = weight(w);
      N[i] = w.out_features();
      y[i] = yi.data<float>();
      ldy[i] = yi.stride(0);
    }
    if (fused) {
      bind();
      Timed timed_(*this, "matmul_many (gemv)");
      // One launch per encoding, in order of first appearance (a quantized layer may keep v at more bits than q
      // and k). Should a group not take the fused GEMV, the composed path below recomputes every output.
      bool done[3] = {false, false, false};
      for (size_t i = 0; fused && i < ws.size(); i++) {
        if (done[i]) continue;
        cuda::Weight gw[3];
        int64_t gN[3], gld[3];
        float* gy[3];
        int n = 0;
        for (size_t k = i; k < ws.size(); k++)
          if (!done[k] && cuda::same_encoding(cw[i], cw[k])) {
            gw[n] = cw[k], gN[n] = N[k], gy[n] = y[k], gld[n] = ldy[k];
            done[k] = true;
            n++;
          }
        fused = cuda::gemv_many(x.data<float>(), x.stride(0), static_cast<int>(T), n, gw, gN, x.dim(1), gy, gld,
                                stream_, digits_dev_);
      }
      if (fused) {
        check_launch("matmul");
        return;
      }
    }
    Backend::matmul_many(x, ws, ys);
  }

  void matmul_gated(const Tensor& x, const Linear& gate, const Linear* up, const Tensor* m, Unary act,
                    const Tensor& y) override {
    VATIC_CHECK(x.ndim() == 2 && y.ndim() == 2 && x.dtype() == DType::F32 && y.dtype() == DType::F32,
                "matmul expects F32 [T, K] input and output, got {} and {}", x.describe(), y.describe());
    check_rows(x, "matmul");
    check_rows(y, "matmul");
    const int64_t T = x.dim(0), K = x.dim(1), N = gate.out_features();
    VATIC_CHECK(gate.in_features() == K && y.dim(0) == T && y.dim(1) == N, "matmul: x {} · W{} -> y {}",
                x.describe(), gate.weight.describe(), y.describe());
    if (m)
      VATIC_CHECK(m->dtype() == DType::F32 && m->ndim() == 2 && m->dim(0) == T && m->dim(1) == N && m->stride(1) == 1,
                  "matmul_gated: multiplier {} for output {}", m->describe(), y.describe());
    bind();
    if (T == 0 || N == 0) return;
    if (T <= 8 && (!gate.quantized() || K % gate.group == 0) && (!up || !up->quantized() || K % up->group == 0)) {
      const cuda::Weight cg = weight(gate);
      cuda::Weight cu;
      if (up) cu = weight(*up);
      Timed timed_(*this, "matmul_gated (gemv)");
      if (cuda::gemv_gated(x.data<float>(), x.stride(0), static_cast<int>(T), cg, up ? &cu : nullptr,
                           m ? m->data<float>() : nullptr, m ? m->stride(0) : 0, static_cast<int>(act), N, K,
                           y.data<float>(), y.stride(0), stream_, digits_dev_)) {
        check_launch("matmul");
        return;
      }
    }
    if (T > 8 && (up || m) && y.is_contiguous() && gemm_stacks(x, gate) && (!up || gemm_stacks(x, *up))) {
      Timed timed_(*this, "matmul_gated (stacked)");
      const std::vector<Tensor> p = up ? gemm_bf16x3_stacked(x, {&gate, up}) : gemm_bf16x3_stacked(x, {&gate});
      cuda::gated(static_cast<int>(act), p[0].data<float>(), N, up ? p[1].data<float>() : m->data<float>(),
                  up ? N : m->stride(0), N, T * N, y.data<float>(), stream_, T * N, up ? T * N : 0);
      check_launch("gated");
      return;
    }
    if (T > 8 && gemm_bf16x3_takes(gate) && (!up || gemm_bf16x3_takes(*up))) {  // one split of x for both
      Tensor g = empty(y.shape(), DType::F32), u = up ? empty(y.shape(), DType::F32) : Tensor();
      if (up ? gemm_bf16x3_many(x, {&gate, up}, {g, u}) : gemm_bf16x3_many(x, {&gate}, {g})) {
        gated(act, g, up ? u : *m, y);
        return;
      }
    }
    Backend::matmul_gated(x, gate, up, m, act, y);
  }

  void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool interleaved) override {
    Timed timed_(*this, "rope");
    VATIC_CHECK(x.ndim() == 3 && x.stride(2) == 1 && x.dtype() == DType::F32, "rope expects F32 [T, H, D], got {}",
                x.describe());
    const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2), n = inv_freq.numel();
    VATIC_CHECK(2 * n <= D, "rope: {} frequencies for head dim {}", n, D);
    VATIC_CHECK(positions.dtype() == DType::I32 && positions.is_contiguous() && positions.numel() == T &&
                    inv_freq.dtype() == DType::F32 && inv_freq.is_contiguous(),
                "rope: positions {} and frequencies {}", positions.describe(), inv_freq.describe());
    bind();
    cuda::rope(x.data<float>(), T, H, D, x.stride(0), x.stride(1), positions.data<int32_t>(), inv_freq.data<float>(),
               n, interleaved, stream_);
    check_launch("rope");
  }

  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                 const AttentionParams& p, const Tensor& out) override {
    Timed timed_(*this, "attention");
    const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), S = k.dim(0), Hkv = k.dim(1), Dv = v.dim(2);
    VATIC_CHECK(k.dim(2) == D && v.dim(0) == S && v.dim(1) == Hkv && Hq % Hkv == 0 && out.dim(0) == T &&
                    out.dim(1) == Hq && out.dim(2) == Dv,
                "attention: q {} k {} v {} out {}", q.describe(), k.describe(), v.describe(), out.describe());
    VATIC_CHECK(q.stride(2) == 1 && k.stride(2) == 1 && v.stride(2) == 1 && out.stride(2) == 1,
                "attention: head rows must be contiguous");
    VATIC_CHECK(q.dtype() == DType::F32 && k.dtype() == DType::F32 && v.dtype() == DType::F32 &&
                    q_pos.dtype() == DType::I32 && k_pos.dtype() == DType::I32 && q_pos.is_contiguous() &&
                    k_pos.is_contiguous() && q_pos.numel() == T && k_pos.numel() == S,
                "attention: F32 q/k/v and contiguous I32 positions expected");
    VATIC_CHECK(Dv <= cuda::kMaxAttentionDv && D <= cuda::kMaxAttentionD,
                "attention: head dims {} / {} exceed what the CUDA kernel takes ({} / {})", D, Dv,
                cuda::kMaxAttentionD, cuda::kMaxAttentionDv);
    bind();
    cuda::AttentionArgs a{q.data<float>(), T, Hq, D, q.stride(0), q.stride(1),
                          k.data<float>(), S, Hkv, k.stride(0), k.stride(1),
                          v.data<float>(), Dv, v.stride(0), v.stride(1),
                          q_pos.data<int32_t>(), k_pos.data<int32_t>(), p.scale, p.window,
                          out.data<float>(), out.stride(0), out.stride(1)};
    const size_t scratch_floats = cuda::attention_scratch_floats(a);
    Tensor scratch;
    if (scratch_floats) scratch = empty({static_cast<int64_t>(scratch_floats)}, DType::F32);
    cuda::attention(a, scratch_floats ? scratch.data<float>() : nullptr, counter_dev_, stream_);
    check_launch("attention");
  }

  void binary(cuda::Elementwise op, const Tensor& a, const Tensor& b, const Tensor& y) {
    Timed timed_(*this, "add/mul");
    VATIC_CHECK(a.is_contiguous() && b.is_contiguous() && y.is_contiguous() && a.dtype() == DType::F32 &&
                    b.dtype() == DType::F32 && y.numel() == a.numel(),
                "elementwise op on {} and {}", a.describe(), b.describe());
    const int64_t n = a.numel(), m = b.numel();
    VATIC_CHECK(m > 0 && n % m == 0, "cannot broadcast {} over {}", b.describe(), a.describe());
    bind();
    cuda::binary(op, a.data<float>(), b.data<float>(), n, m, y.data<float>(), stream_);
    check_launch("elementwise");
  }
  void add(const Tensor& a, const Tensor& b, const Tensor& y) override { binary(cuda::kAdd, a, b, y); }
  void mul(const Tensor& a, const Tensor& b, const Tensor& y) override { binary(cuda::kMul, a, b, y); }
  void scale(const Tensor& a, float s, const Tensor& y) override {
    Timed timed_(*this, "scale");
    check_f32_contiguous(a, "scale");
    bind();
    cuda::scale(a.data<float>(), s, a.numel(), y.data<float>(), stream_);
    check_launch("scale");
  }
  void unary(Unary op, const Tensor& a, const Tensor& y) override {
    Timed timed_(*this, "unary");
    check_f32_contiguous(a, "unary");
    bind();
    cuda::unary(static_cast<int>(op), a.data<float>(), a.numel(), y.data<float>(), stream_);
    check_launch("unary");
  }
  void gated(Unary op, const Tensor& g, const Tensor& u, const Tensor& y) override {
    Timed timed_(*this, "gated");
    // Both contiguous: one row of numel() elements. Otherwise both 2-D rows of unit stride at their row strides.
    const bool flat = g.is_contiguous() && u.is_contiguous();
    auto rows2d = [](const Tensor& t) { return t.ndim() == 2 && t.stride(1) == 1; };
    VATIC_CHECK(g.numel() == u.numel() && y.is_contiguous() && g.dtype() == DType::F32 && u.dtype() == DType::F32 &&
                    (flat || (rows2d(g) && rows2d(u) && g.dim(1) == u.dim(1))),
                "gated: {} and {}", g.describe(), u.describe());
    const int64_t cols = flat ? g.numel() : g.dim(1);
    bind();
    cuda::gated(static_cast<int>(op), g.data<float>(), flat ? cols : g.stride(0), u.data<float>(),
                flat ? cols : u.stride(0), cols, g.numel(), y.data<float>(), stream_);
    check_launch("gated");
  }
  void softcap(const Tensor& a, float cap, const Tensor& y) override {
    Timed timed_(*this, "softcap");
    check_f32_contiguous(a, "softcap");
    bind();
    cuda::softcap(a.data<float>(), cap, a.numel(), y.data<float>(), stream_);
    check_launch("softcap");
  }
  void softmax(const Tensor& a, const Tensor& y) override {
    Timed timed_(*this, "softmax");
    check_f32_contiguous(a, "softmax");
    const int64_t D = a.dim(-1), R = a.numel() / std::max<int64_t>(D, 1);
    bind();
    cuda::softmax(a.data<float>(), R, D, y.data<float>(), stream_);
    check_launch("softmax");
  }
  void topk(const Tensor& a, int k, const Tensor& values, const Tensor& indices) override {
    Timed timed_(*this, "topk");
    check_f32_contiguous(a, "topk");
    const int64_t N = a.dim(-1), R = a.numel() / std::max<int64_t>(N, 1);
    VATIC_CHECK(k > 0 && k <= N, "topk: k={} for rows of {}", k, N);
    bind();
    if (k > 16 && k <= cuda::kMaxChunkedTopk && N > k && N > cuda::kRankTopkMax) {
      // The sampler's candidates: k sequential passes over a vocabulary would cost k row reads.
      const int64_t n = 2 * cuda::topk_chunked_scratch(R, N, k);
      Tensor sv = empty({n}, DType::F32), si = empty({n}, DType::I32);
      cuda::topk_chunked(a.data<float>(), R, N, k, values.data<float>(), indices.data<int32_t>(), sv.data<float>(),
                         si.data<int32_t>(), stream_);
      check_launch("topk");
      return;
    }
    const size_t scratch_floats = cuda::topk_scratch_floats(R, N, k);
    Tensor scratch;
    if (scratch_floats) scratch = empty({static_cast<int64_t>(scratch_floats)}, DType::F32);
    cuda::topk(a.data<float>(), R, N, k, values.data<float>(), indices.data<int32_t>(),
               scratch_floats ? scratch.data<float>() : nullptr, stream_);
    check_launch("topk");
  }

  void matmul_experts(const Tensor& x, const Linear& w, const Tensor& experts, const Tensor& y) override {
    Timed timed_(*this, "matmul_experts");
    const int64_t R = experts.numel(), X = x.dim(0), K = x.dim(1), N = w.out_features();
    VATIC_CHECK(w.weight.ndim() == 3 && X > 0 && R % X == 0 && y.dim(0) == R && y.dim(1) == N &&
                    w.in_features() == K && experts.dtype() == DType::I32 && experts.is_contiguous() &&
                    x.dtype() == DType::F32 && x.stride(1) == 1 && y.stride(1) == 1,
                "matmul_experts: x {} · W{} for {} routed rows -> y {}", x.describe(), w.weight.describe(), R,
                y.describe());
    if (w.quantized()) VATIC_CHECK(K % w.group == 0, "matmul_experts: {} inputs are not whole groups", K);
    bind();
    if (R == 0 || N == 0) return;
    cuda::gemv_experts(x.data<float>(), x.stride(0), R / X, experts.data<int32_t>(), R, weight(w), N, K,
                       y.data<float>(), y.stride(0), profiling_ && !recording_ ? distinct_experts_dev_ : nullptr,
                       stream_);
    check_launch("matmul_experts");
  }

  void matmul_experts_gated(const Tensor& x, const Linear& gate, const Linear& up, const Tensor& experts, Unary act,
                            const Tensor& y) override {
    const int64_t R = experts.numel(), X = x.dim(0), K = x.dim(1), N = gate.out_features();
    const bool fused = y.is_contiguous() && up.bits == gate.bits && up.group == gate.group &&
                       up.weight.dtype() == gate.weight.dtype() && up.out_features() == N && up.in_features() == K &&
                       (!gate.quantized() || up.scales.dtype() == gate.scales.dtype());
    if (!fused) return Backend::matmul_experts_gated(x, gate, up, experts, act, y);
    Timed timed_(*this, "matmul_experts_gated");
    VATIC_CHECK(gate.weight.ndim() == 3 && up.weight.ndim() == 3 && X > 0 && R % X == 0 && y.dim(0) == R &&
                    y.dim(1) == N && gate.in_features() == K && experts.dtype() == DType::I32 &&
                    experts.is_contiguous() && x.dtype() == DType::F32 && x.stride(1) == 1,
                "matmul_experts_gated: x {} · W{} for {} routed rows -> y {}", x.describe(), gate.weight.describe(), R,
                y.describe());
    if (gate.quantized()) VATIC_CHECK(K % gate.group == 0, "matmul_experts: {} inputs are not whole groups", K);
    bind();
    if (R == 0 || N == 0) return;
    const cuda::Weight wu = weight(up);
    // The halves of one stacked gate/up matrix count as one matrix read, as a single matmul_experts over it does.
    const bool one_stack = gate.weight.stride(0) == up.weight.stride(0) &&
                           static_cast<const char*>(up.weight.raw()) ==
                               static_cast<const char*>(gate.weight.raw()) +
                                   N * gate.weight.stride(1) * static_cast<int64_t>(dtype_size(gate.weight.dtype()));
    cuda::gemv_experts(x.data<float>(), x.stride(0), R / X, experts.data<int32_t>(), R, weight(gate), N, K,
                       y.data<float>(), y.stride(0), profiling_ && !recording_ ? distinct_experts_dev_ : nullptr,
                       stream_, &wu, static_cast<int>(act), one_stack ? 1 : 2);
    check_launch("matmul_experts_gated");
  }

  void gather_rows(const Tensor& table, const Tensor& ids, const Tensor& out) override {
    Timed timed_(*this, "gather_rows");
    const int64_t R = table.dim(0), C = table.dim(1), n = ids.numel();
    VATIC_CHECK((table.dtype() == DType::I32 || table.dtype() == DType::F32) && ids.dtype() == DType::I32 &&
                    out.dtype() == table.dtype() && table.is_contiguous() && ids.is_contiguous() && out.dim(0) == n &&
                    out.dim(1) == C && out.is_contiguous(),
                "gather_rows: table {} ids {} out {}", table.describe(), ids.describe(), out.describe());
    bind();
    // An F32 table moves as the same 32-bit words.
    cuda::gather_rows(table.data<int32_t>(), R, C, ids.data<int32_t>(), n, out.data<int32_t>(), flag_dev_, stream_);
    check_launch("gather_rows");
  }

  void scatter(const Tensor& values, const Tensor& index, const Tensor& out) override {
    Timed timed_(*this, "scatter");
    const int64_t n = values.numel();
    VATIC_CHECK(values.dtype() == DType::F32 && index.dtype() == DType::I32 && index.numel() == n &&
                    values.is_contiguous() && index.is_contiguous() && out.dtype() == DType::F32 &&
                    out.is_contiguous(),
                "scatter: values {} index {} out {}", values.describe(), index.describe(), out.describe());
    bind();
    cuda::scatter(values.data<float>(), index.data<int32_t>(), n, out.data<float>(), out.numel(), flag_dev_, stream_);
    check_launch("scatter");
  }

  void masked_logits(const Tensor& y, const Linear& table, const Tensor& groups, const Tensor& clusters,
                     const Tensor& logits) override {
    const int64_t K = table.in_features(), V = table.out_features();
    const int64_t C = groups.ndim() == 2 ? groups.dim(0) : 0, per = groups.ndim() == 2 ? groups.dim(1) : 0;
    const bool fits = y.dtype() == DType::F32 && y.is_contiguous() && y.numel() == K && groups.dtype() == DType::I32 &&
                      groups.is_contiguous() && C * per == V && C <= cuda::kMaxMaskedClusters &&
                      clusters.dtype() == DType::I32 && clusters.is_contiguous() && clusters.numel() <= C &&
                      logits.dtype() == DType::F32 && logits.is_contiguous() && logits.numel() == V &&
                      (!table.quantized() || K % table.group == 0);
    if (!fits) return Backend::masked_logits(y, table, groups, clusters, logits);
    Timed timed_(*this, "masked_logits");
    bind();
    cuda::masked_logits(y.data<float>(), weight(table), V, K, groups.data<int32_t>(), C, per,
                        clusters.data<int32_t>(), static_cast<int>(clusters.numel()), logits.data<float>(), flag_dev_,
                        stream_);
    check_launch("masked_logits");
  }

  void combine_rows(const Tensor& rows, const Tensor& weights, const Tensor& out) override {
    Timed timed_(*this, "combine_rows");
    const int64_t T = out.dim(0), D = out.dim(1), k = weights.dim(1);
    VATIC_CHECK(rows.dim(0) == T * k && rows.dim(1) == D && weights.dim(0) == T && rows.is_contiguous() &&
                    weights.is_contiguous() && out.is_contiguous(),
                "combine_rows: rows {} weights {} out {}", rows.describe(), weights.describe(), out.describe());
    bind();
    cuda::combine_rows(rows.data<float>(), weights.data<float>(), T, k, D, out.data<float>(), stream_);
    check_launch("combine_rows");
  }

  void route(const Tensor& a, const RouteParams& p, const Tensor& weights, const Tensor& experts) override {
    Timed timed_(*this, "route");
    const int64_t E = a.dim(-1), T = a.numel() / std::max<int64_t>(E, 1);
    VATIC_CHECK(a.is_contiguous() && a.dtype() == DType::F32 && p.k > 0 && p.k <= E && p.k <= 64 &&
                    E <= cuda::kMaxRouteExperts && weights.numel() == T * p.k && experts.numel() == T * p.k &&
                    p.groups > 0 && E % p.groups == 0 && p.groups_kept > 0 && p.groups_kept <= p.groups,
                "route: {} into {} experts ({} groups, {} kept)", a.describe(), p.k, p.groups, p.groups_kept);
    for (const Tensor* t : {p.bias, p.expert_scale})
      if (t) check_f32_contiguous(*t, "route");
    bind();
    cuda::RouteArgs r{a.data<float>(), T, E, p.kind == RouteParams::Softmax ? 0 : 1, p.k, p.renormalize, p.scale,
                      p.bias ? p.bias->data<float>() : nullptr, p.expert_scale ? p.expert_scale->data<float>() : nullptr,
                      p.groups, p.groups_kept, weights.data<float>(), experts.data<int32_t>()};
    cuda::route(r, stream_);
    check_launch("route");
  }

  void kv_write(const Tensor& k, const Tensor& v, const Tensor& positions, const Tensor& keys, const Tensor& values,
                const Tensor& slot_pos, bool ring) override {
    Timed timed_(*this, "kv_write");
    const int64_t T = k.dim(0), H = k.dim(1), D = k.dim(2), Dv = v.dim(2), C = keys.dim(0);
    VATIC_CHECK(k.ndim() == 3 && v.ndim() == 3 && v.dim(0) == T && v.dim(1) == H && keys.dim(1) == H &&
                    keys.dim(2) == D && values.dim(0) == C && values.dim(1) == H && values.dim(2) == Dv &&
                    k.dtype() == DType::F32 && v.dtype() == DType::F32 && keys.dtype() == DType::F32 &&
                    values.dtype() == DType::F32 && k.stride(2) == 1 && (Dv == 0 || v.stride(2) == 1) &&
                    keys.is_contiguous() && values.is_contiguous() && positions.dtype() == DType::I32 &&
                    positions.is_contiguous() && positions.numel() == T && slot_pos.dtype() == DType::I32 &&
                    slot_pos.is_contiguous() && slot_pos.numel() == C,
                "kv_write: k {} v {} positions {} into keys {} values {} slots {}", k.describe(), v.describe(),
                positions.describe(), keys.describe(), values.describe(), slot_pos.describe());
    bind();
    cuda::KvWriteArgs a{k.data<float>(), k.stride(0), k.stride(1), v.data<float>(), v.stride(0), v.stride(1),
                        positions.data<int32_t>(), T, H, D, Dv, C, ring, keys.data<float>(), values.data<float>(),
                        slot_pos.data<int32_t>(), flag_dev_};
    cuda::kv_write(a, stream_);
    check_launch("kv_write");
  }

  void forget_positions(const Tensor& slot_pos, int64_t n) override {
    Timed timed_(*this, "forget_positions");
    VATIC_CHECK(slot_pos.dtype() == DType::I32 && slot_pos.is_contiguous(), "forget_positions: {}",
                slot_pos.describe());
    bind();
    cuda::forget_positions(slot_pos.data<int32_t>(), slot_pos.numel(), n, stream_);
    check_launch("forget_positions");
  }

  std::unique_ptr<DeviceGraph> record(const std::function<void()>& work) override {
    bind();
    if (profiling_ || recording_) return nullptr;
    const int id = next_graph_++;
    pool_.begin_arena(id);
    recording_ = true;
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
      recording_ = false;
      pool_.end_arena();
      pool_.drop_arena(id);
      cuda_fail(e, "cudaStreamBeginCapture");
    }
    auto stop = [&] {
      e = cudaStreamEndCapture(stream_, &graph);
      recording_ = false;
      pool_.end_arena();
    };
    try {
      work();
    } catch (...) {
      stop();
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      pool_.drop_arena(id);
      throw;
    }
    stop();
    auto g = std::make_unique<CudaGraph>(*this, id);
    if (e != cudaSuccess) cuda_fail(e, "cudaStreamEndCapture");
    e = cudaGraphInstantiate(&g->exec_, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) cuda_fail(e, "cudaGraphInstantiate");
    return g;
  }

  void logsumexp(const Tensor& a, float scale, const Tensor& out) override {
    Timed timed_(*this, "logsumexp");
    check_f32_contiguous(a, "logsumexp");
    const int64_t N = a.dim(-1), R = a.numel() / std::max<int64_t>(N, 1);
    VATIC_CHECK(out.dtype() == DType::F32 && out.is_contiguous() && out.numel() == R && scale > 0,
                "logsumexp: a {} scale {} out {}", a.describe(), scale, out.describe());
    bind();
    cuda::logsumexp(a.data<float>(), R, N, scale, out.data<float>(), stream_);
    check_launch("logsumexp");
  }

  void residual_mass(const Tensor& p, const Tensor& q, float p_scale, float p_shift, float q_scale, float q_shift,
                     const Tensor& out) override {
    Timed timed_(*this, "residual_mass");
    check_f32_contiguous(p, "residual_mass");
    check_f32_contiguous(q, "residual_mass");
    const int64_t N = p.dim(-1), R = p.numel() / std::max<int64_t>(N, 1);
    VATIC_CHECK(q.numel() == p.numel() && out.dtype() == DType::F32 && out.is_contiguous() && out.numel() == R,
                "residual_mass: p {} q {} out {}", p.describe(), q.describe(), out.describe());
    bind();
    cuda::residual_mass(p.data<float>(), q.data<float>(), R, N, p_scale, p_shift, q_scale, q_shift,
                        out.data<float>(), stream_);
    check_launch("residual_mass");
  }

  void mask_tokens(const Tensor& x, const Tensor& bits) override {
    Timed timed_(*this, "mask_tokens");
    check_f32_contiguous(x, "mask_tokens");
    VATIC_CHECK(bits.dtype() == DType::I32 && bits.is_contiguous() && bits.numel() * 32 >= x.numel(),
                "mask_tokens: x {} bits {}", x.describe(), bits.describe());
    bind();
    cuda::mask_tokens(x.data<float>(), x.numel(), reinterpret_cast<const uint32_t*>(bits.data<int32_t>()), stream_);
    check_launch("mask_tokens");
  }

  void penalize(const Tensor& x, const Tensor& ids, const Tensor& counts, float repeat, float presence,
                float frequency) override {
    Timed timed_(*this, "penalize");
    check_f32_contiguous(x, "penalize");
    VATIC_CHECK(ids.dtype() == DType::I32 && ids.is_contiguous() && counts.dtype() == DType::I32 &&
                    counts.is_contiguous() && counts.numel() == ids.numel(),
                "penalize: x {} ids {} counts {}", x.describe(), ids.describe(), counts.describe());
    bind();
    cuda::penalize(x.data<float>(), x.numel(), ids.data<int32_t>(), counts.data<int32_t>(), ids.numel(), repeat,
                   presence, frequency, stream_);
    check_launch("penalize");
  }

 private:
  class CudaGraph final : public DeviceGraph {
   public:
    CudaGraph(CudaBackend& b, int id) : b_(b), id_(id) {}
    ~CudaGraph() override {
      b_.bind();
      cudaStreamSynchronize(b_.stream_);  // a replay may still be running
      if (exec_) cudaGraphExecDestroy(exec_);
      b_.pool_.drop_arena(id_);
    }
    void replay() override {
      b_.bind();
      b_.not_recording("replay a graph");
      CUDA_OK(cudaGraphLaunch(exec_, b_.stream_), "cudaGraphLaunch");
    }
    CudaBackend& b_;
    int id_;
    cudaGraphExec_t exec_ = nullptr;
  };

  void not_recording(const char* what) const {
    if (recording_) throw Error(fmt::format("cannot {} while recording a graph", what));
  }

  // Times one operation while profiling is on: events around it on the stream, read when the profile is taken, so
  // the times are the device's and the work is queued as without profiling.
  struct Timed {
    Timed(CudaBackend& b, const char* name) : b_(b), name_(name) {
      if (!b_.profiling_ || b_.recording_) return;
      start_ = b_.event();
      cudaEventRecord(start_, b_.stream_);
    }
    ~Timed() {
      if (!start_) return;
      cudaEvent_t stop = b_.event();
      cudaEventRecord(stop, b_.stream_);
      b_.timings_.push_back({name_, start_, stop});
    }
    CudaBackend& b_;
    const char* name_;
    cudaEvent_t start_ = nullptr;
  };
  struct Timing {
    const char* name;
    cudaEvent_t start, stop;
  };
  cudaEvent_t event() {
    if (events_.empty()) {
      cudaEvent_t e;
      CUDA_OK(cudaEventCreate(&e), "cudaEventCreate");
      return e;
    }
    cudaEvent_t e = events_.back();
    events_.pop_back();
    return e;
  }

  static constexpr size_t kStagingBytes = size_t(32) << 20;
  static constexpr size_t kDirectUploadBytes = size_t(1) << 20;
  struct Staging {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
  };

  static bool is_number(DType t) {
    return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F8_E4M3 || t == DType::I32 ||
           t == DType::I64;
  }
  static bool is_writable(DType t) {
    return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::I32;
  }

  void bind() const {
    if (bound_ != index_) {
      CUDA_OK(cudaSetDevice(index_), "cudaSetDevice");
      bound_ = index_;
    }
  }
  void blas_ok(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS) throw DeviceError(fmt::format("cuBLAS error {} in {}", static_cast<int>(s), what));
  }
  // Errors kernels record on the device (a token id outside the vocabulary) surface at the next synchronisation.
  void check_flags() {
    CUDA_OK(cudaMemcpy(flag_host_, flag_dev_, 2 * sizeof(int), cudaMemcpyDeviceToHost), "check");
    if (flag_host_[0]) {
      const int id = flag_host_[1];
      CUDA_OK(cudaMemset(flag_dev_, 0, 2 * sizeof(int)), "check");
      throw InvalidInput(fmt::format("index {} is out of range (a token id outside the vocabulary?)", id));
    }
  }

  Device device_;
  int index_;
  std::string description_;
  mutable MemoryPool pool_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  struct SideStream {
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    cudaEvent_t done = nullptr;
  };
  std::array<SideStream, 2> side_;    // gemm_bf16x3's jobs beside the first (VATIC_GEMM_STREAMS=0: none)
  cudaEvent_t split_done_ = nullptr;  // the parts of gemm_bf16x3's input are split (null: no side streams)
  bool gemm_stack_ = true;
  int sms_ = 1;
  bool tensor_cores_ = false;  // bf16 prefill GEMMs as three bf16 GEMMs on tensor cores
  Staging staging_[2];
  int* flag_host_ = nullptr;
  int* flag_dev_ = nullptr;
  unsigned* counter_dev_ = nullptr;
  void* digits_dev_ = nullptr;
  bool fused_norms_ = false;
  unsigned long long* distinct_experts_dev_ = nullptr;  // counted while profiling (take_counts)
  bool profiling_ = false;
  bool recording_ = false;
  int next_graph_ = 0;
  std::vector<Timing> timings_;
  std::vector<cudaEvent_t> events_;
  static thread_local int bound_;
};

thread_local int CudaBackend::bound_ = -1;

struct Devices {
  int count = 0;
  std::string reason;
  std::vector<std::unique_ptr<CudaBackend>> backends;
  std::mutex mu;
};

Devices& devices() {
  // Never destroyed: tensors in static objects may outlive main(), and their storage returns to these pools.
  static Devices* d = [] {
    auto* r = new Devices;
    cudaError_t e = cudaGetDeviceCount(&r->count);
    if (e != cudaSuccess) {
      r->count = 0;
      r->reason = e == cudaErrorNoDevice ? "no CUDA GPU found"
                  : e == cudaErrorInsufficientDriver ? "no CUDA driver for this toolkit"
                                                     : fmt::format("CUDA unavailable: {}", cudaGetErrorString(e));
      cudaGetLastError();
    } else if (r->count == 0) {
      r->reason = "no CUDA GPU found";
    }
    r->backends.resize(static_cast<size_t>(r->count));
    return r;
  }();
  return *d;
}

}  // namespace

int cuda_device_count() { return devices().count; }
std::string cuda_unavailable_reason() { return devices().reason; }

Backend& cuda_backend(int index) {
  Devices& d = devices();
  VATIC_CHECK(index >= 0 && index < d.count, "no cuda:{} on this machine", index);
  std::lock_guard<std::mutex> lock(d.mu);
  auto& b = d.backends[static_cast<size_t>(index)];
  if (!b) b = std::make_unique<CudaBackend>(index);
  return *b;
}

}  // namespace vatic
