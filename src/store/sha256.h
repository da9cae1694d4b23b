#pragma once
// SHA-256, streaming, through OpenSSL's libcrypto (EVP): it uses the CPU's SHA extensions or the best vector code
// it has, about 1-2 GB/s per core. The store names blobs by it.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace vatic {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&& o) noexcept;
  Sha256& operator=(Sha256&& o) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t n);
  std::string hex_digest();  // finishes; 64 lowercase hex digits. The object is spent afterwards.

 private:
  void* ctx_ = nullptr;  // EVP_MD_CTX
  bool done_ = false;
};

std::string sha256_hex(const std::string& data);
// Hashes a whole file; throws vatic::Error when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace vatic
