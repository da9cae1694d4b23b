#include "cache/kv_cache.h"

#include <algorithm>
#include <atomic>
#include <numeric>

#include "ops/ops.h"

namespace vatic {

namespace {
std::atomic<uint64_t> next_generation{1};
}

KvCache::KvCache(int64_t heads, int64_t head_dim, int64_t value_dim, Device device)
    : heads_(heads), head_dim_(head_dim), value_dim_(value_dim), device_(device), full_extent_(!device.is_cpu()) {}

void KvCache::reallocate(int64_t capacity) {
  Backend& be = backend_for(device_);
  Tensor k = be.empty({capacity, heads_, head_dim_}, DType::F32);
  Tensor v = be.empty({capacity, heads_, value_dim_}, DType::F32);
  be.fill(k, 0.0f);  // empty slots are masked out, but keep them finite
  be.fill(v, 0.0f);
  std::vector<int32_t> pos(capacity, -1);
  Tensor slot_pos = ops::ids(pos, device_);
  const int64_t old_cap = capacity_;
  std::vector<int32_t> old_pos = pos_;
  Tensor old_k = keys_, old_v = values_;
  capacity_ = capacity;
  // Each run of occupied slots moves with one write that places its entries by position under the new capacity
  // (one or two runs for a full cache or a ring, not one copy per entry).
  for (int64_t s = 0; s < old_cap;) {
    if (old_pos[s] < 0) {
      s++;
      continue;
    }
    int64_t e = s + 1;
    while (e < old_cap && old_pos[e] >= 0) e++;
    ops::kv_write(old_k.slice(0, s, e), old_v.slice(0, s, e),
                  ops::ids(std::vector<int32_t>(old_pos.begin() + s, old_pos.begin() + e), device_), k, v, slot_pos,
                  ring());
    for (int64_t i = s; i < e; i++) pos[slot_of(old_pos[i])] = old_pos[i];
    s = e;
  }
  keys_ = k;
  values_ = v;
  pos_ = std::move(pos);
  slot_pos_ = slot_pos;
  generation_ = next_generation++;
}

void KvCache::append(const Tensor& k, const Tensor& v, const Tensor& positions) {
  const int64_t T = k.dim(0);
  VATIC_CHECK(k.ndim() == 3 && k.dim(1) == heads_ && k.dim(2) == head_dim_ && v.dim(0) == T && v.dim(1) == heads_ &&
                  v.dim(2) == value_dim_ && positions.numel() == T,
              "kv cache append: k {} v {} positions {} for a cache of {} heads × {}/{}", k.describe(), v.describe(),
              positions.describe(), heads_, head_dim_, value_dim_);
  reserve_for(T);
  ops::kv_write(k, v, positions, keys_, values_, slot_pos_, ring());
  note_append(T);
}

void KvCache::append_with(int64_t T, const std::function<void(const KvSlots&)>& write) {
  reserve_for(T);
  write(KvSlots{keys_, values_, slot_pos_, ring()});
  note_append(T);
}

void KvCache::append(const Tensor& k, const Tensor& v) {
  std::vector<int32_t> pos(static_cast<size_t>(k.dim(0)));
  std::iota(pos.begin(), pos.end(), static_cast<int32_t>(length_));
  append(k, v, ops::ids(pos, device_));
}

void KvCache::note_append(int64_t T) {
  VATIC_CHECK(has_room(T), "kv cache: no room for {} more positions without reallocating", T);
  for (int64_t t = 0; t < T; t++) pos_[slot_of(length_ + t)] = static_cast<int32_t>(length_ + t);
  length_ += T;
}

void KvCache::rewind(int64_t n) {
  VATIC_CHECK(can_rewind_to(n), "cannot rewind a cache of length {} to {}: the entries it needs were overwritten",
              length_, n);
  for (auto& p : pos_)
    if (p >= n) p = -1;
  ops::forget_positions(slot_pos_, n);
  length_ = n;
}

void KvCache::rewind_all() {
  std::fill(pos_.begin(), pos_.end(), -1);
  ops::forget_positions(slot_pos_, 0);
  length_ = 0;
}

void KvCache::restore(const KvSnapshot& s) {
  rewind_all();
  const int64_t n = static_cast<int64_t>(s.positions.size());
  if (n == 0) {
    length_ = s.length;
    return;
  }
  // Entries are stored in position order; place them as if appended.
  length_ = s.positions.front();
  if (capacity_ < n) reallocate(std::max<int64_t>(n, 16));
  reserve_for(n);
  // One write places every entry by its position (and marks its slot on the device).
  ops::kv_write(s.keys, s.values, ops::ids(s.positions, device_), keys_, values_, slot_pos_, ring());
  for (int64_t i = 0; i < n; i++) pos_[slot_of(s.positions[i])] = s.positions[i];
  length_ = s.length;
}

// ---- full ----

FullKvCache::FullKvCache(int64_t heads, int64_t head_dim, int64_t value_dim, Device device, int64_t initial_capacity)
    : KvCache(heads, head_dim, value_dim, device) {
  reallocate(std::max<int64_t>(initial_capacity, 1));
}

void FullKvCache::reserve_for(int64_t extra) {
  if (length_ + extra <= capacity_) return;
  int64_t cap = capacity_;
  while (cap < length_ + extra) cap *= 2;
  reallocate(cap);
}

KvSnapshot FullKvCache::snapshot() const {
  KvSnapshot s;
  s.length = length_;
  // A copy, not a view: later appends must not change the snapshot.
  Backend& be = backend_for(device_);
  s.keys = be.empty({length_, heads_, head_dim_}, DType::F32);
  s.values = be.empty({length_, heads_, value_dim_}, DType::F32);
  be.copy(keys_.slice(0, 0, length_), s.keys);
  be.copy(values_.slice(0, 0, length_), s.values);
  s.positions.resize(length_);
  for (int64_t i = 0; i < length_; i++) s.positions[i] = static_cast<int32_t>(i);
  return s;
}

// ---- sliding ----

SlidingKvCache::SlidingKvCache(int64_t heads, int64_t head_dim, int64_t value_dim, int64_t window, Device device,
                               int64_t spare)
    : KvCache(heads, head_dim, value_dim, device), window_(window), spare_(spare) {
  VATIC_CHECK(window > 0, "sliding window must be positive");
  reallocate(window + spare);
}

void SlidingKvCache::reserve_for(int64_t extra) {
  // Queries of this forward reach back window-1 positions before its first token, and a rewind to its start
  // must still find the window before it: W + T slots cover both.
  if (capacity_ >= window_ + extra) return;
  reallocate(window_ + extra + spare_);
}

bool SlidingKvCache::can_rewind_to(int64_t n) const {
  if (n < 0 || n > length_) return false;
  for (int64_t p = std::max<int64_t>(0, n - window_); p < n; p++)
    if (pos_[slot_of(p)] != p) return false;
  return true;
}

KvSnapshot SlidingKvCache::snapshot() const {
  KvSnapshot s;
  s.length = length_;
  const int64_t first = std::max<int64_t>(0, length_ - window_);
  const int64_t n = length_ - first;
  Backend& be = backend_for(device_);
  s.keys = be.empty({n, heads_, head_dim_}, DType::F32);
  s.values = be.empty({n, heads_, value_dim_}, DType::F32);
  s.positions.resize(n);
  for (int64_t i = 0; i < n; i++) {
    int64_t slot = slot_of(first + i);
    VATIC_CHECK(pos_[slot] == first + i, "sliding cache lost position {}", first + i);
    be.copy(keys_.slice(0, slot, slot + 1), s.keys.slice(0, i, i + 1));
    be.copy(values_.slice(0, slot, slot + 1), s.values.slice(0, i, i + 1));
    s.positions[i] = static_cast<int32_t>(first + i);
  }
  return s;
}

}  // namespace vatic
