#include "util/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace vatic {
namespace {

constexpr const char* kName = "VATIC_ENV_INT_TEST";

int read_with(const char* value, int fallback = 7, int lo = 0, int hi = 100) {
  if (value)
    setenv(kName, value, 1);
  else
    unsetenv(kName);
  const int v = env_int(kName, fallback, lo, hi);
  unsetenv(kName);
  return v;
}

TEST(EnvInt, UnsetOrEmptyGivesTheFallback) {
  EXPECT_EQ(read_with(nullptr), 7);
  EXPECT_EQ(read_with(""), 7);
}

TEST(EnvInt, IntegersInRangeAreRead) {
  EXPECT_EQ(read_with("0"), 0);
  EXPECT_EQ(read_with("42"), 42);
  EXPECT_EQ(read_with("100"), 100);
  EXPECT_EQ(read_with("-5", 7, -10, 10), -5);
}

TEST(EnvInt, BadValuesAreIgnoredWithAWarning) {
  for (const char* bad : {"abc", "12abc", "4.5", " ", "-1", "101", "99999999999999999999", "0x10"}) {
    testing::internal::CaptureStderr();
    EXPECT_EQ(read_with(bad), 7) << bad;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(kName), std::string::npos) << bad << ": " << err;
  }
}

}  // namespace
}  // namespace vatic
