#include <gtest/gtest.h>

#include "runner/stop_strings.h"

using vatic::runner::StopMatcher;

TEST(StopMatcher, PassesTextThroughWithoutStops) {
  StopMatcher m({});
  EXPECT_EQ(m.push("hello"), "hello");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, HoldsBackAPossiblePartialMatchAndCutsAtTheMatch) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("abc E"), "abc ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("Dxyz"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "END");
  EXPECT_EQ(m.push("more"), "");
}

TEST(StopMatcher, ReleasesHeldTextWhenTheMatchFails) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("E"), "");
  EXPECT_EQ(m.push("Nx"), "ENx");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("EN"), "");
  EXPECT_EQ(m.flush(), "EN");
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"cd", "b"});
  EXPECT_EQ(m.push("abcd"), "a");
  EXPECT_EQ(m.matched(), "b");
}

TEST(StopMatcher, MatchInsideOneChunk) {
  StopMatcher m({"\n\n"});
  EXPECT_EQ(m.push("line one\n"), "line one");
  EXPECT_EQ(m.push("\nline two"), "");
  EXPECT_TRUE(m.stopped());
}
