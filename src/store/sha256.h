#pragma once
// SHA-256 (FIPS 180-4), streaming. The store names blobs by it.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace vatic {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::string hex_digest();  // finishes; 64 lowercase hex digits

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const std::string& data);
// Hashes a whole file; throws vatic::Error when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace vatic
