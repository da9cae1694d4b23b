#include "tensor/storage.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "tensor/host_cache.h"
#include "util/error.h"

namespace vatic {

namespace {
class HostStorage : public Storage {
 public:
  HostStorage(size_t bytes, bool zero) : Storage(nullptr, bytes, Device::CPU, false) {
    data_ = host_block_cache().allocate(bytes);
    if (zero) std::memset(data_, 0, bytes);
  }
  ~HostStorage() override { host_block_cache().deallocate(data_, size_); }
};
}  // namespace

std::shared_ptr<Storage> host_storage(size_t bytes, bool zero) {
  return std::make_shared<HostStorage>(bytes, zero);
}

MappedFile::MappedFile(const std::filesystem::path& path)
    : Storage(nullptr, 0, Device::CPU, true), path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("cannot stat {}: {}", path.string(), std::strerror(e));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("cannot map {}: {}", path.string(), std::strerror(e));
    }
    data_ = p;
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace vatic
