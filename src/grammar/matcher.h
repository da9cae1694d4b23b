#pragma once
// Constrained decoding: a compiled grammar over a model's vocabulary, and a matcher that follows one
// generation.
//
// The matcher is a pushdown automaton over bytes. Its state is a set of stacks (frames interned in a pool, so
// equal stacks are equal ids). The token mask of a state is the union over its stacks of what each stack's
// top node allows; what a node allows is mostly independent of the frames under it, so it is computed once
// per node (lazily, then shared by every request using the grammar): tokens accepted whatever lies below,
// tokens rejected whatever lies below, and the few "uncertain" tokens that finish the node's rule and go on
// into the caller. Only those are checked against the real stacks at each step, in sorted order so common
// prefixes are walked once.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/vocab.h"

namespace vatic::grammar {

// Bits over the vocabulary, 64 tokens a word.
using TokenBitset = std::vector<uint64_t>;
inline bool test_bit(const uint64_t* bits, int64_t i) {
  return (bits[i >> 6] >> (i & 63)) & 1;
}
inline void set_bit(uint64_t* bits, int64_t i) {
  bits[i >> 6] |= uint64_t(1) << (i & 63);
}

class Pda;

class CompiledGrammar {
 public:
  CompiledGrammar(Automaton automaton, std::shared_ptr<const TokenVocab> vocab);
  ~CompiledGrammar();

  const Automaton& automaton() const { return a_; }
  const TokenVocab& vocab() const { return *vocab_; }
  int64_t vocab_size() const { return vocab_->size(); }
  // Computes every node's token classes now (otherwise each is computed on first use).
  void precompute_all() const;

  struct NodeMask {
    bool inverted = false;           // ids lists the tokens with bytes that are NOT accepted
    std::vector<int32_t> ids;        // accepted (or, inverted, not accepted) token ids
    std::vector<int32_t> uncertain;  // token ids in sorted-bytes order, to check against the real stacks
  };
  const NodeMask& node_mask(int32_t node) const;
  const TokenBitset& with_bytes() const { return with_bytes_; }

 private:
  NodeMask build(int32_t node) const;
  Automaton a_;
  std::shared_ptr<const TokenVocab> vocab_;
  TokenBitset with_bytes_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<NodeMask>> masks_;
  mutable std::unique_ptr<std::atomic<uint8_t>[]> ready_;
};

class Matcher {
 public:
  // `stop_ids`: tokens that end generation; the grammar allows them once its root is complete.
  Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::vector<int32_t> stop_ids);
  ~Matcher();
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  // Advances by one token; false (and no change) when the grammar does not allow it.
  bool accept(int32_t token);
  // Whether `token` would be accepted (the state does not change).
  bool allows(int32_t token);
  // Undoes the last `n` accepted tokens.
  void rollback(int n);
  // The tokens allowed next, as ceil(V / 64) words. At least one bit is set while the matcher is usable.
  void fill_mask(uint64_t* bits);
  int64_t mask_words() const { return (g_->vocab_size() + 63) / 64; }
  // The root rule is complete here (a stop token may follow).
  bool is_complete() const;
  // A stop token was accepted.
  bool is_terminated() const { return history_.back().terminated; }
  size_t accepted_tokens() const { return history_.size() - 1; }
  const CompiledGrammar& grammar() const { return *g_; }

 private:
  struct State {
    std::vector<int32_t> stacks;
    bool complete = false;
    bool terminated = false;
  };
  bool advance(const State& from, int32_t token, State& to);

  std::shared_ptr<const CompiledGrammar> g_;
  std::vector<int32_t> stop_ids_;
  std::unique_ptr<Pda> pda_;
  std::vector<State> history_;
  std::vector<uint64_t> scratch_;
};

// Compiled grammars by key (the schema's text), least recently used evicted. Thread-safe.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 32) : capacity_(capacity) {}
  std::shared_ptr<const CompiledGrammar> get(const std::string& key);
  void put(const std::string& key, std::shared_ptr<const CompiledGrammar> g);

 private:
  size_t capacity_;
  std::mutex mu_;
  uint64_t tick_ = 0;
  std::unordered_map<std::string, std::pair<uint64_t, std::shared_ptr<const CompiledGrammar>>> map_;
};

}  // namespace vatic::grammar
