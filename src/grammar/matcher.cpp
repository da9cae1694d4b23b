#include "grammar/matcher.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace vatic::grammar {

// Interned stacks: frame = (node, parent frame); parent -1 is the bottom (the root, or the node a walk
// started from when classifying tokens).
class Pda {
 public:
  explicit Pda(const Automaton& a) : a_(a) {}

  int32_t intern(int32_t node, int32_t parent) {
    const uint64_t key =
        (static_cast<uint64_t>(static_cast<uint32_t>(node)) << 32) | static_cast<uint32_t>(parent);
    auto [it, fresh] = index_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
    if (fresh) {
      nodes_.push_back(node);
      parents_.push_back(parent);
    }
    return it->second;
  }
  int32_t node(int32_t f) const { return nodes_[f]; }

  // Adds the stacks reachable from frame f without reading a byte; `ended` when one empties (pops the
  // bottom).
  void closure(int32_t f, std::vector<int32_t>& out, bool& ended, int depth = 0) {
    if (depth > 1000) throw InvalidInput("the schema recurses without producing any output (a $ref cycle)");
    const int32_t n = nodes_[f], parent = parents_[f];
    if (a_.has_bytes[n]) out.push_back(f);
    for (const auto& c : a_.calls[n]) {
      int32_t ret = intern(c.ret, parent);
      closure(intern(a_.rule_start[c.rule], ret), out, ended, depth + 1);
    }
    if (a_.final[n]) {
      if (parent < 0)
        ended = true;
      else
        closure(parent, out, ended, depth + 1);
    }
  }

  // Stacks [begin, end) of `v` read byte b; the results are appended to v (sorted, unique).
  void step(std::vector<int32_t>& v, size_t begin, size_t end, unsigned char b, bool& ended) {
    const size_t start = v.size();
    for (size_t i = begin; i < end; i++) {
      const int32_t f = v[i], n = nodes_[f];
      const int32_t t = a_.step(n, b);
      if (t < 0) continue;
      const int32_t g = t == n ? f : intern(t, parents_[f]);
      if (a_.has_bytes[t] && a_.calls[t].empty() && !a_.final[t]) {
        v.push_back(g);
      } else {
        closure(g, v, ended);
      }
    }
    if (v.size() - start > 1) {
      std::sort(v.begin() + start, v.end());
      v.erase(std::unique(v.begin() + start, v.end()), v.end());
    }
  }

 private:
  const Automaton& a_;
  std::vector<int32_t> nodes_, parents_;
  std::unordered_map<uint64_t, int32_t> index_;
};

namespace {

enum class Verdict { Accept, Uncertain, Reject };

size_t common_prefix(const std::string& a, const std::string& b) {
  size_t n = std::min(a.size(), b.size()), k = 0;
  while (k < n && a[k] == b[k]) k++;
  return k;
}

// Walks tokens (in sorted-bytes order) from the stacks `init`, sharing the work of common prefixes.
template <typename Ids, typename F>
void walk(Pda& pda, const TokenVocab& vocab, const std::vector<int32_t>& init, bool init_ended,
          const Ids& ids, F&& on_token) {
  struct Level {
    uint32_t begin, end;
    bool ended, ended_before;
  };
  std::vector<int32_t> arena(init);
  std::vector<Level> levels = {{0, static_cast<uint32_t>(init.size()), init_ended, false}};
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& s = vocab.bytes(id);
    size_t d = prev ? std::min(common_prefix(*prev, s), levels.size() - 1) : 0;
    levels.resize(d + 1);
    arena.resize(levels[d].end);
    while (d < s.size()) {
      const Level l = levels[d];
      if (l.begin == l.end) break;
      bool ended = false;
      pda.step(arena, l.begin, l.end, static_cast<unsigned char>(s[d]), ended);
      levels.push_back({l.end, static_cast<uint32_t>(arena.size()), ended, l.ended_before || l.ended});
      d++;
    }
    const Level& l = levels[d];
    Verdict v = Verdict::Reject;
    if (d == s.size() && (l.begin != l.end || l.ended))
      v = Verdict::Accept;
    else if (l.ended_before || (d < s.size() && l.ended))
      v = Verdict::Uncertain;
    on_token(id, v);
    prev = &s;
  }
}

}  // namespace

CompiledGrammar::CompiledGrammar(Automaton automaton, std::shared_ptr<const TokenVocab> vocab)
    : a_(std::move(automaton)), vocab_(std::move(vocab)) {
  with_bytes_.assign((vocab_->size() + 63) / 64, 0);
  for (int32_t id : vocab_->sorted()) set_bit(with_bytes_.data(), id);
  masks_.resize(a_.nodes());
  ready_ = std::make_unique<std::atomic<uint8_t>[]>(a_.nodes());
  for (int32_t i = 0; i < a_.nodes(); i++) ready_[i].store(0);
  // Recursion that never reads a byte shows up here, at compile time, rather than in the middle of a request.
  Pda pda(a_);
  std::vector<int32_t> out;
  bool ended = false;
  for (int32_t r = 0; r < static_cast<int32_t>(a_.rule_start.size()); r++) {
    out.clear();
    pda.closure(pda.intern(a_.rule_start[r], -1), out, ended);
  }
}

CompiledGrammar::~CompiledGrammar() = default;

CompiledGrammar::NodeMask CompiledGrammar::build(int32_t node) const {
  // The walk of `walk()` specialised for the whole sorted vocabulary: whole first-byte ranges the node cannot
  // start are skipped, and so is every token extending a prefix on which all stacks died.
  struct Level {
    uint32_t begin, end;
    bool ended, ended_before;
  };
  NodeMask m;
  Pda pda(a_);
  const TokenVocab& v = *vocab_;
  const auto& sorted = v.sorted();
  const auto& lcp = v.lcp();
  TokenBitset acc(with_bytes_.size(), 0);
  size_t n_acc = 0;
  std::vector<int32_t> arena;
  std::vector<Level> levels;
  const int32_t start = pda.intern(node, -1);
  for (int b = 0; b < 256; b++) {
    size_t i = v.first_byte_begin(b);
    const size_t end = v.first_byte_begin(b + 1);
    if (i == end || a_.step(node, static_cast<unsigned char>(b)) < 0) continue;
    arena.assign(1, start);
    levels.assign(1, {0, 1, false, false});
    bool first = true;
    while (i < end) {
      const std::string& s = v.bytes(sorted[i]);
      size_t d = first ? 0 : std::min<size_t>(lcp[i], levels.size() - 1);
      first = false;
      levels.resize(d + 1);
      arena.resize(levels[d].end);
      while (d < s.size()) {
        const Level l = levels[d];
        if (l.begin == l.end) break;
        bool ended = false;
        pda.step(arena, l.begin, l.end, static_cast<unsigned char>(s[d]), ended);
        levels.push_back({l.end, static_cast<uint32_t>(arena.size()), ended, l.ended_before || l.ended});
        d++;
      }
      const Level l = levels[d];
      auto classify = [&](int32_t id, size_t len) {
        if (d == len && (l.begin != l.end || l.ended)) {
          set_bit(acc.data(), id);
          n_acc++;
        } else if (l.ended_before || (d < len && l.ended)) {
          m.uncertain.push_back(id);
        }
      };
      classify(sorted[i], s.size());
      i++;
      if (l.begin == l.end)  // every token that extends this dead prefix ends the same way
        for (; i < end && lcp[i] >= d; i++) classify(sorted[i], v.bytes(sorted[i]).size());
    }
  }
  const size_t n_tokens = sorted.size();
  m.inverted = n_acc > n_tokens - n_acc;
  for (size_t w = 0; w < acc.size(); w++) {
    uint64_t bits = m.inverted ? with_bytes_[w] & ~acc[w] : acc[w];
    while (bits) {
      m.ids.push_back(static_cast<int32_t>(w * 64 + __builtin_ctzll(bits)));
      bits &= bits - 1;
    }
  }
  m.ids.shrink_to_fit();
  return m;
}

const CompiledGrammar::NodeMask& CompiledGrammar::node_mask(int32_t node) const {
  if (!ready_[node].load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!ready_[node].load(std::memory_order_relaxed)) {
      masks_[node] = std::make_unique<NodeMask>(build(node));
      ready_[node].store(1, std::memory_order_release);
    }
  }
  return *masks_[node];
}

void CompiledGrammar::precompute_all() const {
  for (int32_t n = 0; n < a_.nodes(); n++)
    if (a_.has_bytes[n]) node_mask(n);
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::vector<int32_t> stop_ids)
    : g_(std::move(grammar)), stop_ids_(std::move(stop_ids)), pda_(std::make_unique<Pda>(g_->automaton())) {
  const Automaton& a = g_->automaton();
  State s;
  pda_->closure(pda_->intern(a.rule_start[a.root], -1), s.stacks, s.complete);
  std::sort(s.stacks.begin(), s.stacks.end());
  s.stacks.erase(std::unique(s.stacks.begin(), s.stacks.end()), s.stacks.end());
  history_.push_back(std::move(s));
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::remove_if(stop_ids_.begin(), stop_ids_.end(),
                                 [&](int32_t t) { return t < 0 || t >= g_->vocab_size(); }),
                  stop_ids_.end());
}

Matcher::~Matcher() = default;

bool Matcher::is_complete() const {
  return history_.back().complete || history_.back().terminated;
}

bool Matcher::advance(const State& from, int32_t token, State& to) {
  if (token < 0 || token >= g_->vocab_size()) return false;
  if (std::binary_search(stop_ids_.begin(), stop_ids_.end(), token)) {
    if (!from.complete && !from.terminated) return false;
    to.terminated = true;
    return true;
  }
  if (from.terminated) return false;
  const std::string& s = g_->vocab().bytes(token);
  if (s.empty()) return false;
  std::vector<int32_t> v = from.stacks;
  size_t begin = 0, end = v.size();
  bool ended = false;
  for (size_t i = 0; i < s.size(); i++) {
    ended = false;
    pda_->step(v, begin, end, static_cast<unsigned char>(s[i]), ended);
    begin = end;
    end = v.size();
    if (begin == end && (!ended || i + 1 < s.size()))
      return false;  // dead, or the root ended before the token
  }
  to.stacks.assign(v.begin() + begin, v.end());
  to.complete = ended;
  return true;
}

bool Matcher::accept(int32_t token) {
  State next;
  if (!advance(history_.back(), token, next)) return false;
  history_.push_back(std::move(next));
  return true;
}

bool Matcher::allows(int32_t token) {
  State next;
  return advance(history_.back(), token, next);
}

void Matcher::rollback(int n) {
  VATIC_CHECK(n >= 0 && static_cast<size_t>(n) < history_.size(),
              "grammar rollback of {} tokens past the start", n);
  history_.resize(history_.size() - n);
}

void Matcher::fill_mask(uint64_t* bits) {
  const int64_t words = mask_words();
  std::memset(bits, 0, static_cast<size_t>(words) * 8);
  const State& s = history_.back();
  if (s.terminated || s.complete)
    for (int32_t t : stop_ids_) set_bit(bits, t);
  if (s.terminated) return;
  std::vector<int32_t> nodes;
  for (int32_t f : s.stacks) nodes.push_back(pda_->node(f));
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  std::vector<const std::vector<int32_t>*> uncertain;
  for (int32_t n : nodes) {
    const CompiledGrammar::NodeMask& m = g_->node_mask(n);
    if (m.inverted) {
      const uint64_t* base = g_->with_bytes().data();
      scratch_.assign(base, base + words);
      for (int32_t id : m.ids) scratch_[id >> 6] &= ~(uint64_t(1) << (id & 63));
      for (int64_t w = 0; w < words; w++) bits[w] |= scratch_[w];
    } else {
      for (int32_t id : m.ids) set_bit(bits, id);
    }
    if (!m.uncertain.empty()) uncertain.push_back(&m.uncertain);
  }
  for (const auto* list : uncertain) {
    walk(*pda_, g_->vocab(), s.stacks, s.complete, *list, [&](int32_t id, Verdict v) {
      if (v == Verdict::Accept) set_bit(bits, id);
    });
  }
}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(const std::string& key) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  it->second.first = ++tick_;
  return it->second.second;
}

void GrammarCache::put(const std::string& key, std::shared_ptr<const CompiledGrammar> g) {
  std::lock_guard<std::mutex> lk(mu_);
  map_[key] = {++tick_, std::move(g)};
  while (map_.size() > capacity_) {
    auto oldest = map_.begin();
    for (auto it = map_.begin(); it != map_.end(); ++it)
      if (it->second.first < oldest->second.first) oldest = it;
    map_.erase(oldest);
  }
}

}  // namespace vatic::grammar
