#include "grammar/vocab.h"

#include <algorithm>
#include <map>
#include <optional>

#include "tokenizer/impl.h"
#include "tokenizer/tokenizer.h"

namespace vatic::grammar {

namespace {

int byte_token(std::string_view t) {
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

// GPT-2's byte <-> printable code point table (ByteLevel tokenizers).
const std::map<char32_t, unsigned char>& byte_level_inverse() {
  static const std::map<char32_t, unsigned char> m = [] {
    std::map<char32_t, unsigned char> r;
    int n = 0;
    for (int b = 0; b < 256; b++) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      r[printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++)] =
          static_cast<unsigned char>(b);
    }
    return r;
  }();
  return m;
}

bool decode_utf8(std::string_view s, std::vector<char32_t>& out) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!n || i + n > s.size()) return false;
    char32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (int k = 1; k < n; k++) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out.push_back(cp);
    i += n;
  }
  return true;
}

}  // namespace

TokenVocab TokenVocab::from_bytes(std::vector<std::string> bytes) {
  TokenVocab v;
  v.bytes_ = std::move(bytes);
  v.index();
  return v;
}

TokenVocab TokenVocab::from_tokenizer(const Tokenizer& tok, int64_t size) {
  const tok::Impl& impl = tok.impl();
  TokenVocab v;
  v.bytes_.resize(static_cast<size_t>(std::max<int64_t>(size, 0)));
  // A token's text is what it adds after an ordinary token: decode([anchor, id]) minus decode([anchor]), so
  // decoders that treat the first token specially (a stripped leading space) do not distort it.
  int32_t anchor = -1;
  for (const char* a : {"a", "x", "e",
                        "\xE2\x96\x81"
                        "a",
                        "\xC4\xA0"
                        "a"})
    if (auto id = tok.token_to_id(a); id && !tok.is_added(*id)) {
      anchor = *id;
      break;
    }
  const std::string anchor_text = anchor >= 0 ? impl.decode({anchor}, false) : std::string();
  const auto& inv = byte_level_inverse();
  std::vector<char32_t> cps;
  const int64_t n = std::min<int64_t>(size, tok.vocab_size());
  for (int32_t id = 0; id < n; id++) {
    // Added tokens go through the decoder too (as Tokenizer::decode does); special ones are never text.
    std::optional<std::string_view> s;
    if (const tok::AddedToken* t = impl.added_token(id)) {
      // Some tokenizers list the byte-fallback tokens as special added tokens; they still decode to their
      // byte.
      if (t->special && byte_token(t->content) < 0) {
        v.bytes_[id] = special_bytes(t->content);
        continue;
      }
      s = t->content;
    } else {
      s = impl.id_to_token(id);
    }
    if (!s) continue;
    if (int b = byte_token(*s); b >= 0) {
      if (b != 0xFF) v.bytes_[id] = std::string(1, static_cast<char>(b));
      continue;
    }
    std::string text;
    if (anchor >= 0) {
      std::string both = impl.decode({anchor, id}, false);
      text = both.compare(0, anchor_text.size(), anchor_text) == 0 ? both.substr(anchor_text.size()) : both;
    } else {
      text = impl.decode({id}, false);
    }
    // Byte-level tokens that hold part of a UTF-8 character decode to U+FFFD; map their characters back to
    // bytes.
    if (text.find("\xEF\xBF\xBD") != std::string::npos && s->find("\xEF\xBF\xBD") == std::string::npos) {
      cps.clear();
      std::string raw;
      bool ok = decode_utf8(*s, cps);
      for (char32_t c : cps) {
        auto it = inv.find(c);
        if (it == inv.end()) {
          ok = false;
          break;
        }
        raw.push_back(static_cast<char>(it->second));
      }
      if (ok) text = raw;
    }
    // Text with a 0xFF byte is not UTF-8 (and 0xFF marks special tokens): never allowed.
    if (text.find('\xFF') != std::string::npos) text.clear();
    v.bytes_[id] = std::move(text);
  }
  v.index();
  return v;
}

void TokenVocab::index() {
  sorted_.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(bytes_.size()); i++)
    if (!bytes_[i].empty()) sorted_.push_back(i);
  std::sort(sorted_.begin(), sorted_.end(),
            [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b); });
  lcp_.assign(sorted_.size(), 0);
  max_len_ = 0;
  for (size_t i = 0; i < sorted_.size(); i++) {
    const std::string& s = bytes_[sorted_[i]];
    max_len_ = std::max(max_len_, s.size());
    if (i == 0) continue;
    const std::string& p = bytes_[sorted_[i - 1]];
    size_t k = 0;
    while (k < s.size() && k < p.size() && s[k] == p[k]) k++;
    lcp_[i] = static_cast<uint16_t>(std::min<size_t>(k, 65535));
  }
  for (int b = 0, i = 0; b <= 256; b++) {
    while (i < static_cast<int>(sorted_.size()) && static_cast<unsigned char>(bytes_[sorted_[i]][0]) < b) i++;
    first_[b] = b == 256 ? sorted_.size() : static_cast<size_t>(i);
  }
}

}  // namespace vatic::grammar
