#include "grammar/grammar.h"

#include <algorithm>
#include <map>

#include "util/error.h"

namespace vatic::grammar {

Expr Expr::nothing() {
  Expr e;
  e.kind = Nothing;
  return e;
}

Expr Expr::bytes(const ByteSet& s) {
  Expr e;
  e.kind = s.none() ? Nothing : Bytes;
  e.set = s;
  return e;
}

Expr Expr::byte(unsigned char c) {
  ByteSet s;
  s.set(c);
  return bytes(s);
}

Expr Expr::range(unsigned char lo, unsigned char hi) {
  ByteSet s;
  for (int c = lo; c <= hi; c++) s.set(c);
  return bytes(s);
}

Expr Expr::lit(std::string_view s) {
  std::vector<Expr> k;
  for (unsigned char c : s) k.push_back(byte(c));
  return seq(std::move(k));
}

Expr Expr::seq(std::vector<Expr> kids) {
  std::vector<Expr> flat;
  for (auto& k : kids) {
    if (k.kind == Nothing) return nothing();
    if (k.kind == Empty) continue;
    if (k.kind == Seq)
      for (auto& kk : k.kids) flat.push_back(std::move(kk));
    else
      flat.push_back(std::move(k));
  }
  if (flat.empty()) return empty();
  if (flat.size() == 1) return std::move(flat[0]);
  Expr e;
  e.kind = Seq;
  e.kids = std::move(flat);
  return e;
}

Expr Expr::alt(std::vector<Expr> kids) {
  std::vector<Expr> flat;
  for (auto& k : kids) {
    if (k.kind == Nothing) continue;
    if (k.kind == Alt)
      for (auto& kk : k.kids) flat.push_back(std::move(kk));
    else
      flat.push_back(std::move(k));
  }
  if (flat.empty()) return nothing();
  if (flat.size() == 1) return std::move(flat[0]);
  Expr e;
  e.kind = Alt;
  e.kids = std::move(flat);
  return e;
}

Expr Expr::repeat(Expr x, int min, int max) {
  if (max >= 0 && max < min) return nothing();
  if (max == 0) return empty();
  if (x.kind == Nothing) return min == 0 ? empty() : nothing();
  if (x.kind == Empty) return empty();
  if (min == 1 && max == 1) return x;
  Expr e;
  e.kind = Repeat;
  e.kids.push_back(std::move(x));
  e.min = min;
  e.max = max;
  return e;
}

Expr Expr::ref(int rule) {
  Expr e;
  e.kind = Ref;
  e.rule = rule;
  return e;
}

int Grammar::declare(std::string name) {
  names_.push_back(std::move(name));
  bodies_.push_back(Expr::nothing());
  return static_cast<int>(bodies_.size()) - 1;
}

void Grammar::define(int rule, Expr body) {
  bodies_.at(rule) = std::move(body);
}

namespace {

// Thompson NFA of one rule.
struct Nfa {
  struct State {
    std::vector<int> eps;
    std::vector<std::pair<int, int>> byte_edges;  // (set index, target)
    std::vector<std::pair<int, int>> ref_edges;   // (rule, target)
  };
  std::vector<State> states;
  std::vector<ByteSet> sets;
  size_t limit;

  int add() {
    if (states.size() >= limit) throw InvalidInput("the schema is too large for vatic's grammar compiler");
    states.emplace_back();
    return static_cast<int>(states.size()) - 1;
  }
  void build(const Expr& e, int from, int to) {
    switch (e.kind) {
      case Expr::Nothing:
        return;
      case Expr::Empty:
        states[from].eps.push_back(to);
        return;
      case Expr::Bytes:
        sets.push_back(e.set);
        states[from].byte_edges.push_back({static_cast<int>(sets.size()) - 1, to});
        return;
      case Expr::Ref:
        states[from].ref_edges.push_back({e.rule, to});
        return;
      case Expr::Alt:
        for (const auto& k : e.kids) build(k, from, to);
        return;
      case Expr::Seq: {
        int cur = from;
        for (size_t i = 0; i < e.kids.size(); i++) {
          int nxt = i + 1 == e.kids.size() ? to : add();
          build(e.kids[i], cur, nxt);
          cur = nxt;
        }
        return;
      }
      case Expr::Repeat: {
        const Expr& k = e.kids[0];
        int cur = from;
        for (int i = 0; i < e.min; i++) {
          int nxt = add();
          build(k, cur, nxt);
          cur = nxt;
        }
        if (e.max < 0) {
          int loop = add();
          states[cur].eps.push_back(loop);
          build(k, loop, loop);
          states[loop].eps.push_back(to);
          return;
        }
        for (int i = e.min; i < e.max; i++) {
          states[cur].eps.push_back(to);
          int nxt = add();
          build(k, cur, nxt);
          cur = nxt;
        }
        states[cur].eps.push_back(to);
        return;
      }
    }
  }
  void closure(std::vector<int>& set) const {
    std::vector<char> seen(states.size(), 0);
    std::vector<int> work = set;
    for (int s : set) seen[s] = 1;
    while (!work.empty()) {
      int s = work.back();
      work.pop_back();
      for (int t : states[s].eps)
        if (!seen[t]) {
          seen[t] = 1;
          set.push_back(t);
          work.push_back(t);
        }
    }
    std::sort(set.begin(), set.end());
  }
};

}  // namespace

Automaton compile(const Grammar& g, int32_t max_nodes) {
  Automaton a;
  a.rule_start.resize(g.size());
  a.root = g.root;
  for (int r = 0; r < g.size(); r++) {
    Nfa nfa;
    nfa.limit = static_cast<size_t>(max_nodes) * 4;
    int s0 = nfa.add(), acc = nfa.add();
    nfa.build(g.body(r), s0, acc);
    std::map<std::vector<int>, int32_t> ids;
    std::vector<std::vector<int>> work;
    auto intern = [&](std::vector<int> set) -> int32_t {
      nfa.closure(set);
      auto it = ids.find(set);
      if (it != ids.end()) return it->second;
      if (a.nodes() >= max_nodes) throw InvalidInput("the schema is too large for vatic's grammar compiler");
      int32_t id = a.nodes();
      ids.emplace(set, id);
      a.next.resize(a.next.size() + 256, -1);
      a.calls.emplace_back();
      a.final.push_back(std::binary_search(set.begin(), set.end(), acc) ? 1 : 0);
      a.has_bytes.push_back(0);
      a.node_rule.push_back(r);
      work.push_back(std::move(set));
      return id;
    };
    a.rule_start[r] = intern({s0});
    for (size_t w = 0; w < work.size(); w++) {
      const std::vector<int> set = work[w];
      const int32_t id = a.rule_start[r] + static_cast<int32_t>(w);
      std::vector<std::pair<int, int>> edges;
      std::map<int, std::vector<int>> refs;
      for (int s : set) {
        for (auto e : nfa.states[s].byte_edges) edges.push_back(e);
        for (auto [rule, t] : nfa.states[s].ref_edges) refs[rule].push_back(t);
      }
      if (!edges.empty()) {
        std::map<std::vector<int>, std::vector<int>> by_target;  // target set -> bytes
        for (int b = 0; b < 256; b++) {
          std::vector<int> tgt;
          for (auto [si, t] : edges)
            if (nfa.sets[si].test(b)) tgt.push_back(t);
          if (tgt.empty()) continue;
          std::sort(tgt.begin(), tgt.end());
          tgt.erase(std::unique(tgt.begin(), tgt.end()), tgt.end());
          by_target[tgt].push_back(b);
        }
        for (auto& [tgt, bs] : by_target) {
          int32_t t = intern(tgt);
          for (int b : bs) a.next[static_cast<size_t>(id) * 256 + b] = t;
          a.has_bytes[id] = 1;
        }
      }
      for (auto& [rule, tgts] : refs) {
        const int32_t t = intern(tgts);  // may grow a.calls
        a.calls[id].push_back({rule, t});
      }
    }
  }
  return a;
}

}  // namespace vatic::grammar
