#pragma once
// Reuse of KV state across requests: a trie over token ids whose nodes hold sequence snapshots. A request takes
// the deepest snapshot on its prompt's path, restores it and evaluates only the rest. Snapshots are evicted least
// recently used first to stay under a memory budget.
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace vatic {

class PrefixCache {
 public:
  explicit PrefixCache(size_t budget_bytes) : budget_(budget_bytes) {}
  ~PrefixCache() { clear(); }
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  struct Match {
    std::shared_ptr<const void> snapshot;  // null when nothing matched
    int64_t length = 0;                    // tokens the snapshot covers (a prefix of the query)
  };
  // The deepest stored snapshot whose tokens are a prefix of `tokens` (marked as used).
  Match lookup(const std::vector<int32_t>& tokens);
  // Stores a snapshot of the state after `tokens`; evicts older entries to fit. Entries over the budget are dropped.
  void insert(const std::vector<int32_t>& tokens, std::shared_ptr<const void> snapshot, size_t bytes);
  void clear();

  size_t bytes() const { return used_; }
  size_t budget() const { return budget_; }
  size_t entries() const { return entries_; }

 private:
  struct Node {
    std::map<int32_t, std::unique_ptr<Node>> children;
    std::shared_ptr<const void> snapshot;
    size_t bytes = 0;
    uint64_t last_used = 0;
  };
  void evict_until_fits(size_t incoming);
  static bool prune(Node& n);  // removes empty branches; true when n itself is empty

  Node root_;
  size_t budget_;
  size_t used_ = 0;
  size_t entries_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace vatic
