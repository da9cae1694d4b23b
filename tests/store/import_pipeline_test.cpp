// SHA-256 through libcrypto, the parallel import runner, and large blobs written with direct I/O.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include "store/blobs.h"
#include "store/import_pipeline.h"
#include "store/sha256.h"
#include "util/error.h"
#include "util/files.h"

namespace fs = std::filesystem;
using namespace vatic;
using namespace vatic::store_detail;

TEST(Sha256Test, KnownVectors) {
  // FIPS 180-4 examples.
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 h;
  std::string a(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.update(a.data(), a.size());
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, SplitUpdatesAndFilesAgree) {
  std::mt19937 rng(7);
  std::string data(3 * 1000 * 1000 + 17, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  const std::string whole = sha256_hex(data);
  Sha256 h;
  size_t at = 0;
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{4096}, size_t{1} << 20}) {
    h.update(data.data() + at, n);
    at += n;
  }
  h.update(data.data() + at, data.size() - at);
  EXPECT_EQ(h.hex_digest(), whole);
  EXPECT_THROW(h.update("x", 1), Error);  // spent

  fs::path dir = fs::temp_directory_path() / ("vatic-sha-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  write_file_atomic(dir / "f", data);
  EXPECT_EQ(sha256_file(dir / "f"), whole);
  EXPECT_THROW(sha256_file(dir / "missing"), Error);
  fs::remove_all(dir);
}

TEST(RunParallelTest, RunsEveryJobOnceHeaviestFirst) {
  std::vector<uint64_t> w(100);
  std::iota(w.begin(), w.end(), uint64_t{1});
  std::vector<std::atomic<int>> runs(w.size());
  std::mutex mu;
  std::vector<size_t> started;
  run_parallel(w, 1, [&](size_t i) {
    runs[i]++;
    std::lock_guard<std::mutex> l(mu);
    started.push_back(i);
  });
  for (auto& r : runs) EXPECT_EQ(r.load(), 1);
  ASSERT_EQ(started.size(), w.size());
  EXPECT_EQ(started.front(), 99u);  // one thread: strictly heaviest first
  EXPECT_EQ(started.back(), 0u);

  for (auto& r : runs) r = 0;
  std::set<std::thread::id> ids;
  run_parallel(w, 4, [&](size_t i) {
    runs[i]++;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::lock_guard<std::mutex> l(mu);
    ids.insert(std::this_thread::get_id());
  });
  for (auto& r : runs) EXPECT_EQ(r.load(), 1);
  EXPECT_GT(ids.size(), 1u);
  run_parallel({}, 4, [&](size_t) { FAIL() << "no jobs"; });
}

TEST(RunParallelTest, StopsAfterAFailureAndRethrowsIt) {
  std::vector<uint64_t> w(50, 1);  // equal weights: index order
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    std::atomic<int> ran{0};
    try {
      run_parallel(w, threads, [&](size_t i) {
        ran++;
        if (i == 3) throw InvalidInput("job 3 failed");
      });
      FAIL() << "expected an exception";
    } catch (const InvalidInput& e) {
      EXPECT_STREQ(e.what(), "job 3 failed");
    }
    if (threads == 1) {
      EXPECT_EQ(ran.load(), 4);  // nothing after the failure started
    }
  }
}

// Blobs large enough for the direct-I/O path, with sizes that are not whole blocks, read back byte for byte and
// carry the digest of their bytes; the buffered path (VATIC_NO_DIRECT_IO) writes the same file.
TEST(WriteBlobTest, LargeBlobsRoundTrip) {
  fs::path root = fs::temp_directory_path() / ("vatic-blob-" + std::to_string(::getpid()));
  fs::remove_all(root);
  std::mt19937 rng(3);
  std::string a((size_t{17} << 20) + 12345, '\0'), b(4097, '\0');
  for (auto& c : a) c = static_cast<char>(rng());
  for (auto& c : b) c = static_cast<char>(rng());
  std::vector<Chunk> chunks{{b.data(), b.size()}, {a.data(), a.size()}, {b.data(), 3}};
  std::string all = b + a + b.substr(0, 3);
  BlobRef r = write_blob(root, chunks);
  EXPECT_TRUE(r.fresh);
  EXPECT_EQ(r.size, all.size());
  EXPECT_EQ(r.digest, "sha256:" + sha256_hex(all));
  fs::path p = root / "blobs" / ("sha256-" + sha256_hex(all));
  EXPECT_EQ(read_file(p), all);
  BlobRef again = write_blob(root, chunks);  // already there: not rewritten
  EXPECT_FALSE(again.fresh);
  fs::remove(p);
  ::setenv("VATIC_NO_DIRECT_IO", "1", 1);
  BlobRef buffered = write_blob(root, chunks);
  ::unsetenv("VATIC_NO_DIRECT_IO");
  EXPECT_TRUE(buffered.fresh);
  EXPECT_EQ(read_file(p), all);
  for (const auto& e : fs::directory_iterator(root / "blobs"))
    EXPECT_FALSE(is_temp_name(e.path().filename().string())) << e.path();
  fs::remove_all(root);
}
