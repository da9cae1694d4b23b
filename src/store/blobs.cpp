#include "store/blobs.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "store/sha256.h"
#include "util/error.h"

namespace vatic::store_detail {
namespace fs = std::filesystem;

StoreLock::StoreLock(const fs::path& root, bool exclusive) {
  fs::create_directories(root);
  fd_ = ::open((root / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot open the store lock {}: {}", (root / ".lock").string(), std::strerror(errno));
  while (::flock(fd_, exclusive ? LOCK_EX : LOCK_SH) != 0) {
    if (errno != EINTR) fail("cannot lock the store {}: {}", root.string(), std::strerror(errno));
  }
}

StoreLock::~StoreLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

namespace {

std::string temp_name() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format(".tmp-{}-{:016x}", ::getpid(), rng());
}

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_all(int fd, const void* data, size_t n, const fs::path& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("cannot write {}: {}", path.string(), std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Writes chunks to a fresh temp file in `dir`, fsyncs it; returns its path. Removes it on failure.
fs::path write_temp(const fs::path& dir, const std::vector<Chunk>& chunks) {
  fs::create_directories(dir);
  fs::path tmp = dir / temp_name();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create {}: {}", tmp.string(), std::strerror(errno));
  try {
    for (const auto& [p, n] : chunks) write_all(fd, p, n, tmp);
    if (::fsync(fd) != 0) fail("cannot flush {}: {}", tmp.string(), std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail("cannot close {}: {}", tmp.string(), std::strerror(errno));
  }
  return tmp;
}

}  // namespace

bool is_temp_name(const std::string& f) { return f.starts_with(".tmp-"); }

BlobRef write_blob(const fs::path& root, const std::vector<Chunk>& chunks) {
  Sha256 h;
  uint64_t size = 0;
  for (const auto& [p, n] : chunks) {
    h.update(p, n);
    size += n;
  }
  const std::string hex = h.hex_digest();
  BlobRef ref{"sha256:" + hex, size, false};
  const fs::path dir = root / "blobs";
  const fs::path final_path = dir / ("sha256-" + hex);
  std::error_code ec;
  if (fs::is_regular_file(final_path, ec) && fs::file_size(final_path, ec) == size) return ref;
  fs::path tmp = write_temp(dir, chunks);
  if (sha256_file(tmp) != hex) {
    ::unlink(tmp.c_str());
    fail("blob {} did not read back with the digest it was written with (disk error?)", final_path.string());
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename {} to {}: {}", tmp.string(), final_path.string(), std::strerror(e));
  }
  fsync_dir(dir);
  ref.fresh = true;
  return ref;
}

BlobRef write_blob(const fs::path& root, const std::string& bytes) {
  return write_blob(root, std::vector<Chunk>{{bytes.data(), bytes.size()}});
}

void write_atomic(const fs::path& path, const std::string& bytes) {
  fs::path tmp = write_temp(path.parent_path(), {{bytes.data(), bytes.size()}});
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename {} to {}: {}", tmp.string(), path.string(), std::strerror(e));
  }
  fsync_dir(path.parent_path());
}

size_t remove_stale_temps(const fs::path& dir) {
  size_t removed = 0;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  std::vector<fs::path> dead;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::string f = it->path().filename().string();
    if (!is_temp_name(f) || !it->is_regular_file(ec)) continue;
    long pid = std::strtol(f.c_str() + 5, nullptr, 10);
    bool alive = pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
    if (!alive) dead.push_back(it->path());
  }
  for (const auto& p : dead)
    if (fs::remove(p, ec)) ++removed;
  return removed;
}

}  // namespace vatic::store_detail
