#include "cache/prefix_cache.h"

#include <utility>
#include <vector>

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

// The trie is as deep as the longest stored sequence (tens of thousands of tokens), so these walks use explicit
// stacks rather than recursion.
void PrefixCache::evict_until_fits(size_t incoming) {
  while (used_ + incoming > budget_ && entries_ > 0) {
    Node* oldest = nullptr;
    std::vector<Node*> stack = {&root_};
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      if (n->snapshot && (!oldest || n->last_used < oldest->last_used)) oldest = n;
      for (auto& [_, c] : n->children) stack.push_back(c.get());
    }
    if (!oldest) break;
    used_ -= oldest->bytes;
    entries_--;
    oldest->snapshot.reset();
    oldest->bytes = 0;
  }
  prune(root_);
}

bool PrefixCache::prune(Node& root) {
  // Post-order: children are visited before their parent, so an emptied branch disappears in one pass.
  std::vector<std::pair<Node*, bool>> stack = {{&root, false}};
  while (!stack.empty()) {
    auto [n, expanded] = stack.back();
    stack.pop_back();
    if (!expanded) {
      stack.push_back({n, true});
      for (auto& [_, c] : n->children) stack.push_back({c.get(), false});
      continue;
    }
    for (auto it = n->children.begin(); it != n->children.end();) {
      Node& c = *it->second;
      if (c.children.empty() && !c.snapshot)
        it = n->children.erase(it);
      else
        ++it;
    }
  }
  return root.children.empty() && !root.snapshot;
}

void PrefixCache::clear() {
  // Free node by node: destroying a deep chain of unique_ptrs would recurse once per token.
  std::vector<std::unique_ptr<Node>> pending;
  for (auto& [_, c] : root_.children) pending.push_back(std::move(c));
  root_.children.clear();
  while (!pending.empty()) {
    std::unique_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    for (auto& [_, c] : n->children) pending.push_back(std::move(c));
    n->children.clear();
  }
  root_.snapshot.reset();
  used_ = 0;
  entries_ = 0;
}

}  // namespace vatic
