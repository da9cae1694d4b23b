#pragma once
// A small, fast reader for the large parts of a tokenizer.json (model.vocab, model.merges), so that a
// 30 MB file loads well under a second. Everything else goes through nlohmann::json.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vatic::tok::fastjson {

// Byte span of one JSON value inside the document, or nullopt if the text is not well formed there.
// `pos` is advanced past the value.
std::optional<std::string_view> skip_value(std::string_view doc, std::size_t& pos);

// Members of an object value: (unescaped key, raw value span). nullopt if malformed.
std::optional<std::vector<std::pair<std::string, std::string_view>>> object_members(std::string_view object);

// {"token": id, ...} -> pairs. nullopt if it is not that shape.
std::optional<std::vector<std::pair<std::string, int64_t>>> parse_vocab(std::string_view object);

// ["a b", ...] or [["a", "b"], ...] -> pairs. nullopt if it is not that shape (including "a b" strings
// without a space, which the caller then reports).
std::optional<std::vector<std::pair<std::string, std::string>>> parse_merges(std::string_view array);

}  // namespace vatic::tok::fastjson
