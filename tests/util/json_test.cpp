#include "util/json.h"

#include <gtest/gtest.h>

#include "util/error.h"

namespace vatic {
namespace {

TEST(JsonDepth, CountsNestingOutsideStrings) {
  EXPECT_EQ(json_depth("1"), 0);
  EXPECT_EQ(json_depth("{}"), 1);
  EXPECT_EQ(json_depth(R"({"a": [1, {"b": []}]})"), 4);
  EXPECT_EQ(json_depth(R"({"a": "[[[[{{{{"})"), 1);
  EXPECT_EQ(json_depth(R"({"a": "\"[[[["})"), 1);
  EXPECT_EQ(json_depth(R"(["\\", [[]]])"), 3);
  // Stops counting once past the limit.
  std::string deep(1000000, '[');
  EXPECT_EQ(json_depth(deep, 10), 11);
}

TEST(JsonDepth, ParseRefusesDeepDocumentsAndKeepsFileContentsOut) {
  std::string deep = std::string(60000, '[') + std::string(60000, ']');
  try {
    parse_json(deep, "body");
    FAIL() << "parsed a 60000-deep document";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 128"), std::string::npos) << e.what();
  }
  std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_NO_THROW(parse_json(ok, "body"));
  try {
    parse_ordered_json(R"({"key": SECRET-VALUE})", "config.json");
    FAIL();
  } catch (const InvalidInput& e) {
    std::string m = e.what();
    EXPECT_EQ(m.find("SECRET"), std::string::npos) << m;
    EXPECT_NE(m.find("config.json"), std::string::npos) << m;
    EXPECT_NE(m.find("line 1"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace vatic
