#pragma once
// Store internals shared by store.cpp and create.cpp: blob and manifest writing, locking, temp-file cleanup.
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace vatic::store_detail {

// flock on ROOT/.lock: shared for creates, exclusive for removal / garbage collection.
class StoreLock {
 public:
  StoreLock(const std::filesystem::path& root, bool exclusive);
  ~StoreLock();
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;

 private:
  int fd_ = -1;
};

using Chunk = std::pair<const void*, size_t>;

struct BlobRef {
  std::string digest;  // "sha256:<hex>"
  uint64_t size = 0;
  bool fresh = false;  // written by this call (did not exist before)
};

// Writes the concatenation of `chunks` as a content-addressed blob under ROOT/blobs, unless an identical blob is
// already there: hash, temp file, fsync, verify the temp file's digest, rename, fsync the folder.
BlobRef write_blob(const std::filesystem::path& root, const std::vector<Chunk>& chunks);
BlobRef write_blob(const std::filesystem::path& root, const std::string& bytes);

// Writes a file atomically with a temp name ".tmp-<pid>-<random>" in the same folder (creating the folder).
void write_atomic(const std::filesystem::path& path, const std::string& bytes);

// Removes ".tmp-<pid>-*" files in `dir` (recursively) whose process is gone.
size_t remove_stale_temps(const std::filesystem::path& dir);
bool is_temp_name(const std::string& filename);

}  // namespace vatic::store_detail
