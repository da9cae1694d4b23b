#pragma once
// Per-layer key/value caches. Entries carry their absolute positions, so attention masks by position and a ring
// buffer needs no reordering. Both kinds can rewind to an earlier length, which speculative verification
// (rejected drafts) and the prefix cache rely on.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "tensor/tensor.h"

namespace vatic {

// What a cache needs to be restored to a given length later (the prefix cache stores these).
struct KvSnapshot {
  int64_t length = 0;
  Tensor keys, values;              // [n, H, D], [n, H, Dv] for the retained positions
  std::vector<int32_t> positions;   // absolute positions of those n rows
  size_t bytes() const { return keys.nbytes() + values.nbytes() + positions.size() * 4; }
};

class KvCache {
 public:
  KvCache(int64_t heads, int64_t head_dim, int64_t value_dim, Device device);
  virtual ~KvCache() = default;

  // Appends entries for positions length() .. length()+T-1. k [T, H, D], v [T, H, Dv] (F32). `positions` (I32 [T]
  // on the cache's device, holding length() ..) says where they go; the device reads it, so a recorded graph's
  // replays write where their own positions say.
  void append(const Tensor& k, const Tensor& v, const Tensor& positions);
  void append(const Tensor& k, const Tensor& v);  // uploads the positions itself
  // Appends T entries that `write` puts straight into the slots (an op given these KvSlots and the positions, such
  // as ops::rms_norm_rope_many making the keys and values): what append does, without the entries in between.
  void append_with(int64_t T, const std::function<void(const KvSlots&)>& write);
  // The slots attention reads (some may be empty: position -1). Views, valid until the next append. On the CPU
  // these are the slots used so far; on an accelerator, every slot, so that their extent stays fixed while the
  // sequence grows (a recorded graph keeps its shapes).
  Tensor keys() const { return keys_.slice(0, 0, extent()); }
  Tensor values() const { return values_.slice(0, 0, extent()); }
  Tensor positions() const { return slot_pos_.slice(0, 0, extent()); }  // I32 [slots], on the device
  int64_t length() const { return length_; }

  // For graph replays: whether `extra` more positions fit without reallocating (which moves the buffers), making
  // room when not; and the host-side bookkeeping of an append whose device work a graph replay does.
  virtual bool has_room(int64_t extra) const = 0;
  void reserve(int64_t extra) { reserve_for(extra); }
  void note_append(int64_t T);
  // Changes whenever the buffers move (a reallocation); larger than every earlier value of any cache.
  uint64_t generation() const { return generation_; }

  // True when rewinding to n (<= length()) leaves every entry that positions < n need.
  virtual bool can_rewind_to(int64_t n) const = 0;
  // Drops every entry at position >= n. Throws when can_rewind_to(n) is false.
  void rewind(int64_t n);
  // The entries a cache rewound to length() would need, copied out.
  virtual KvSnapshot snapshot() const = 0;
  // Replaces the whole content with a snapshot.
  void restore(const KvSnapshot& s);
  void clear() { rewind_all(); }
  size_t bytes() const { return keys_.nbytes() + values_.nbytes(); }
  virtual int64_t window() const { return 0; }

 protected:
  virtual int64_t slot_of(int64_t pos) const = 0;
  // Makes room for `extra` more positions (may reallocate).
  virtual void reserve_for(int64_t extra) = 0;
  virtual int64_t used_slots() const = 0;
  virtual bool ring() const = 0;
  int64_t extent() const { return full_extent_ ? capacity_ : used_slots(); }
  void reallocate(int64_t capacity);  // keeps entries, re-slotting them by slot_of under the new capacity
  void rewind_all();

  int64_t heads_, head_dim_, value_dim_;
  Device device_;
  Tensor keys_, values_;             // [capacity, H, D]
  Tensor slot_pos_;                  // I32 [capacity] on the device: position per slot, -1 when empty
  std::vector<int32_t> pos_;         // the same on the host
  bool full_extent_;
  uint64_t generation_ = 0;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
};

// Full attention: keeps every position, growing geometrically.
class FullKvCache final : public KvCache {
 public:
  FullKvCache(int64_t heads, int64_t head_dim, int64_t value_dim, Device device, int64_t initial_capacity = 256);
  bool can_rewind_to(int64_t n) const override { return n >= 0 && n <= length_; }
  KvSnapshot snapshot() const override;
  bool has_room(int64_t extra) const override { return length_ + extra <= capacity_; }

 protected:
  int64_t slot_of(int64_t pos) const override { return pos; }
  bool ring() const override { return false; }
  void reserve_for(int64_t extra) override;
  int64_t used_slots() const override { return length_; }
};

// Sliding window of W: a ring of at least W + T slots for a forward of T tokens, so that the queries of a chunk
// still see their window and a rewind after a multi-token forward (speculative verification) finds every entry
// it needs even when the forward wrapped the ring.
class SlidingKvCache final : public KvCache {
 public:
  SlidingKvCache(int64_t heads, int64_t head_dim, int64_t value_dim, int64_t window, Device device,
                 int64_t spare = 16);
  bool can_rewind_to(int64_t n) const override;
  KvSnapshot snapshot() const override;
  int64_t window() const override { return window_; }
  bool has_room(int64_t extra) const override { return capacity_ >= window_ + extra; }

 protected:
  int64_t slot_of(int64_t pos) const override { return pos % capacity_; }
  bool ring() const override { return true; }
  void reserve_for(int64_t extra) override;
  int64_t used_slots() const override { return std::min(capacity_, length_); }

 private:
  int64_t window_;
  int64_t spare_;
};

}  // namespace vatic
