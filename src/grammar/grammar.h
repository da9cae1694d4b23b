#pragma once
// Grammars over bytes: rules made of regular expressions that may call other rules (a recursive transition
// network), compiled into one deterministic automaton per rule. A pushdown matcher runs them (see matcher.h).
#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vatic::grammar {

using ByteSet = std::bitset<256>;

struct Expr {
  enum Kind { Empty, Bytes, Seq, Alt, Repeat, Ref, Nothing };
  Kind kind = Empty;
  ByteSet set;             // Bytes
  std::vector<Expr> kids;  // Seq, Alt; Repeat: kids[0]
  int min = 0, max = 0;    // Repeat: max < 0 = unbounded
  int rule = -1;           // Ref

  static Expr empty() { return {}; }
  static Expr nothing();  // matches no input at all
  static Expr bytes(const ByteSet& s);
  static Expr byte(unsigned char c);
  static Expr range(unsigned char lo, unsigned char hi);
  static Expr lit(std::string_view s);
  static Expr seq(std::vector<Expr> kids);
  static Expr alt(std::vector<Expr> kids);
  static Expr repeat(Expr e, int min, int max);
  static Expr opt(Expr e) { return repeat(std::move(e), 0, 1); }
  static Expr star(Expr e) { return repeat(std::move(e), 0, -1); }
  static Expr plus(Expr e) { return repeat(std::move(e), 1, -1); }
  static Expr ref(int rule);
};

class Grammar {
 public:
  // Declares a rule (its body can be defined later, so rules may refer to each other).
  int declare(std::string name);
  void define(int rule, Expr body);
  int add(std::string name, Expr body) {
    int r = declare(std::move(name));
    define(r, std::move(body));
    return r;
  }
  int size() const { return static_cast<int>(bodies_.size()); }
  const Expr& body(int rule) const { return bodies_[rule]; }
  const std::string& name(int rule) const { return names_[rule]; }
  int root = 0;

 private:
  std::vector<std::string> names_;
  std::vector<Expr> bodies_;
};

// One DFA per rule, all states ("nodes") numbered globally. A node moves on a byte to another node of the
// same rule, or calls a rule and continues at `ret` once that rule completes; a final node may complete its
// rule.
struct Automaton {
  struct Call {
    int32_t rule;
    int32_t ret;
  };
  std::vector<int32_t> next;  // [nodes * 256], -1 = no move
  std::vector<std::vector<Call>> calls;
  std::vector<uint8_t> final, has_bytes;
  std::vector<int32_t> node_rule;
  std::vector<int32_t> rule_start;
  int32_t root = 0;

  int32_t nodes() const { return static_cast<int32_t>(final.size()); }
  int32_t step(int32_t node, unsigned char b) const { return next[static_cast<size_t>(node) * 256 + b]; }
};

// Throws InvalidInput when the grammar grows beyond `max_nodes` nodes.
Automaton compile(const Grammar& g, int32_t max_nodes = 50000);

}  // namespace vatic::grammar
