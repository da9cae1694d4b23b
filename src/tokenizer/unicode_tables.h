#pragma once
// Unicode normalization data (generated into unicode_tables.cpp by gen_unicode_tables.py).
#include <cstddef>
#include <cstdint>

namespace vatic::unicode_tables {

struct CombiningClass {
  char32_t cp;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp;
  uint32_t offset;  // into the matching *Data pool
  uint32_t length;
};
struct Composition {
  char32_t first;
  char32_t second;
  char32_t composite;
};

extern const char* const kUnicodeVersion;
extern const CombiningClass kCombiningClasses[];  // sorted by cp
extern const std::size_t kCombiningClassCount;
extern const Decomposition kCanonical[];  // full canonical decompositions (NFD), sorted by cp; Hangul excluded
extern const std::size_t kCanonicalCount;
extern const char32_t* const kCanonicalData;
extern const Decomposition kCompat[];  // full compatibility decompositions (NFKD) where they differ from NFD
extern const std::size_t kCompatCount;
extern const char32_t* const kCompatData;
extern const Composition kCompositions[];  // primary composites, sorted by (first, second); Hangul excluded
extern const std::size_t kCompositionCount;

}  // namespace vatic::unicode_tables
