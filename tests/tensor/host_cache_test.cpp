// The host block cache behind tensor storage: size classes, reuse, alignment, the bound on idle bytes (largest
// blocks evicted first), release, concurrent use, and host tensors going through it.
#include "tensor/host_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "tensor/tensor.h"

namespace vatic {
namespace {

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % HostBlockCache::kAlign == 0; }

TEST(HostBlockCache, SizeClassesWasteAtMostAnEighth) {
  EXPECT_EQ(HostBlockCache::class_size(0), 64u);
  EXPECT_EQ(HostBlockCache::class_size(1), 64u);
  EXPECT_EQ(HostBlockCache::class_size(64), 64u);
  EXPECT_EQ(HostBlockCache::class_size(65), 128u);
  EXPECT_EQ(HostBlockCache::class_size(1024), 1024u);
  EXPECT_EQ(HostBlockCache::class_size(1025), 1152u);
  EXPECT_EQ(HostBlockCache::class_size(2048), 2048u);
  EXPECT_EQ(HostBlockCache::class_size(2049), 2304u);
  size_t prev = 0;
  for (size_t n = 1; n < (size_t{1} << 22); n = n * 5 / 4 + 1) {
    const size_t c = HostBlockCache::class_size(n);
    EXPECT_GE(c, n);
    EXPECT_EQ(c % 64, 0u);
    EXPECT_LE(c, std::max<size_t>(n + 63, n + n / 8)) << n;
    EXPECT_GE(c, prev);  // monotone
    EXPECT_EQ(HostBlockCache::class_size(c), c);  // a class size is its own class
    prev = c;
  }
}

TEST(HostBlockCache, ReusesAFreedBlockOfTheSameClass) {
  HostBlockCache cache(1 << 20);
  void* a = cache.allocate(3000);
  ASSERT_TRUE(aligned(a));
  std::memset(a, 1, 3000);
  cache.deallocate(a, 3000);
  EXPECT_EQ(cache.cached_bytes(), HostBlockCache::class_size(3000));
  // Another size of the same class gets the same block back; a size of another class does not.
  void* b = cache.allocate(2900);
  EXPECT_EQ(b, a);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  void* c = cache.allocate(3000);
  EXPECT_NE(c, a);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 2u);
  cache.deallocate(b, 2900);
  cache.deallocate(c, 3000);
  void* d = cache.allocate(100000);
  EXPECT_NE(d, a);
  EXPECT_NE(d, c);
  cache.deallocate(d, 100000);
}

TEST(HostBlockCache, BlocksAreAlignedAndUsable) {
  HostBlockCache cache(1 << 20);
  std::vector<std::pair<void*, size_t>> blocks;
  for (size_t n : {0, 1, 63, 64, 65, 1000, 4096, 5000, 70000, 300000}) {
    void* p = cache.allocate(n);
    ASSERT_TRUE(aligned(p)) << n;
    std::memset(p, 0xab, n);
    blocks.emplace_back(p, n);
  }
  for (auto [p, n] : blocks) cache.deallocate(p, n);
  for (size_t n : {0, 1, 63, 64, 65, 1000, 4096, 5000, 70000, 300000}) {
    void* p = cache.allocate(n);
    ASSERT_TRUE(aligned(p)) << n;
    cache.deallocate(p, n);
  }
  EXPECT_EQ(cache.stats().hits, 10u);
}

TEST(HostBlockCache, IdleBytesStayWithinTheLimitLargestEvictedFirst) {
  const size_t limit = 64 * 1024;
  HostBlockCache cache(limit);
  // A block larger than the limit goes straight back to the system.
  void* huge = cache.allocate(limit + 1);
  cache.deallocate(huge, limit + 1);
  EXPECT_EQ(cache.cached_bytes(), 0u);

  constexpr size_t kLarge = 28 * 1024;
  std::vector<void*> small(16), large(2);
  for (auto& p : small) p = cache.allocate(1024);
  for (auto& p : large) p = cache.allocate(kLarge);
  for (void* p : large) cache.deallocate(p, kLarge);
  EXPECT_EQ(cache.cached_bytes(), 2 * kLarge);
  // 16 KiB of small blocks do not fit beside both large ones: one large block makes room, the small ones all stay.
  for (void* p : small) {
    cache.deallocate(p, 1024);
    EXPECT_LE(cache.cached_bytes(), limit);
  }
  EXPECT_EQ(cache.cached_bytes(), kLarge + 16 * 1024);
  const auto before = cache.stats();
  for (auto& p : small) p = cache.allocate(1024);
  EXPECT_EQ(cache.stats().hits - before.hits, 16u);
  void* l = cache.allocate(kLarge);
  EXPECT_EQ(cache.stats().hits - before.hits, 17u);
  void* l2 = cache.allocate(kLarge);
  EXPECT_EQ(cache.stats().misses - before.misses, 1u);
  for (void* p : small) cache.deallocate(p, 1024);
  cache.deallocate(l, kLarge);
  cache.deallocate(l2, kLarge);
  EXPECT_LE(cache.cached_bytes(), limit);
}

TEST(HostBlockCache, ZeroLimitKeepsNothing) {
  HostBlockCache cache(0);
  void* a = cache.allocate(100);
  cache.deallocate(a, 100);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  void* b = cache.allocate(100);
  cache.deallocate(b, 100);
  EXPECT_EQ(cache.stats().hits, 0u);
}

TEST(HostBlockCache, ReleaseReturnsEverything) {
  HostBlockCache cache(1 << 20);
  std::vector<void*> blocks;
  for (int i = 0; i < 10; i++) blocks.push_back(cache.allocate(1000 * (i + 1)));
  for (int i = 0; i < 10; i++) cache.deallocate(blocks[i], 1000 * (i + 1));
  EXPECT_GT(cache.cached_bytes(), 0u);
  cache.release();
  EXPECT_EQ(cache.cached_bytes(), 0u);
  const auto before = cache.stats();
  void* p = cache.allocate(1000);
  EXPECT_EQ(cache.stats().misses, before.misses + 1);
  cache.deallocate(p, 1000);
}

TEST(HostBlockCache, ConcurrentUseNeverHandsOutABlockTwice) {
  HostBlockCache cache(256 * 1024);
  constexpr int kThreads = 4, kRounds = 2000;
  std::vector<std::thread> threads;
  std::vector<int> corrupted(kThreads, 0);
  for (int t = 0; t < kThreads; t++)
    threads.emplace_back([&, t] {
      std::vector<std::pair<uint8_t*, size_t>> live;
      for (int r = 0; r < kRounds; r++) {
        const size_t n = 64 + static_cast<size_t>((r * 7919 + t * 104729) % 20000);
        auto* p = static_cast<uint8_t*>(cache.allocate(n));
        if (!aligned(p)) corrupted[t]++;
        std::memset(p, t + 1, n);  // a block given to two threads at once gets the other's pattern
        live.emplace_back(p, n);
        if (live.size() > 8 || r % 3 == 0) {
          auto [q, m] = live.front();
          live.erase(live.begin());
          for (size_t i = 0; i < m; i++)
            if (q[i] != t + 1) {
              corrupted[t]++;
              break;
            }
          cache.deallocate(q, m);
        }
      }
      for (auto [q, m] : live) cache.deallocate(q, m);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; t++) EXPECT_EQ(corrupted[t], 0) << "thread " << t;
  EXPECT_LE(cache.cached_bytes(), 256u * 1024);
  EXPECT_GT(cache.stats().hits, 0u);
}

TEST(HostBlockCache, HostTensorsReuseStorageAndStillZeroFill) {
  std::set<const void*> seen;
  for (int i = 0; i < 4; i++) {
    Tensor t = Tensor::uninitialized({7, 33}, DType::F32);
    EXPECT_TRUE(aligned(t.raw()));
    seen.insert(t.raw());
    std::memset(t.raw(), 0xff, t.nbytes());
  }
  if (host_block_cache().limit() > 0) {
    EXPECT_EQ(seen.size(), 1u);
  }
  // empty() zero-fills even a reused block.
  Tensor z = Tensor::empty({7, 33}, DType::F32);
  for (int64_t i = 0; i < z.numel(); i++) ASSERT_EQ(z.data<float>()[i], 0.0f);
}

}  // namespace
}  // namespace vatic
