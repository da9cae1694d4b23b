#include "tensor/host_cache.h"

#include <bit>
#include <cstdlib>
#include <new>
#include <string>

#include "util/error.h"

namespace vatic {

size_t HostBlockCache::class_size(size_t bytes) {
  if (bytes <= 1024) return bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign;
  const size_t step = std::bit_floor(bytes - 1) / 8;
  return (bytes + step - 1) / step * step;
}

void* HostBlockCache::allocate(size_t bytes) {
  const size_t size = class_size(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      stats_.hits++;
      return p;
    }
    stats_.misses++;
  }
  void* p = std::aligned_alloc(kAlign, size);
  if (!p) {
    // The system may be short only because of what idles here.
    release();
    p = std::aligned_alloc(kAlign, size);
    if (!p) throw std::bad_alloc();
  }
  return p;
}

void HostBlockCache::deallocate(void* p, size_t bytes) {
  if (!p) return;
  const size_t size = class_size(bytes);
  if (size > limit_) {
    std::free(p);
    return;
  }
  std::vector<void*> evicted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (cached_ + size > limit_) {
      auto last = std::prev(free_.end());  // free_ holds a block: cached_ > 0 here since size <= limit_
      if (last->second.empty()) {
        free_.erase(last);
        continue;
      }
      evicted.push_back(last->second.back());
      last->second.pop_back();
      cached_ -= last->first;
      if (last->second.empty()) free_.erase(last);
    }
    free_[size].push_back(p);
    cached_ += size;
  }
  for (void* e : evicted) std::free(e);
}

void HostBlockCache::release() {
  std::map<size_t, std::vector<void*>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(free_);
    cached_ = 0;
  }
  for (auto& [size, blocks] : all)
    for (void* p : blocks) std::free(p);
}

size_t HostBlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

HostBlockCache::Stats HostBlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

namespace {

// Under AddressSanitizer blocks go back to the system at once by default, so that a use after free of tensor
// storage is still caught rather than landing in a reused block.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kDefaultMiB = 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr size_t kDefaultMiB = 0;
#else
constexpr size_t kDefaultMiB = 256;
#endif
#else
constexpr size_t kDefaultMiB = 256;
#endif

}  // namespace

HostBlockCache& host_block_cache() {
  // Never destroyed: tensors that outlive static destruction (globals, detached threads) still free into it.
  static HostBlockCache* cache = [] {
    size_t mib = kDefaultMiB;
    if (const char* env = std::getenv("VATIC_HOST_CACHE_MB"); env && *env) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(env, &end, 10);
      if (*end != '\0' || v > (size_t{1} << 24)) fail("VATIC_HOST_CACHE_MB={} is not a size in MiB", env);
      mib = static_cast<size_t>(v);
    }
    return new HostBlockCache(mib << 20);
  }();
  return *cache;
}

}  // namespace vatic
