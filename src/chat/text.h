#pragma once
// Internal text helpers shared by the chat formats.
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

#include "util/json.h"

namespace vatic::chat::detail {

// Python str.strip()/lstrip()/rstrip() and Jinja's trim for ASCII whitespace.
bool is_space(char c);
std::string_view strip(std::string_view s);
std::string_view lstrip(std::string_view s);
std::string_view rstrip(std::string_view s);

std::string upper_ascii(std::string_view s);

// json.dumps(value, ensure_ascii=False) with Python's default separators (", " and ": "), i.e. what the
// HF chat templates' tojson filter writes.
std::string python_json(const ordered_json& value);

// Position of the earliest occurrence of any marker at or after `from` (npos if none); `which` receives
// the index of the marker found (the longest one when several start at the same position).
std::size_t find_marker(std::string_view text, std::initializer_list<std::string_view> markers,
                        std::size_t* which = nullptr, std::size_t from = 0);

// Length of the longest suffix of `text` that is a proper prefix of one of the markers (a marker that may
// be completed by the next chunk).
std::size_t partial_marker_len(std::string_view text, std::initializer_list<std::string_view> markers);

// Length of `text` without a trailing incomplete UTF-8 sequence (one the next chunk may complete).
std::size_t utf8_complete_len(std::string_view text);

// For streaming plain text that the format trims before a marker: how much of `text` can be emitted now,
// holding back a possible partial marker and the whitespace before it (or trailing whitespace), and an
// incomplete trailing UTF-8 sequence so that every piece is valid UTF-8 when the whole output is.
std::size_t safe_emit_len(std::string_view text, std::initializer_list<std::string_view> markers);

// Validates a role name ("system", "developer", "user", "assistant", "tool"), else throws InvalidInput.
void check_role(const std::string& role, std::size_t index);

}  // namespace vatic::chat::detail
