#pragma once
// A sequence state made of per-layer KV caches (null for layers that own no cache, e.g. KV-shared layers).
#include <memory>
#include <vector>

#include "cache/kv_cache.h"
#include "models/model.h"

namespace vatic {

class KvState : public SequenceState {
 public:
  std::vector<std::unique_ptr<KvCache>> caches;

  int64_t length() const override;
  bool can_rewind_to(int64_t n) const override;
  void rewind(int64_t n) override;
  size_t bytes() const override;
  std::shared_ptr<const void> snapshot() const override;
  size_t snapshot_bytes(const std::shared_ptr<const void>& s) const override;
  void restore(const std::shared_ptr<const void>& s) override;
  KvCache& cache(int layer) const { return *caches.at(static_cast<size_t>(layer)); }

  // For graph replays (see engine/graph_runner.h): room for T more tokens in every cache without moving a buffer
  // (making it when missing), the host-side bookkeeping of a replayed forward over T tokens, and a value that
  // changes whenever any cache's buffers move.
  void reserve(int64_t T);
  void note_append(int64_t T);
  uint64_t layout() const;
};

}  // namespace vatic
