#include "tokenizer/pipeline.h"

#include <array>
#include <unordered_map>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace vatic::tok {

namespace {

const std::string& type_of(const json& j, const char* what) {
  if (!j.is_object()) fail("{} in tokenizer.json must be an object, got {}", what, j.dump());
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) fail("{} in tokenizer.json has no \"type\"", what);
  return it->get_ref<const std::string&>();
}

std::string get_string(const json& j, const char* key, const char* what) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) fail("{} in tokenizer.json needs a string \"{}\"", what, key);
  return it->get<std::string>();
}

template <typename T>
T get_or(const json& j, const char* key, T def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    fail("field \"{}\" in tokenizer.json has the wrong type: {}", key, it->dump());
  }
}

const json& get_array(const json& j, const char* key, const char* what) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) fail("{} in tokenizer.json needs an array \"{}\"", what, key);
  return *it;
}

// A {"String": s} or {"Regex": r} pattern.
class Pattern {
 public:
  Pattern(const json& j, const char* what) {
    if (j.is_object() && j.contains("String") && j["String"].is_string()) {
      literal_ = j["String"].get<std::string>();
    } else if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
      regex_ = std::make_unique<Regex>(j["Regex"].get<std::string>(), false);
    } else {
      fail("unsupported {} pattern {} in tokenizer.json", what, j.dump());
    }
  }
  // Non-overlapping matches, left to right.
  void find_all(std::string_view s, std::vector<std::pair<std::size_t, std::size_t>>& out) const {
    if (regex_) return regex_->find_all(s, out);
    out.clear();
    if (literal_.empty()) return;
    for (std::size_t p = s.find(literal_); p != std::string_view::npos; p = s.find(literal_, p + literal_.size()))
      out.emplace_back(p, p + literal_.size());
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

void replace_all(const Pattern& pattern, const std::string& content, std::string& s) {
  std::vector<std::pair<std::size_t, std::size_t>> m;
  pattern.find_all(s, m);
  if (m.empty()) return;
  std::string out;
  out.reserve(s.size());
  std::size_t prev = 0;
  for (auto [b, e] : m) {
    out.append(s, prev, b - prev);
    out += content;
    prev = e;
  }
  out.append(s, prev, std::string::npos);
  s = std::move(out);
}

// ---------------------------------------------------------------- normalizers

class ReplaceNormalizer : public Normalizer {
 public:
  explicit ReplaceNormalizer(const json& j)
      : pattern_(j.at("pattern"), "Replace"), content_(get_string(j, "content", "Replace")) {}
  void normalize(std::string& s) const override { replace_all(pattern_, content_, s); }

 private:
  Pattern pattern_;
  std::string content_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::Form f) : form_(f) {}
  void normalize(std::string& s) const override { s = unicode::normalize(s, form_); }

 private:
  unicode::Form form_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(const json& j) : prepend_(get_string(j, "prepend", "Prepend")) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(const json& j) {
    for (const auto& n : get_array(j, "normalizers", "Sequence normalizer"))
      if (auto p = make_normalizer(n)) parts_.push_back(std::move(p));
  }
  void normalize(std::string& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

// ---------------------------------------------------------------- pre-tokenizers

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const json& j) {
  std::string b = get_string(j, "behavior", "Split pre_tokenizer");
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  fail("unsupported Split behavior \"{}\" in tokenizer.json", b);
}

struct Seg {
  std::size_t b, e;
  bool m;
};

// Splits every piece at the given matches, with Hugging Face's SplitDelimiterBehavior semantics.
template <typename FindFn>
void split_pieces(std::vector<Piece>& pieces, Behavior behavior, bool invert, FindFn&& find) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  std::vector<Seg> segs, res;
  for (Piece& piece : pieces) {
    const std::string& s = piece.text;
    segs.clear();
    if (s.empty()) {
      segs.push_back({0, 0, false});
    } else {
      find(s, matches);
      std::size_t prev = 0;
      for (auto [b, e] : matches) {
        if (prev != b) segs.push_back({prev, b, false});
        segs.push_back({b, e, true});
        prev = e;
      }
      if (prev != s.size()) segs.push_back({prev, s.size(), false});
    }
    if (invert)
      for (Seg& g : segs) g.m = !g.m;
    res.clear();
    switch (behavior) {
      case Behavior::Removed:
        for (const Seg& g : segs)
          if (!g.m) res.push_back(g);
        break;
      case Behavior::Isolated:
        res = segs;
        break;
      case Behavior::MergedWithPrevious: {
        bool prev_match = false;
        for (const Seg& g : segs) {
          if (g.m && !prev_match && !res.empty())
            res.back().e = g.e;
          else
            res.push_back({g.b, g.e, false});
          prev_match = g.m;
        }
        break;
      }
      case Behavior::MergedWithNext: {
        bool prev_match = false;
        for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
          if (it->m && !prev_match && !res.empty())
            res.back().b = it->b;
          else
            res.push_back({it->b, it->e, false});
          prev_match = it->m;
        }
        std::reverse(res.begin(), res.end());
        break;
      }
      case Behavior::Contiguous: {
        bool prev_match = false;
        for (const Seg& g : segs) {
          if (g.m == prev_match && !res.empty())
            res.back().e = g.e;
          else
            res.push_back({g.b, g.e, false});
          prev_match = g.m;
        }
        break;
      }
    }
    if (res.size() == 1 && res[0].b == 0 && res[0].e == s.size()) {
      if (!s.empty()) out.push_back(std::move(piece));
      continue;
    }
    for (const Seg& g : res)
      if (g.e > g.b) out.push_back(Piece{s.substr(g.b, g.e - g.b), piece.at_start && g.b == 0});
  }
  pieces = std::move(out);
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  explicit SplitPreTokenizer(const json& j)
      : pattern_(j.at("pattern"), "Split"), behavior_(parse_behavior(j)), invert_(get_or<bool>(j, "invert", false)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, behavior_, invert_,
                 [&](std::string_view s, std::vector<std::pair<std::size_t, std::size_t>>& m) { pattern_.find_all(s, m); });
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

struct ByteLevelTables {
  std::array<std::string, 256> to_char;
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteLevelTables() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp = keep ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      unicode::append_utf8(to_char[static_cast<std::size_t>(b)], cp);
      to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};
const ByteLevelTables& byte_level() {
  static const ByteLevelTables t;
  return t;
}

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  explicit ByteLevelPreTokenizer(const json& j)
      : add_prefix_space_(get_or<bool>(j, "add_prefix_space", true)), use_regex_(get_or<bool>(j, "use_regex", true)) {
    if (use_regex_) regex_ = std::make_unique<Regex>(kGpt2Pattern, false);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_)
      for (Piece& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(p.text.begin(), ' ');  // not insert(0, " "): GCC 12 -O3 -Wrestrict false positive
    if (use_regex_)
      split_pieces(pieces, Behavior::Isolated, false,
                   [&](std::string_view s, std::vector<std::pair<std::size_t, std::size_t>>& m) { regex_->find_all(s, m); });
    const auto& t = byte_level();
    for (Piece& p : pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (char c : p.text) mapped += t.to_char[static_cast<unsigned char>(c)];
      p.text = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { First, Never, Always };

struct MetaspaceConfig {
  std::string replacement;
  PrependScheme scheme = PrependScheme::Always;
  bool split = true;
  explicit MetaspaceConfig(const json& j) {
    replacement = get_string(j, "replacement", "Metaspace");
    std::size_t i = 0;
    if (replacement.empty() || (unicode::next_cp(replacement, i), i != replacement.size()))
      fail("Metaspace replacement must be one character in tokenizer.json");
    std::string scheme_name = get_or<std::string>(j, "prepend_scheme", "always");
    if (scheme_name == "always")
      scheme = PrependScheme::Always;
    else if (scheme_name == "never")
      scheme = PrependScheme::Never;
    else if (scheme_name == "first")
      scheme = PrependScheme::First;
    else
      fail("unsupported Metaspace prepend_scheme \"{}\" in tokenizer.json", scheme_name);
    if (auto it = j.find("add_prefix_space"); it != j.end() && it->is_boolean() && !it->get<bool>())
      scheme = PrependScheme::Never;
    split = get_or<bool>(j, "split", true);
  }
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  explicit MetaspacePreTokenizer(const json& j) : cfg_(j) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    const std::string& rep = cfg_.replacement;
    for (Piece& p : pieces) {
      std::string& s = p.text;
      if (s.find(' ') != std::string::npos) {
        std::string out;
        out.reserve(s.size() * 2);
        for (char c : s) {
          if (c == ' ')
            out += rep;
          else
            out += c;
        }
        s = std::move(out);
      }
      bool starts = s.compare(0, rep.size(), rep) == 0;
      if (!starts && (cfg_.scheme == PrependScheme::Always || (cfg_.scheme == PrependScheme::First && p.at_start)))
        s.insert(0, rep);
    }
    if (cfg_.split)
      split_pieces(pieces, Behavior::MergedWithNext, false,
                   [&](std::string_view s, std::vector<std::pair<std::size_t, std::size_t>>& m) {
                     m.clear();
                     for (std::size_t q = s.find(rep); q != std::string_view::npos; q = s.find(rep, q + rep.size()))
                       m.emplace_back(q, q + rep.size());
                   });
  }

 private:
  MetaspaceConfig cfg_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(const json& j) {
    for (const auto& n : get_array(j, "pretokenizers", "Sequence pre_tokenizer"))
      if (auto p = make_pre_tokenizer(n)) parts_.push_back(std::move(p));
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

// ---------------------------------------------------------------- post-processors

class TemplatePostProcessor : public PostProcessor {
 public:
  // items: a special token's ids, or an empty vector standing for the sequence ($A).
  explicit TemplatePostProcessor(std::vector<std::vector<int32_t>> items) : items_(std::move(items)) {}
  void process(std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + items_.size());
    for (const auto& item : items_) {
      if (item.empty())
        out.insert(out.end(), ids.begin(), ids.end());
      else
        out.insert(out.end(), item.begin(), item.end());
    }
    ids = std::move(out);
  }
  const std::vector<std::vector<int32_t>>& items() const { return items_; }

 private:
  std::vector<std::vector<int32_t>> items_;
};

class NoopPostProcessor : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
};

class SequencePostProcessor : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& p : parts_) p->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

std::vector<std::vector<int32_t>> template_items(const json& j) {
  auto single = j.find("single");
  if (single == j.end()) fail("TemplateProcessing in tokenizer.json has no \"single\" template");
  const json& specials = j.contains("special_tokens") ? j["special_tokens"] : json::object();
  auto special_ids = [&](const std::string& name) {
    auto it = specials.find(name);
    if (it == specials.end() || !it->contains("ids"))
      fail("TemplateProcessing special token \"{}\" is not declared in special_tokens", name);
    auto ids = (*it)["ids"].get<std::vector<int32_t>>();
    if (ids.empty()) fail("TemplateProcessing special token \"{}\" has no ids", name);
    return ids;
  };
  std::vector<std::vector<int32_t>> items;
  auto add_piece = [&](std::string name) {  // string form: "$A", "$A:1", "<s>", "<s>:1"
    if (auto colon = name.rfind(':'); colon != std::string::npos && colon > 0 && colon + 1 < name.size() &&
                                      name.find_first_not_of("0123456789", colon + 1) == std::string::npos)
      name.resize(colon);
    if (name == "$" || name == "$A" || name == "$0")
      items.emplace_back();
    else if (name.size() > 1 && name[0] == '$')
      fail("TemplateProcessing sequence \"{}\" in the single template is not supported", name);
    else
      items.push_back(special_ids(name));
  };
  if (single->is_string()) {
    std::string s = single->get<std::string>();
    std::size_t p = 0;
    while (p < s.size()) {
      std::size_t q = s.find(' ', p);
      if (q == std::string::npos) q = s.size();
      if (q > p) add_piece(s.substr(p, q - p));
      p = q + 1;
    }
  } else if (single->is_array()) {
    for (const auto& item : *single) {
      if (item.contains("SpecialToken")) {
        items.push_back(special_ids(item["SpecialToken"].at("id").get<std::string>()));
      } else if (item.contains("Sequence")) {
        std::string id = item["Sequence"].at("id").get<std::string>();
        if (id != "A") fail("TemplateProcessing sequence \"{}\" in the single template is not supported", id);
        items.emplace_back();
      } else {
        fail("unsupported TemplateProcessing item {} in tokenizer.json", item.dump());
      }
    }
  } else {
    fail("TemplateProcessing \"single\" must be a list or a string in tokenizer.json");
  }
  return items;
}

int32_t pair_token_id(const json& j, const char* key, const TokenLookup& lookup) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() != 2) fail("post_processor needs \"{}\": [token, id]", key);
  return (*it)[1].get<int32_t>();
}

// ---------------------------------------------------------------- decoders

class ReplaceDecoder : public Decoder {
 public:
  explicit ReplaceDecoder(const json& j)
      : pattern_(j.at("pattern"), "Replace"), content_(get_string(j, "content", "Replace")) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) replace_all(pattern_, content_, t);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string bytes;
    std::size_t nbytes = 0;
    auto flush = [&] {
      if (!nbytes) return;
      if (unicode::is_valid(bytes)) {
        out.push_back(bytes);
      } else {
        for (std::size_t k = 0; k < nbytes; ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      nbytes = 0;
    };
    for (auto& t : tokens) {
      int b = parse_byte_token(t);
      if (b >= 0) {
        bytes.push_back(static_cast<char>(b));
        ++nbytes;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  explicit StripDecoder(const json& j)
      : start_(get_or<std::size_t>(j, "start", 0)), stop_(get_or<std::size_t>(j, "stop", 0)) {
    std::string c = get_string(j, "content", "Strip decoder");
    std::size_t i = 0;
    if (c.empty()) fail("Strip decoder content must be one character in tokenizer.json");
    content_ = unicode::next_cp(c, i);
    if (i != c.size()) fail("Strip decoder content must be one character in tokenizer.json");
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<char32_t> cps;
    for (auto& t : tokens) {
      cps.clear();
      for (std::size_t i = 0; i < t.size();) cps.push_back(unicode::next_cp(t, i));
      std::size_t start_cut = 0;
      for (std::size_t i = 0; i < start_ && i < cps.size(); ++i) {
        if (cps[i] != content_) break;
        start_cut = i + 1;
      }
      std::size_t stop_cut = cps.size();
      for (std::size_t i = 0; i < stop_ && i < cps.size(); ++i) {
        std::size_t index = cps.size() - i - 1;
        if (cps[index] != content_) break;
        stop_cut = index;
      }
      std::string out;
      for (std::size_t i = start_cut; i < stop_cut; ++i) unicode::append_utf8(out, cps[i]);
      t = std::move(out);
    }
  }

 private:
  std::size_t start_, stop_;
  char32_t content_;
};

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    const auto& t = byte_level();
    std::string bytes;
    std::string tmp;
    for (const auto& tok : tokens) {
      tmp.clear();
      bool ok = true;
      for (std::size_t i = 0; i < tok.size();) {
        auto it = t.to_byte.find(unicode::next_cp(tok, i));
        if (it == t.to_byte.end()) {
          ok = false;
          break;
        }
        tmp.push_back(static_cast<char>(it->second));
      }
      bytes += ok ? tmp : tok;
    }
    tokens.assign(1, unicode::lossy(bytes));
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  explicit MetaspaceDecoder(const json& j) : cfg_(j) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    const std::string& rep = cfg_.replacement;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (t.find(rep) == std::string::npos) continue;
      std::string out;
      for (std::size_t p = 0; p < t.size();) {
        if (t.compare(p, rep.size(), rep) == 0) {
          if (!(i == 0 && cfg_.scheme != PrependScheme::Never)) out += ' ';
          p += rep.size();
        } else {
          out += t[p++];
        }
      }
      t = std::move(out);
    }
  }

 private:
  MetaspaceConfig cfg_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(const json& j) {
    for (const auto& n : get_array(j, "decoders", "Sequence decoder"))
      if (auto p = make_decoder(n)) parts_.push_back(std::move(p));
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j) {
  if (j.is_null()) return nullptr;
  const std::string& type = type_of(j, "normalizer");
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(j);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(unicode::Form::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(unicode::Form::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(unicode::Form::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(unicode::Form::NFKD);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(j);
  if (type == "Sequence") return std::make_unique<SequenceNormalizer>(j);
  fail("unsupported normalizer type \"{}\" in tokenizer.json", type);
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j) {
  if (j.is_null()) return nullptr;
  const std::string& type = type_of(j, "pre_tokenizer");
  if (type == "Split") return std::make_unique<SplitPreTokenizer>(j);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(j);
  if (type == "Metaspace") return std::make_unique<MetaspacePreTokenizer>(j);
  if (type == "Sequence") return std::make_unique<SequencePreTokenizer>(j);
  fail("unsupported pre_tokenizer type \"{}\" in tokenizer.json", type);
}

std::unique_ptr<PostProcessor> make_post_processor(const json& j, const TokenLookup& lookup) {
  if (j.is_null()) return nullptr;
  const std::string& type = type_of(j, "post_processor");
  if (type == "TemplateProcessing") return std::make_unique<TemplatePostProcessor>(template_items(j));
  if (type == "ByteLevel") return std::make_unique<NoopPostProcessor>();
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    return std::make_unique<TemplatePostProcessor>(std::vector<std::vector<int32_t>>{
        {pair_token_id(j, "cls", lookup)}, {}, {pair_token_id(j, "sep", lookup)}});
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (const auto& p : get_array(j, "processors", "Sequence post_processor"))
      if (auto pp = make_post_processor(p, lookup)) parts.push_back(std::move(pp));
    return std::make_unique<SequencePostProcessor>(std::move(parts));
  }
  fail("unsupported post_processor type \"{}\" in tokenizer.json", type);
}

std::optional<int32_t> post_processor_bos(const json& j, const TokenLookup& lookup) {
  if (!j.is_object()) return std::nullopt;
  std::string type = j.value("type", "");
  if (type == "TemplateProcessing") {
    auto items = template_items(j);
    if (!items.empty() && !items[0].empty()) return items[0][0];
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    return pair_token_id(j, "cls", lookup);
  } else if (type == "Sequence" && j.contains("processors")) {
    for (const auto& p : j["processors"])
      if (auto b = post_processor_bos(p, lookup)) return b;
  }
  return std::nullopt;
}

std::unique_ptr<Decoder> make_decoder(const json& j) {
  if (j.is_null()) return nullptr;
  const std::string& type = type_of(j, "decoder");
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(j);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") return std::make_unique<StripDecoder>(j);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(j);
  if (type == "Sequence") return std::make_unique<SequenceDecoder>(j);
  fail("unsupported decoder type \"{}\" in tokenizer.json", type);
}

}  // namespace vatic::tok
