#pragma once
// Reuse of freed host blocks for tensor storage.
//
// A forward pass makes and drops the same few dozen activation tensors every step. Each is 64-byte aligned, which
// glibc serves as a "large" request (it merges its fast bins first, and above the mmap threshold maps and unmaps
// pages, faulting them in again on first touch): on a small model that cost 7 % of a decode step. Freed blocks
// therefore wait in free lists per size class and the next request of that class takes one back, so a steady
// decode step asks the system for no memory at all.
#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

namespace vatic {

class HostBlockCache {
 public:
  static constexpr size_t kAlign = 64;

  // Blocks idle in the cache never add up to more than `limit_bytes` (0: nothing is kept).
  explicit HostBlockCache(size_t limit_bytes) : limit_(limit_bytes) {}
  ~HostBlockCache() { release(); }
  HostBlockCache(const HostBlockCache&) = delete;
  HostBlockCache& operator=(const HostBlockCache&) = delete;

  // The bytes a request of `bytes` really gets: rounded up to 64 bytes up to 1 KiB, above that to one of eight
  // classes per power of two, so a request wastes at most 12.5 % and blocks of nearby sizes serve each other.
  static size_t class_size(size_t bytes);

  // A kAlign-aligned block of at least `bytes` (its content is unspecified); throws std::bad_alloc.
  void* allocate(size_t bytes);
  // Takes back a block from allocate(bytes) with the same `bytes`. Kept for reuse while the idle total stays
  // within the limit; to make room the largest idle blocks go back to the system first (a long prefill's big
  // activations, rather than the small blocks every decode step needs).
  void deallocate(void* p, size_t bytes);
  // Returns every idle block to the system.
  void release();

  size_t limit() const { return limit_; }
  size_t cached_bytes() const;  // idle in the cache now
  struct Stats {
    size_t hits = 0;    // requests served from the cache
    size_t misses = 0;  // requests that went to the system
  };
  Stats stats() const;

 private:
  mutable std::mutex mu_;
  const size_t limit_;
  size_t cached_ = 0;
  Stats stats_;
  std::map<size_t, std::vector<void*>> free_;  // class size -> idle blocks of that size
};

// The cache behind host tensor storage (host_storage()). Its limit comes from VATIC_HOST_CACHE_MB (MiB; 0 turns
// the reuse off), else 256 MiB (0 in AddressSanitizer builds).
HostBlockCache& host_block_cache();

}  // namespace vatic
