#include "cache/prefix_cache.h"

#include <functional>

namespace vatic {

PrefixCache::Match PrefixCache::lookup(const std::vector<int32_t>& tokens) {
  Match m;
  Node* n = &root_;
  Node* best = nullptr;
  for (size_t i = 0; i < tokens.size(); i++) {
    auto it = n->children.find(tokens[i]);
    if (it == n->children.end()) break;
    n = it->second.get();
    if (n->snapshot) {
      best = n;
      m.length = static_cast<int64_t>(i + 1);
    }
  }
  if (best) {
    best->last_used = ++clock_;
    m.snapshot = best->snapshot;
  } else {
    m.length = 0;
  }
  return m;
}

void PrefixCache::insert(const std::vector<int32_t>& tokens, std::shared_ptr<const void> snapshot, size_t bytes) {
  if (tokens.empty() || !snapshot || bytes > budget_) return;
  // Replace an existing entry for the same tokens, then make room (pruning may drop empty branches, so the path
  // to the new entry is built afterwards).
  Node* existing = &root_;
  for (int32_t t : tokens) {
    auto it = existing->children.find(t);
    if (it == existing->children.end()) {
      existing = nullptr;
      break;
    }
    existing = it->second.get();
  }
  if (existing && existing->snapshot) {
    used_ -= existing->bytes;
    entries_--;
    existing->snapshot.reset();
    existing->bytes = 0;
  }
  evict_until_fits(bytes);
  Node* n = &root_;
  for (int32_t t : tokens) {
    auto& child = n->children[t];
    if (!child) child = std::make_unique<Node>();
    n = child.get();
  }
  n->snapshot = std::move(snapshot);
  n->bytes = bytes;
  n->last_used = ++clock_;
  used_ += bytes;
  entries_++;
}

void PrefixCache::evict_until_fits(size_t incoming) {
  while (used_ + incoming > budget_ && entries_ > 0) {
    Node* oldest = nullptr;
    std::function<void(Node&)> walk = [&](Node& n) {
      if (n.snapshot && (!oldest || n.last_used < oldest->last_used)) oldest = &n;
      for (auto& [_, c] : n.children) walk(*c);
    };
    walk(root_);
    if (!oldest) break;
    used_ -= oldest->bytes;
    entries_--;
    oldest->snapshot.reset();
    oldest->bytes = 0;
  }
  prune(root_);
}

bool PrefixCache::prune(Node& n) {
  for (auto it = n.children.begin(); it != n.children.end();) {
    if (prune(*it->second))
      it = n.children.erase(it);
    else
      ++it;
  }
  return n.children.empty() && !n.snapshot;
}

void PrefixCache::clear() {
  root_.children.clear();
  root_.snapshot.reset();
  used_ = 0;
  entries_ = 0;
}

}  // namespace vatic
