#pragma once
#include <cstddef>
#include <filesystem>
#include <memory>

#include "tensor/dtype.h"

namespace vatic {

// A block of memory on a device. Tensors share storage through shared_ptr; views never copy.
class Storage {
 public:
  virtual ~Storage() = default;
  void* data() const { return data_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }
  bool read_only() const { return read_only_; }

 protected:
  Storage(void* data, size_t size, Device device, bool read_only)
      : data_(data), size_(size), device_(device), read_only_(read_only) {}
  void* data_;
  size_t size_;
  Device device_;
  bool read_only_;
};

// 64-byte aligned host memory, zero-filled unless the caller will overwrite all of it anyway.
std::shared_ptr<Storage> host_storage(size_t bytes, bool zero = true);

// A whole file mapped read-only. Sub-ranges become tensor storage without copying.
class MappedFile : public Storage {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile() override;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const std::filesystem::path& path() const { return path_; }
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(data_); }

 private:
  std::filesystem::path path_;
};

}  // namespace vatic
