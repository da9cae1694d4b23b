#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tokenizer/fast_json.h"
#include "tokenizer/impl.h"
#include "tokenizer/unicode.h"
#include "util/error.h"
#include "util/files.h"

namespace vatic {

namespace tok {

// ---------------------------------------------------------------- added tokens

void AddedTokenMatcher::add(const std::string& pattern, int32_t token_index) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (unsigned char b : pattern) {
    int32_t c = child(node, b);
    if (c < 0) {
      c = nodes_++;
      value_.push_back(-1);
      edges_.emplace(static_cast<uint64_t>(node) << 8 | b, c);
    }
    node = c;
  }
  value_[static_cast<std::size_t>(node)] = token_index;  // a later duplicate wins
  first_[static_cast<unsigned char>(pattern[0])] = true;
}

void AddedTokenMatcher::find_all(std::string_view s, std::vector<Match>& out) const {
  out.clear();
  if (empty()) return;
  for (std::size_t pos = 0; pos < s.size();) {
    if (!first_[static_cast<unsigned char>(s[pos])]) {
      ++pos;
      continue;
    }
    int32_t node = 0, best = -1;
    std::size_t best_end = 0;
    for (std::size_t i = pos; i < s.size(); ++i) {
      node = child(node, static_cast<unsigned char>(s[i]));
      if (node < 0) break;
      if (value_[static_cast<std::size_t>(node)] >= 0) {
        best = value_[static_cast<std::size_t>(node)];
        best_end = i + 1;
      }
    }
    if (best >= 0) {
      out.push_back(Match{pos, best_end, best});
      pos = best_end;
    } else {
      ++pos;
    }
  }
}

namespace {

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  std::size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  std::size_t j = i;
  return unicode::is_word_char(unicode::next_cp(s, j));
}
bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  std::size_t i = 0;
  return unicode::is_word_char(unicode::next_cp(s, i));
}
// Start of the run of whitespace that ends s.
std::size_t trailing_space_start(std::string_view s) {
  std::size_t end = s.size();
  while (end > 0) {
    std::size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    std::size_t j = i;
    if (!unicode::is_whitespace(unicode::next_cp(s, j))) break;
    end = i;
  }
  return end;
}
// Length of the run of whitespace that starts s.
std::size_t leading_space_len(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    if (!unicode::is_whitespace(unicode::next_cp(s, j))) break;
    i = j;
  }
  return i;
}

}  // namespace

// Splits s into (text, -1) and (token text, added token id) parts, as AddedVocabulary::find_matches does.
void Impl::split_added(std::string_view s, const AddedTokenMatcher& m,
                       std::vector<std::pair<std::string_view, int32_t>>& out) const {
  out.clear();
  thread_local std::vector<AddedTokenMatcher::Match> matches;
  m.find_all(s, matches);
  std::size_t start_offset = 0;
  for (const auto& mt : matches) {
    std::size_t start = mt.begin, stop = mt.end;
    const AddedToken& t = added[static_cast<std::size_t>(mt.token_index)];
    if (t.single_word) {
      bool start_space = start == 0 || !ends_with_word(s.substr(0, start));
      bool stop_space = stop == s.size() || !starts_with_word(s.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) start = std::max(trailing_space_start(s.substr(0, start)), start_offset);
    if (t.rstrip) stop += leading_space_len(s.substr(stop));
    if (start_offset < start) out.emplace_back(s.substr(start_offset, start - start_offset), -1);
    out.emplace_back(s.substr(start, stop - start), t.id);
    start_offset = stop;
  }
  if (start_offset < s.size()) out.emplace_back(s.substr(start_offset), -1);
}

void Impl::encode_piece(std::string text, bool at_start, std::vector<int32_t>& out) const {
  if (normalizer) normalizer->normalize(text);
  std::vector<std::pair<std::string_view, int32_t>> parts;
  split_added(text, normalized_matcher, parts);
  std::vector<Piece> pieces;
  for (auto [part, id] : parts) {
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    if (part.empty()) continue;
    pieces.clear();
    pieces.push_back(Piece{std::string(part), at_start && part.data() == text.data()});
    if (pre_tokenizer) pre_tokenizer->pre_tokenize(pieces);
    for (const Piece& p : pieces) model->tokenize(p.text, out);
  }
}

void Impl::encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const {
  out.clear();
  std::string sanitized;
  if (!unicode::is_valid(text)) {
    sanitized = unicode::lossy(text);
    text = sanitized;
  }
  std::vector<std::pair<std::string_view, int32_t>> parts;
  split_added(text, raw_matcher, parts);
  for (auto [part, id] : parts) {
    if (id >= 0)
      out.push_back(id);
    else if (!part.empty())
      encode_piece(std::string(part), part.data() == text.data(), out);
  }
  if (add_special_tokens && post_processor) post_processor->process(out);
}

std::optional<int32_t> Impl::token_to_id(std::string_view s) const {
  if (auto it = added_by_content.find(s); it != added_by_content.end()) return it->second;
  return model->token_to_id(s);
}

std::optional<std::string_view> Impl::id_to_token(int32_t id) const {
  if (const AddedToken* t = added_token(id)) return std::string_view(t->content);
  return model->id_to_token(id);
}

std::string Impl::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const AddedToken* t = added_token(id);
    if (t) {
      if (skip_special && t->special) continue;
      tokens.push_back(t->content);
    } else if (auto s = model->id_to_token(id)) {
      tokens.emplace_back(*s);
    }
  }
  if (!decoder) {
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  decoder->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

// ---------------------------------------------------------------- loading

namespace {

const std::vector<std::string>& known_top_level_keys() {
  static const std::vector<std::string> keys = {"version",       "truncation",     "padding", "added_tokens",
                                                "normalizer",    "pre_tokenizer",  "model",   "post_processor",
                                                "decoder"};
  return keys;
}

std::unique_ptr<Impl> build(const json& root, const VocabList* fast_vocab, const MergeList* fast_merges) {
  if (!root.is_object()) fail("tokenizer.json must hold a JSON object");
  for (auto it = root.begin(); it != root.end(); ++it)
    if (std::find(known_top_level_keys().begin(), known_top_level_keys().end(), it.key()) ==
        known_top_level_keys().end())
      fail("unsupported field \"{}\" in tokenizer.json", it.key());
  auto impl = std::make_unique<Impl>();
  auto model = root.find("model");
  if (model == root.end() || !model->is_object()) fail("tokenizer.json has no \"model\" object");
  std::string type = model->value("type", model->contains("merges") ? "BPE" : "");
  if (type != "BPE") fail("unsupported model type \"{}\" in tokenizer.json (only BPE is supported)", type);
  if (fast_vocab && fast_merges) {
    impl->model = std::make_unique<Bpe>(*model, *fast_vocab, *fast_merges);
  } else {
    impl->model = std::make_unique<Bpe>(*model, Bpe::vocab_from_json(*model), Bpe::merges_from_json(*model));
  }
  impl->vocab_size = impl->model->size();

  if (auto at = root.find("added_tokens"); at != root.end() && !at->is_null()) {
    if (!at->is_array()) fail("\"added_tokens\" in tokenizer.json must be an array");
    for (const auto& a : *at) {
      AddedToken t;
      try {
        t.id = a.at("id").get<int32_t>();
        t.content = a.at("content").get<std::string>();
        t.special = a.value("special", false);
        t.lstrip = a.value("lstrip", false);
        t.rstrip = a.value("rstrip", false);
        t.single_word = a.value("single_word", false);
        t.normalized = a.value("normalized", !t.special);
      } catch (const json::exception& e) {
        fail("invalid added token {} in tokenizer.json: {}", a.dump(), e.what());
      }
      if (t.id < 0) fail("added token \"{}\" has a negative id", t.content);
      if (t.id >= impl->model->size() * 2 + 65536 + static_cast<int32_t>(at->size()))
        fail("added token \"{}\" has id {}, far beyond the vocabulary of {} (ids must be dense)", t.content, t.id,
             impl->model->size());
      if (auto it = impl->added_by_id.find(t.id); it != impl->added_by_id.end()) {
        impl->added[it->second] = t;
      } else {
        impl->added_by_id.emplace(t.id, impl->added.size());
        impl->added.push_back(t);
      }
      impl->vocab_size = std::max(impl->vocab_size, t.id + 1);
    }
  }
  auto member = [&](const char* key) -> const json& {
    static const json null_json;
    auto it = root.find(key);
    return it == root.end() ? null_json : *it;
  };
  impl->normalizer = make_normalizer(member("normalizer"));
  impl->pre_tokenizer = make_pre_tokenizer(member("pre_tokenizer"));
  const Impl* self = impl.get();
  TokenLookup lookup = [self](std::string_view s) { return self->token_to_id(s); };
  impl->post_processor = make_post_processor(member("post_processor"), lookup);
  impl->decoder = make_decoder(member("decoder"));

  for (std::size_t i = 0; i < impl->added.size(); ++i) {
    const AddedToken& t = impl->added[i];
    impl->added_by_content.insert_or_assign(t.content, t.id);
    if (t.normalized) {
      std::string norm = t.content;
      if (impl->normalizer) impl->normalizer->normalize(norm);
      impl->normalized_matcher.add(norm, static_cast<int32_t>(i));
    } else {
      impl->raw_matcher.add(t.content, static_cast<int32_t>(i));
    }
  }

  impl->bos = post_processor_bos(member("post_processor"), lookup);
  for (const char* name : {"<eos>", "</s>", "<|endoftext|>", "<|end_of_text|>"}) {
    if (auto id = impl->token_to_id(name)) {
      impl->eos.push_back(*id);
      break;
    }
  }
  for (const char* name : {"<pad>", "<|pad|>", "[PAD]"}) {
    if (auto id = impl->token_to_id(name)) {
      impl->pad = *id;
      break;
    }
  }
  return impl;
}

std::string read_whole_file(const std::filesystem::path& p) {
  std::FILE* f = std::fopen(p.c_str(), "rb");
  if (!f) fail("cannot open {}: {}", p.string(), std::strerror(errno));
  std::string out;
  std::fseek(f, 0, SEEK_END);
  long n = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  if (n > 0) {
    out.resize(static_cast<std::size_t>(n));
    std::size_t got = std::fread(out.data(), 1, out.size(), f);
    out.resize(got);
  }
  bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) fail("cannot read {}", p.string());
  return out;
}

json parse_json(std::string_view text, std::string_view origin) {
  if (json_depth(text) > kMaxJsonDepth) fail("invalid JSON in {}: nested deeper than {} levels", origin, kMaxJsonDepth);
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    fail("invalid JSON in {}: {}", origin, json_error_text(e));
  }
}

// Reads an id (or list of ids) from a config value; a string names a token.
std::vector<int32_t> config_ids(const json& v, const Impl& impl) {
  std::vector<int32_t> out;
  if (v.is_number_integer()) {
    out.push_back(v.get<int32_t>());
  } else if (v.is_array()) {
    for (const auto& x : v)
      if (x.is_number_integer()) out.push_back(x.get<int32_t>());
  } else if (v.is_string()) {
    if (auto id = impl.token_to_id(v.get<std::string>())) out.push_back(*id);
  } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    if (auto id = impl.token_to_id(v["content"].get<std::string>())) out.push_back(*id);
  }
  return out;
}

std::optional<json> read_optional_json(const std::filesystem::path& p) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) return std::nullopt;
  return parse_json(read_file(p), p.string());
}

// Fills bos/eos/pad from the configs next to a tokenizer.json (first one that names it wins).
void read_model_configs(const std::filesystem::path& dir, Impl& impl) {
  std::vector<json> configs;
  for (const char* name : {"generation_config.json", "config.json", "tokenizer_config.json"})
    if (auto j = read_optional_json(dir / name)) configs.push_back(std::move(*j));
  auto pick = [&](std::initializer_list<const char*> keys) -> std::vector<int32_t> {
    for (const json& c : configs) {
      for (const json* scope : {&c, c.contains("text_config") ? &c["text_config"] : nullptr}) {
        if (!scope || !scope->is_object()) continue;
        for (const char* k : keys)
          if (auto it = scope->find(k); it != scope->end()) {
            auto ids = config_ids(*it, impl);
            if (!ids.empty()) return ids;
          }
      }
    }
    return {};
  };
  if (auto ids = pick({"bos_token_id", "bos_token"}); !ids.empty()) impl.bos = ids[0];
  if (auto ids = pick({"eos_token_id", "eos_token"}); !ids.empty()) impl.eos = ids;
  if (auto ids = pick({"pad_token_id", "pad_token"}); !ids.empty()) impl.pad = ids[0];
}

}  // namespace

}  // namespace tok

Tokenizer::Tokenizer(std::unique_ptr<tok::Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(std::string_view json_text, std::string_view origin) {
  // Fast path: read model.vocab and model.merges with a dedicated reader and the rest with nlohmann::json.
  // Anything unexpected falls back to parsing the whole document (which also gives the precise error).
  namespace fj = tok::fastjson;
  if (json_depth(json_text) > kMaxJsonDepth)
    fail("invalid JSON in {}: nested deeper than {} levels", origin, kMaxJsonDepth);
  if (auto top = fj::object_members(json_text)) {
    try {
      json root = json::object();
      std::optional<tok::VocabList> vocab;
      std::optional<tok::MergeList> merges = tok::MergeList{};
      bool ok = true;
      for (const auto& [key, span] : *top) {
        if (key != "model") {
          root[key] = json::parse(span);
          continue;
        }
        auto members = fj::object_members(span);
        if (!members) {
          ok = false;
          break;
        }
        json model = json::object();
        for (const auto& [mkey, mspan] : *members) {
          if (mkey == "vocab" && (vocab = fj::parse_vocab(mspan))) continue;
          if (mkey == "merges" && (mspan == "null" || (merges = fj::parse_merges(mspan)))) continue;
          if (mkey == "vocab" || mkey == "merges") ok = false;
          model[mkey] = json::parse(mspan);
        }
        root["model"] = std::move(model);
      }
      if (ok && vocab && merges) return Tokenizer(tok::build(root, &*vocab, &*merges));
    } catch (const json::exception&) {
      // fall through to the full parser
    }
  }
  json root = tok::parse_json(json_text, origin);
  return Tokenizer(tok::build(root, nullptr, nullptr));
}

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path file = path;
  bool dir = std::filesystem::is_directory(path, ec);
  if (dir) file = path / "tokenizer.json";
  if (!std::filesystem::is_regular_file(file, ec)) {
    if (dir) fail("no tokenizer.json in model directory {}", path.string());
    fail("tokenizer file {} not found", path.string());
  }
  Tokenizer t = from_json(tok::read_whole_file(file), file.string());
  if (dir) tok::read_model_configs(path, *t.impl_);
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  impl_->encode(text, add_special_tokens, out);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const { return impl_->token_to_id(token); }

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (auto s = impl_->id_to_token(id)) return std::string(*s);
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  const tok::AddedToken* t = impl_->added_token(id);
  return t && t->special;
}
bool Tokenizer::is_added(int32_t id) const { return impl_->added_token(id) != nullptr; }
int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const {
  if (impl_->eos.empty()) return std::nullopt;
  return impl_->eos.front();
}
const std::vector<int32_t>& Tokenizer::eos_ids() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::pad_id() const { return impl_->pad; }
std::optional<int32_t> Tokenizer::unk_id() const { return impl_->model->unk_id(); }

// ---------------------------------------------------------------- streaming

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_(skip_special_tokens) {}

void StreamingDecoder::reset() {
  ids_.clear();
  prefix_.clear();
  prefix_index_ = 0;
}

namespace {
bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}
}  // namespace

std::string StreamingDecoder::push(int32_t id) {
  ids_.push_back(id);
  std::string text = tokenizer_->decode(ids_, skip_special_);
  if (text.size() <= prefix_.size() || ends_with_replacement(text)) return {};
  if (text.compare(0, prefix_.size(), prefix_) != 0) {
    // The context token decodes differently now (rare); emit from the first difference on a char boundary.
    std::size_t common = 0;
    while (common < prefix_.size() && text[common] == prefix_[common]) ++common;
    while (common > 0 && (static_cast<unsigned char>(text[common]) & 0xC0) == 0x80) --common;
    prefix_.resize(common);
  }
  std::string fresh = text.substr(prefix_.size());
  // Keep the newest token(s) as context so decoders that look at neighbours (e.g. Metaspace) stay consistent.
  std::size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  prefix_ = tokenizer_->decode(ids_, skip_special_);
  prefix_index_ = new_prefix_index;
  return fresh;
}

std::string StreamingDecoder::flush() {
  std::string text = tokenizer_->decode(ids_, skip_special_);
  std::string rest;
  if (text.size() > prefix_.size() && text.compare(0, prefix_.size(), prefix_) == 0) rest = text.substr(prefix_.size());
  reset();
  return rest;
}

}  // namespace vatic
