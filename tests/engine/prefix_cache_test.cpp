// Reuse of KV state across requests: the live sequence, the prefix trie, eviction under a budget, and exactness
// (a warm request produces what a cold one does).
#include <gtest/gtest.h>

#include "cache/prefix_cache.h"
#include "engine/engine.h"
#include "models/fixture_util.h"
#include "test_device.h"

namespace vatic {
namespace {

using namespace vatic::testing;

struct Result {
  std::vector<int32_t> tokens;
  GenerateStats stats;
};

Result ask(Engine& e, const std::vector<int32_t>& prompt, int n) {
  GenerateOptions o;
  o.max_tokens = n;
  o.ignore_eos = true;
  Result r;
  r.stats = e.generate(prompt, o, [&](const TokenEvent& ev) {
    r.tokens.push_back(ev.token);
    return true;
  });
  return r;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class PrefixReuse : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixReuse, FollowUpEvaluatesOnlyTheNewTokensAndMatchesAColdRun) {
  const auto& cases = fixture_index()["models"][GetParam()]["cases"];
  auto p1 = ints(cases[2]["prompt"]);  // 40 tokens: longer than the sliding window
  Engine warm(ModelSource::from_directory(model_dir(GetParam())), test_device());
  Result a = ask(warm, p1, 12);
  EXPECT_EQ(a.stats.prompt_reused, 0);
  EXPECT_EQ(a.stats.prompt_evaluated, static_cast<int64_t>(p1.size()));
  // A follow-up turn: the earlier prompt, the answer, and new tokens.
  auto p2 = cat(cat(p1, a.tokens), {11, 12, 13});
  Result b = ask(warm, p2, 12);
  // Everything but the last generated token (never run) is reused.
  EXPECT_EQ(b.stats.prompt_reused, static_cast<int64_t>(p1.size() + a.tokens.size() - 1));
  EXPECT_EQ(b.stats.prompt_evaluated, static_cast<int64_t>(p2.size()) - b.stats.prompt_reused);
  Engine cold(ModelSource::from_directory(model_dir(GetParam())), test_device());
  EXPECT_EQ(ask(cold, p2, 12).tokens, b.tokens);
}

TEST_P(PrefixReuse, AlternatingConversationsRestoreFromTheTrie) {
  const auto& cases = fixture_index()["models"][GetParam()]["cases"];
  auto p1 = ints(cases[2]["prompt"]);
  auto p2 = ints(cases[1]["prompt"]);
  Engine e(ModelSource::from_directory(model_dir(GetParam())), test_device());
  Result a = ask(e, p1, 10);
  ask(e, p2, 10);  // the live sequence now holds the other conversation
  auto follow = cat(cat(p1, a.tokens), {21, 22});
  Result c = ask(e, follow, 10);
  EXPECT_EQ(c.stats.prompt_reused, static_cast<int64_t>(p1.size() + a.tokens.size() - 1));
  Engine cold(ModelSource::from_directory(model_dir(GetParam())), test_device());
  EXPECT_EQ(ask(cold, follow, 10).tokens, c.tokens);
  // A prompt that diverges inside the first conversation reuses only the shared part, still exactly.
  auto branch = std::vector<int32_t>(p1.begin(), p1.begin() + 30);
  branch.push_back(99);
  Result d = ask(e, branch, 8);
  Engine cold2(ModelSource::from_directory(model_dir(GetParam())), test_device());
  EXPECT_EQ(ask(cold2, branch, 8).tokens, d.tokens);
}

TEST_P(PrefixReuse, TheSamePromptAgainAfterAnswersOfEveryLength) {
  // A repeated prompt re-evaluates its last token, so the state rewinds to one short of the prompt. A sliding
  // ring keeps the window for some lengths only: after some answer length it holds the window before the whole
  // prompt but no longer the one before its last token. Every length up to well past the ring must work.
  const auto& cases = fixture_index()["models"][GetParam()]["cases"];
  auto p = ints(cases[2]["prompt"]);
  Engine cold(ModelSource::from_directory(model_dir(GetParam())), test_device());
  const std::vector<int32_t> want = ask(cold, p, 4).tokens;
  Engine e(ModelSource::from_directory(model_dir(GetParam())), test_device());
  for (int n = 1; n <= 96; n++) {
    ask(e, p, n);
    Result again;
    ASSERT_NO_THROW(again = ask(e, p, 4)) << "after an answer of " << n << " tokens";
    EXPECT_EQ(again.tokens, want) << "after an answer of " << n << " tokens";
  }
}

class SpeculativePrefixReuse : public ::testing::TestWithParam<std::string> {};

TEST_P(SpeculativePrefixReuse, RequestsReuseAndStayExact) {
  std::string assistant = GetParam() + "-assistant";
  ModelSource src = ModelSource::from_directory(model_dir(GetParam()));
  src.draft = std::make_shared<ModelSource>(ModelSource::from_directory(model_dir(assistant)));
  auto p1 = ints(fixture_index()["models"][GetParam()]["cases"][2]["prompt"]);
  Engine spec(src, test_device());
  ASSERT_TRUE(spec.has_drafter());
  Result a = ask(spec, p1, 20);
  auto p2 = cat(cat(p1, a.tokens), {5, 6});
  Result b = ask(spec, p2, 20);
  EXPECT_GT(b.stats.prompt_reused, static_cast<int64_t>(p1.size()));
  Engine plain(ModelSource::from_directory(model_dir(GetParam())), test_device(), EngineOptions{false, 0, 0, 4});
  EXPECT_EQ(ask(plain, p1, 20).tokens, a.tokens);
  EXPECT_EQ(ask(plain, p2, 20).tokens, b.tokens);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixReuse,
                         ::testing::Values("gemma4-e2b-tiny", "gemma4-moe-tiny", "gemma4-dense-tiny"));
INSTANTIATE_TEST_SUITE_P(Fixtures, SpeculativePrefixReuse, ::testing::Values("gemma4-e2b-tiny", "gemma4-dense-tiny"));

TEST(PrefixCache, EvictsLeastRecentlyUsedToStayUnderBudget) {
  PrefixCache c(1000);
  auto snap = std::make_shared<int>(0);
  c.insert({1, 2, 3}, snap, 400);
  c.insert({1, 2, 4}, snap, 400);
  EXPECT_EQ(c.bytes(), 800u);
  EXPECT_EQ(c.lookup({1, 2, 3, 9}).length, 3);  // {1,2,3} is now the most recently used
  c.insert({5}, snap, 400);                      // evicts {1,2,4}
  EXPECT_LE(c.bytes(), 1000u);
  EXPECT_EQ(c.lookup({1, 2, 4}).length, 0);
  EXPECT_EQ(c.lookup({1, 2, 3}).length, 3);
  EXPECT_EQ(c.lookup({5, 6}).length, 1);
  c.insert({7}, snap, 5000);  // larger than the whole budget: not stored
  EXPECT_EQ(c.lookup({7}).length, 0);
  EXPECT_LE(c.bytes(), 1000u);
}

TEST(PrefixCache, LongestStoredPrefixWins) {
  PrefixCache c(1 << 20);
  auto s1 = std::make_shared<int>(1), s2 = std::make_shared<int>(2);
  c.insert({1, 2}, s1, 10);
  c.insert({1, 2, 3, 4}, s2, 10);
  auto m = c.lookup({1, 2, 3, 4, 5});
  EXPECT_EQ(m.length, 4);
  EXPECT_EQ(m.snapshot, s2);
  EXPECT_EQ(c.lookup({1, 2, 3}).length, 2);
  EXPECT_EQ(c.lookup({2}).length, 0);
}

TEST(EngineMemory, PrefixCacheStaysUnderASmallBudget) {
  EngineOptions o;
  o.prefix_cache_bytes = 200 * 1024;
  Engine e(ModelSource::from_directory(model_dir("gemma4-dense-tiny")), test_device(), o);
  for (int i = 0; i < 12; i++) {
    ask(e, {2, 100 + i, 200 + i, 300 + i, 50, 60, 70, 80, 90}, 30);
    EXPECT_LE(e.status()["prefix_cache_bytes"].get<size_t>(), o.prefix_cache_bytes);
  }
  EXPECT_GT(e.status()["prefix_cache_bytes"].get<size_t>(), 0u);
}

}  // namespace
}  // namespace vatic

namespace vatic {
namespace {

TEST(PrefixCache, VeryLongSequencesDoNotRecurse) {
  // A trie as deep as a long context: insert, evict and destroy without deep recursion.
  std::vector<int32_t> a(200000), b(200000);
  for (size_t i = 0; i < a.size(); i++) a[i] = static_cast<int32_t>(i % 1000), b[i] = static_cast<int32_t>(i % 997);
  auto c = std::make_unique<PrefixCache>(100);
  c->insert(a, std::make_shared<int>(1), 60);
  c->insert(b, std::make_shared<int>(2), 60);  // evicts a (prunes its 200000-node branch)
  EXPECT_EQ(c->lookup(a).length, 0);
  EXPECT_EQ(c->lookup(b).length, static_cast<int64_t>(b.size()));
  c.reset();  // destroys b's branch
}

}  // namespace
}  // namespace vatic
