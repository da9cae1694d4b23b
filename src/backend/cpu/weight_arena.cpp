#include "backend/cpu/weight_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <string>

namespace vatic::cpu {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// Weights are placed in chunks of at least this much address space; only the pages written are memory.
constexpr size_t kChunk = size_t{64} << 20;
constexpr size_t kAlign = 64;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// The kernel's estimate of the memory available without swapping (MemAvailable), in bytes; 0 when unknown.
size_t available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  size_t kb = 0;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
}

size_t copy_budget() {
  if (const char* env = std::getenv("VATIC_CPU_WEIGHT_COPY_MB"); env && *env)
    return static_cast<size_t>(std::strtoull(env, nullptr, 10)) << 20;
  return available_memory() / 2;
}

// One anonymous mapping, 2 MB aligned, filled from the front.
struct Chunk {
  uint8_t* base = nullptr;
  size_t size = 0, used = 0;
  void* map = nullptr;
  size_t map_size = 0;

  explicit Chunk(size_t bytes) : size(bytes), map_size(bytes + kHugePage) {
    map = ::mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) throw std::bad_alloc();
    base = reinterpret_cast<uint8_t*>(round_up(reinterpret_cast<uintptr_t>(map), kHugePage));
    // Advice only: without transparent huge pages (or with them off) the copy is still one contiguous run.
    ::madvise(base, size, MADV_HUGEPAGE);
  }
  ~Chunk() { ::munmap(map, map_size); }
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;
};

// Bytes of the copies alive (counted against the budget). Constant-initialized, so that a copy freed during the
// process's exit still finds it.
constinit std::atomic<size_t> g_live{0};

// A tensor's bytes in a chunk; the chunk lives as long as any tensor placed in it.
class ChunkStorage final : public Storage {
 public:
  ChunkStorage(std::shared_ptr<Chunk> chunk, uint8_t* data, size_t bytes)
      : Storage(data, bytes, Device::CPU, true), chunk_(std::move(chunk)) {}
  ~ChunkStorage() override { g_live.fetch_sub(size_, std::memory_order_relaxed); }

 private:
  std::shared_ptr<Chunk> chunk_;
};

class Arena {
 public:
  Tensor copy(const Tensor& t) {
    const size_t n = t.nbytes();
    if (n == 0 || !t.is_contiguous() || !t.device().is_cpu()) return t;
    std::lock_guard<std::mutex> lock(m_);
    if (!budget_known_) {
      budget_ = copy_budget();
      budget_known_ = true;
    }
    if (g_live.load(std::memory_order_relaxed) + n > budget_) return t;
    // The chunk being filled is held only through the tensors placed in it: when a model is unloaded, its chunks go.
    std::shared_ptr<Chunk> c = current_.lock();
    if (!c || round_up(c->used, kAlign) + n > c->size) {
      c = std::make_shared<Chunk>(std::max(kChunk, round_up(n, kHugePage)));
      current_ = c;
    }
    c->used = round_up(c->used, kAlign);
    uint8_t* dst = c->base + c->used;
    c->used += n;
    g_live.fetch_add(n, std::memory_order_relaxed);
    std::memcpy(dst, t.raw(), n);
    return Tensor(std::make_shared<ChunkStorage>(std::move(c), dst, n), t.dtype(), t.shape());
  }

 private:
  std::mutex m_;
  std::weak_ptr<Chunk> current_;
  size_t budget_ = 0;
  bool budget_known_ = false;
};

Arena& arena() {
  static Arena a;
  return a;
}

}  // namespace

Tensor resident_copy(const Tensor& t) { return arena().copy(t); }
size_t resident_bytes() { return g_live.load(std::memory_order_relaxed); }

}  // namespace vatic::cpu
