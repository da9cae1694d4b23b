#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace vatic::tok {

namespace {

constexpr uint64_t kEmpty = ~uint64_t{0};

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
inline uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

std::string opt_string(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_string()) fail("BPE model field \"{}\" must be a string in tokenizer.json", key);
  return it->get<std::string>();
}
bool opt_bool(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return false;
  if (!it->is_boolean()) fail("BPE model field \"{}\" must be a boolean in tokenizer.json", key);
  return it->get<bool>();
}

// Per-thread scratch for merging one word.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t len;  // bytes; 0 = merged away
};
struct Merge {
  uint32_t rank;
  uint32_t pos;
  int32_t new_id;
};
struct MergeLater {  // heap comparator: smallest rank, then smallest position, on top
  bool operator()(const Merge& a, const Merge& b) const { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; }
};
thread_local std::vector<Symbol> t_symbols;
thread_local std::vector<Merge> t_heap;

}  // namespace

VocabList Bpe::vocab_from_json(const json& model) {
  auto vit = model.find("vocab");
  if (vit == model.end() || !vit->is_object()) fail("BPE model without a \"vocab\" object in tokenizer.json");
  VocabList out;
  out.reserve(vit->size());
  for (auto it = vit->begin(); it != vit->end(); ++it) {
    if (!it.value().is_number_integer()) fail("vocab entry \"{}\" has a non-integer id in tokenizer.json", it.key());
    out.emplace_back(it.key(), it.value().get<int64_t>());
  }
  return out;
}

MergeList Bpe::merges_from_json(const json& model) {
  MergeList out;
  auto mit = model.find("merges");
  if (mit == model.end() || mit->is_null()) return out;
  if (!mit->is_array()) fail("BPE \"merges\" must be an array in tokenizer.json");
  out.reserve(mit->size());
  for (const auto& m : *mit) {
    if (m.is_string()) {
      const auto& s = m.get_ref<const std::string&>();
      auto sp = s.find(' ');
      if (sp == std::string::npos) fail("invalid merge \"{}\" in tokenizer.json (expected \"a b\")", s);
      out.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail("invalid merge {} in tokenizer.json", m.dump());
    }
  }
  return out;
}

Bpe::Bpe(const json& model, const VocabList& vocab, const MergeList& merges) {
  if (auto d = model.find("dropout"); d != model.end() && !d->is_null() && d->get<double>() != 0.0)
    fail("unsupported BPE dropout {} in tokenizer.json", d->get<double>());
  continuing_prefix_ = opt_string(model, "continuing_subword_prefix");
  end_suffix_ = opt_string(model, "end_of_word_suffix");
  simple_chars_ = continuing_prefix_.empty() && end_suffix_.empty();
  fuse_unk_ = opt_bool(model, "fuse_unk");
  byte_fallback_ = opt_bool(model, "byte_fallback");
  ignore_merges_ = opt_bool(model, "ignore_merges");

  int64_t max_id = -1;
  std::size_t bytes = 0;
  for (const auto& [tok, id] : vocab) {
    if (id < 0 || id > INT32_MAX) fail("vocab entry \"{}\" has an out-of-range id {}", tok, id);
    max_id = std::max(max_id, id);
    bytes += tok.size();
  }
  // Ids index a table, so a lone huge id would allocate gigabytes: real vocabularies are dense.
  if (max_id >= static_cast<int64_t>(vocab.size()) * 2 + 65536)
    fail("vocab id {} is far beyond the {} vocab entries (ids must be dense)", max_id, vocab.size());
  tokens_.assign(static_cast<std::size_t>(max_id + 1), {0, kMissing});
  arena_.reserve(bytes);
  std::size_t cap = 16;
  while (cap < vocab.size() * 2) cap <<= 1;
  table_.assign(cap, -1);
  table_mask_ = cap - 1;
  for (const auto& [tok, id64] : vocab) {
    auto id = static_cast<int32_t>(id64);
    auto& slot = tokens_[static_cast<std::size_t>(id)];
    if (slot.second != kMissing) fail("vocab id {} is used twice in tokenizer.json", id);
    slot = {static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(tok.size())};
    arena_ += tok;
    uint64_t h = std::hash<std::string_view>{}(tok);
    for (uint64_t i = h & table_mask_;; i = (i + 1) & table_mask_) {
      int32_t& t = table_[i];
      if (t < 0) {
        t = id;
        break;
      }
      if (token_at(t) == std::string_view(tok)) {  // repeated token: the last id wins, like a hash map
        t = id;
        break;
      }
    }
  }

  std::string unk = opt_string(model, "unk_token");
  if (!unk.empty()) {
    if (auto id = token_to_id(unk)) unk_id_ = *id;
    // As in Hugging Face tokenizers, a missing unk token only matters when it is needed.
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto id = token_to_id(name);
    byte_ids_[b] = id ? *id : -1;
  }
  if (simple_chars_) {
    bmp_ids_.assign(0x10000, -1);
    for (int32_t id = 0; id < size(); ++id) {
      if (tokens_[static_cast<std::size_t>(id)].second == kMissing) continue;
      std::string_view tok = token_at(id);
      if (find_token(tok, std::hash<std::string_view>{}(tok)) != id) continue;
      if (tok.empty() || unicode::seq_len(static_cast<unsigned char>(tok[0])) != tok.size()) continue;
      std::size_t i = 0;
      char32_t cp = unicode::next_cp(tok, i);
      if (cp < 0x10000)
        bmp_ids_[cp] = id;
      else
        astral_ids_[cp] = id;
    }
  }

  if (merges.empty()) return;
  std::size_t mcap = 1;
  while (mcap < merges.size() * 2 + 16) mcap <<= 1;
  merges_.assign(mcap, MergeEntry{kEmpty, 0, 0});
  merge_mask_ = mcap - 1;
  std::string buf;
  uint32_t rank = 0;
  for (const auto& [a, b] : merges) {
    auto ia = token_to_id(a);
    if (!ia) fail("merge token \"{}\" is not in the vocabulary", a);
    auto ib = token_to_id(b);
    if (!ib) fail("merge token \"{}\" is not in the vocabulary", b);
    std::string_view bsuffix = b;
    if (!continuing_prefix_.empty() && bsuffix.size() >= continuing_prefix_.size())
      bsuffix.remove_prefix(continuing_prefix_.size());
    buf.assign(a);
    buf.append(bsuffix);
    auto inew = token_to_id(buf);
    if (!inew) fail("merged token \"{}\" is not in the vocabulary", buf);
    add_merge(*ia, *ib, rank++, *inew);
  }
}

void Bpe::add_merge(int32_t a, int32_t b, uint32_t rank, int32_t new_id) {
  uint64_t key = pair_key(a, b);
  for (uint64_t h = mix(key) & merge_mask_;; h = (h + 1) & merge_mask_) {
    MergeEntry& e = merges_[h];
    if (e.key == kEmpty || e.key == key) {  // a repeated pair keeps its last rank, like a hash map insert
      e = MergeEntry{key, rank, new_id};
      return;
    }
  }
}

const Bpe::MergeEntry* Bpe::find_merge(int32_t a, int32_t b) const {
  if (merges_.empty()) return nullptr;
  uint64_t key = pair_key(a, b);
  for (uint64_t h = mix(key) & merge_mask_;; h = (h + 1) & merge_mask_) {
    const MergeEntry& e = merges_[h];
    if (e.key == key) return &e;
    if (e.key == kEmpty) return nullptr;
  }
}

int32_t Bpe::find_token(std::string_view s, uint64_t h) const {
  for (uint64_t i = h & table_mask_;; i = (i + 1) & table_mask_) {
    int32_t t = table_[i];
    if (t < 0) return -1;
    if (token_at(t) == s) return t;
  }
}

std::optional<int32_t> Bpe::token_to_id(std::string_view token) const {
  if (table_.empty()) return std::nullopt;
  int32_t id = find_token(token, std::hash<std::string_view>{}(token));
  if (id < 0) return std::nullopt;
  return id;
}

std::optional<std::string_view> Bpe::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size() || tokens_[static_cast<std::size_t>(id)].second == kMissing)
    return std::nullopt;
  return token_at(id);
}

void Bpe::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  bool cacheable = word.size() < kCacheMaxWord;
  if (cacheable) {
    std::lock_guard lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::size_t start = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::lock_guard lock(cache_mu_);
    if (cache_.size() >= kCacheMaxEntries) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(start), out.end()));
  }
}

void Bpe::merge_word(std::string_view w, std::vector<int32_t>& out) const {
  auto& syms = t_symbols;
  syms.clear();
  auto add = [&](int32_t id, std::size_t len) {
    int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back(Symbol{id, n - 1, n + 1, static_cast<uint32_t>(len)});
  };
  int32_t unk_id = -1;  // pending unk token (id, byte length); -1 = none
  std::size_t unk_len = 0;
  std::string buf;
  for (std::size_t i = 0; i < w.size();) {
    std::size_t begin = i;
    char32_t cp = unicode::next_cp(w, i);
    std::size_t byte_len = i - begin;
    bool first = begin == 0, last = i == w.size();
    std::string_view s = w.substr(begin, byte_len);
    int32_t id = -1;
    if (simple_chars_) {
      if (cp < 0x10000) {
        id = bmp_ids_[cp];
      } else if (auto it = astral_ids_.find(cp); it != astral_ids_.end()) {
        id = it->second;
      }
    } else {
      buf.clear();
      if (!first) buf += continuing_prefix_;
      buf += s;
      if (last) buf += end_suffix_;
      s = buf;
      if (auto f = token_to_id(buf)) id = *f;
    }
    if (id >= 0) {
      if (unk_id >= 0) {
        add(unk_id, unk_len);
        unk_id = -1;
      }
      add(id, byte_len);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : s) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : s) add(byte_ids_[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (unk_id_) {
      if (unk_id >= 0 && fuse_unk_) {
        unk_len += byte_len;
      } else {
        if (unk_id >= 0) add(unk_id, unk_len);
        unk_id = *unk_id_;
        unk_len = byte_len;
      }
    }
  }
  if (unk_id >= 0) add(unk_id, unk_len);
  if (syms.empty()) return;
  syms.back().next = -1;

  auto& heap = t_heap;
  heap.clear();
  for (std::size_t k = 0; k + 1 < syms.size(); ++k) {
    if (const MergeEntry* m = find_merge(syms[k].id, syms[k + 1].id))
      heap.push_back(Merge{m->rank, static_cast<uint32_t>(k), m->new_id});
  }
  std::make_heap(heap.begin(), heap.end(), MergeLater{});
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), MergeLater{});
    Merge top = heap.back();
    heap.pop_back();
    Symbol& cur = syms[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    auto right_pos = static_cast<std::size_t>(cur.next);
    Symbol right = syms[right_pos];
    const MergeEntry* check = find_merge(cur.id, right.id);
    if (!check || check->new_id != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    syms[right_pos].len = 0;
    if (right.next >= 0) syms[static_cast<std::size_t>(right.next)].prev = static_cast<int32_t>(top.pos);
    if (cur.prev >= 0) {
      const Symbol& p = syms[static_cast<std::size_t>(cur.prev)];
      if (const MergeEntry* m = find_merge(p.id, cur.id)) {
        heap.push_back(Merge{m->rank, static_cast<uint32_t>(cur.prev), m->new_id});
        std::push_heap(heap.begin(), heap.end(), MergeLater{});
      }
    }
    if (cur.next >= 0) {
      const Symbol& n = syms[static_cast<std::size_t>(cur.next)];
      if (const MergeEntry* m = find_merge(cur.id, n.id)) {
        heap.push_back(Merge{m->rank, top.pos, m->new_id});
        std::push_heap(heap.begin(), heap.end(), MergeLater{});
      }
    }
  }
  for (const Symbol& s : syms)
    if (s.len) out.push_back(s.id);
}

}  // namespace vatic::tok
