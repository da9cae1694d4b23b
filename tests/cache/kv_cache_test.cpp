// KV caches: append/rewind semantics, sliding rings that wrap inside one forward, snapshots; and at model level,
// chunked prefill and rewind giving the same logits as a fresh single pass.
#include <gtest/gtest.h>

#include "cache/kv_cache.h"
#include "engine/generator.h"
#include "formats/model_source.h"
#include "models/fixture_util.h"
#include "models/loader.h"
#include "ops/ops.h"
#include "test_device.h"

namespace vatic {
namespace {

using namespace vatic::testing;

// K/V rows whose values encode their position, so a test can tell which entries a cache holds.
Tensor rows_for(int64_t start, int64_t n, int64_t d) {
  std::vector<float> v(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < d; j++) v[i * d + j] = float(start + i) + 0.001f * float(j);
  return Tensor::from_floats(v, {n, 1, d});
}

// position -> value of the first element, for every occupied slot
std::map<int32_t, float> contents(const KvCache& c) {
  std::map<int32_t, float> m;
  Tensor pos = ops::to_host(c.positions());
  Tensor k = ops::to_host(ops::contiguous(c.keys()));
  for (int64_t s = 0; s < pos.numel(); s++) {
    int32_t p = pos.data<int32_t>()[s];
    if (p >= 0) m[p] = k.data<float>()[s * k.dim(1) * k.dim(2)];
  }
  return m;
}

TEST(FullKvCache, GrowsAndRewinds) {
  FullKvCache c(1, 4, 4, Device::CPU, 2);
  c.append(rows_for(0, 3, 4), rows_for(0, 3, 4));
  c.append(rows_for(3, 5, 4), rows_for(3, 5, 4));
  EXPECT_EQ(c.length(), 8);
  auto m = contents(c);
  ASSERT_EQ(m.size(), 8u);
  for (int p = 0; p < 8; p++) EXPECT_FLOAT_EQ(m[p], float(p));
  c.rewind(5);
  EXPECT_EQ(c.length(), 5);
  EXPECT_EQ(contents(c).size(), 5u);
  c.append(rows_for(5, 1, 4), rows_for(5, 1, 4));
  EXPECT_FLOAT_EQ(contents(c)[5], 5.0f);
  EXPECT_FALSE(c.can_rewind_to(7));
  EXPECT_THROW(c.rewind(7), Error);
}

TEST(SlidingKvCache, KeepsTheWindowAndRewindsAfterAWrappingForward) {
  const int64_t W = 4;
  SlidingKvCache c(1, 2, 2, W, Device::CPU, /*spare=*/0);
  c.append(rows_for(0, 6, 2), rows_for(0, 6, 2));  // ring of W + 6 slots
  // A verification-sized forward of 5 tokens that wraps the ring...
  c.append(rows_for(6, 5, 2), rows_for(6, 5, 2));
  EXPECT_EQ(c.length(), 11);
  // ...then a rewind to just after its first token: the window before it must still be intact.
  ASSERT_TRUE(c.can_rewind_to(7));
  c.rewind(7);
  auto m = contents(c);
  for (int p = 7 - W; p < 7; p++) {
    ASSERT_TRUE(m.count(p)) << "position " << p << " lost";
    EXPECT_FLOAT_EQ(m[p], float(p));
  }
  for (auto& [p, v] : m) EXPECT_LT(p, 7);
  // Writing again after the rewind overwrites the rejected entries.
  c.append(rows_for(7, 2, 2), rows_for(7, 2, 2));
  EXPECT_FLOAT_EQ(contents(c)[8], 8.0f);
}

TEST(SlidingKvCache, RefusesARewindPastWhatItKept) {
  SlidingKvCache c(1, 2, 2, 3, Device::CPU, 0);
  for (int i = 0; i < 20; i++) c.append(rows_for(i, 1, 2), rows_for(i, 1, 2));
  EXPECT_FALSE(c.can_rewind_to(5));
  EXPECT_THROW(c.rewind(5), Error);
  EXPECT_TRUE(c.can_rewind_to(19));
}

TEST(SlidingKvCache, SnapshotRestoresTheWindow) {
  SlidingKvCache a(1, 2, 2, 4, Device::CPU, 1);
  for (int i = 0; i < 9; i++) a.append(rows_for(i, 1, 2), rows_for(i, 1, 2));
  KvSnapshot s = a.snapshot();
  EXPECT_EQ(s.length, 9);
  EXPECT_EQ(s.positions.size(), 4u);
  SlidingKvCache b(1, 2, 2, 4, Device::CPU, 1);
  b.append(rows_for(0, 2, 2), rows_for(0, 2, 2));
  b.restore(s);
  EXPECT_EQ(b.length(), 9);
  auto m = contents(b);
  EXPECT_EQ(m.size(), 4u);
  for (int p = 5; p < 9; p++) EXPECT_FLOAT_EQ(m[p], float(p));
}

class ModelCaches : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelCaches, ChunkedPrefillEqualsOnePass) {
  auto lm = load_language_model(ModelSource::from_directory(model_dir(GetParam())), test_device());
  auto prompt = ints(fixture_index()["models"][GetParam()]["cases"][2]["prompt"]);  // crosses the window
  Generator gen(*lm, nullptr);
  auto s1 = lm->new_state();
  auto one = ops::to_vector(gen.prefill_logits(*s1, prompt, 0));
  for (int64_t chunk : {1, 3, 7, 16}) {
    auto s2 = lm->new_state();
    auto chunked = ops::to_vector(gen.prefill_logits(*s2, prompt, chunk));
    ASSERT_EQ(chunked.size(), one.size());
    EXPECT_LT(rel_error(chunked.data(), one.data(), static_cast<int64_t>(one.size())), 1e-5) << "chunk " << chunk;
  }
}

TEST_P(ModelCaches, RewindAfterAMultiTokenForwardEqualsRecompute) {
  auto lm = load_language_model(ModelSource::from_directory(model_dir(GetParam())), test_device());
  auto prompt = ints(fixture_index()["models"][GetParam()]["cases"][2]["prompt"]);
  const int64_t V = lm->info().vocab_size;
  const size_t keep = prompt.size() - 12;
  // Run the whole prompt, rewind 11 tokens back (the forward of 12 wrapped the sliding rings), continue.
  auto st = lm->new_state();
  lm->forward(*st, std::vector<int32_t>(prompt.begin(), prompt.begin() + keep), 0);
  lm->forward(*st, std::vector<int32_t>(prompt.begin() + keep, prompt.end()), 1);
  ASSERT_TRUE(st->can_rewind_to(static_cast<int64_t>(keep) + 1));
  st->rewind(static_cast<int64_t>(keep) + 1);
  auto after = ops::to_vector(lm->forward(*st, {7, 9}, 1).logits);
  // Fresh: prompt[:keep+1] then the same two tokens.
  auto fresh = lm->new_state();
  lm->forward(*fresh, std::vector<int32_t>(prompt.begin(), prompt.begin() + keep + 1), 0);
  auto want = ops::to_vector(lm->forward(*fresh, {7, 9}, 1).logits);
  EXPECT_LT(rel_error(after.data(), want.data(), V), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelCaches,
                         ::testing::Values("gemma4-e2b-tiny", "gemma4-moe-tiny", "gemma4-dense-tiny"));

}  // namespace
}  // namespace vatic
