#include "models/kv_state.h"

namespace vatic {

namespace {
using Snapshots = std::vector<KvSnapshot>;
}

int64_t KvState::length() const {
  for (auto& c : caches)
    if (c) return c->length();
  return 0;
}

bool KvState::can_rewind_to(int64_t n) const {
  for (auto& c : caches)
    if (c && !c->can_rewind_to(n)) return false;
  return true;
}

void KvState::rewind(int64_t n) {
  VATIC_CHECK(can_rewind_to(n), "cannot rewind the sequence from {} to {} tokens", length(), n);
  for (auto& c : caches)
    if (c) c->rewind(n);
}

size_t KvState::bytes() const {
  size_t b = 0;
  for (auto& c : caches)
    if (c) b += c->bytes();
  return b;
}

std::shared_ptr<const void> KvState::snapshot() const {
  auto s = std::make_shared<Snapshots>();
  for (auto& c : caches) s->push_back(c ? c->snapshot() : KvSnapshot{});
  return s;
}

size_t KvState::snapshot_bytes(const std::shared_ptr<const void>& p) const {
  size_t b = 0;
  for (auto& s : *static_cast<const Snapshots*>(p.get())) b += s.bytes();
  return b;
}

void KvState::reserve(int64_t T) {
  for (auto& c : caches)
    if (c && !c->has_room(T)) c->reserve(T);
}

void KvState::note_append(int64_t T) {
  for (auto& c : caches)
    if (c) c->note_append(T);
}

uint64_t KvState::layout() const {
  uint64_t g = 0;
  for (auto& c : caches)
    if (c) g += c->generation();
  return g;
}

void KvState::restore(const std::shared_ptr<const void>& p) {
  auto& snaps = *static_cast<const Snapshots*>(p.get());
  VATIC_CHECK(snaps.size() == caches.size(), "snapshot of {} layers for a model of {}", snaps.size(), caches.size());
  for (size_t i = 0; i < caches.size(); i++)
    if (caches[i]) caches[i]->restore(snaps[i]);
}

}  // namespace vatic
