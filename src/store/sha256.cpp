#include "store/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "util/error.h"

namespace vatic {

namespace {
EVP_MD_CTX* ctx_of(void* p) { return static_cast<EVP_MD_CTX*>(p); }
}  // namespace

Sha256::Sha256() {
  EVP_MD_CTX* c = EVP_MD_CTX_new();
  if (!c) fail("SHA-256: out of memory");
  if (EVP_DigestInit_ex(c, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(c);
    fail("SHA-256: libcrypto cannot start a digest");
  }
  ctx_ = c;
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_of(ctx_)); }

Sha256::Sha256(Sha256&& o) noexcept : ctx_(o.ctx_), done_(o.done_) { o.ctx_ = nullptr; }

Sha256& Sha256::operator=(Sha256&& o) noexcept {
  if (this != &o) {
    EVP_MD_CTX_free(ctx_of(ctx_));
    ctx_ = o.ctx_;
    done_ = o.done_;
    o.ctx_ = nullptr;
  }
  return *this;
}

void Sha256::update(const void* data, size_t n) {
  if (!ctx_ || done_) fail("SHA-256: update after the digest was taken");
  if (n && EVP_DigestUpdate(ctx_of(ctx_), data, n) != 1) fail("SHA-256: libcrypto digest update failed");
}

std::string Sha256::hex_digest() {
  if (!ctx_ || done_) fail("SHA-256: the digest was already taken");
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_of(ctx_), md, &len) != 1 || len != 32) fail("SHA-256: libcrypto digest failed");
  done_ = true;
  static const char* hex = "0123456789abcdef";
  std::string out(64, '0');
  for (unsigned i = 0; i < 32; ++i) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 0xf];
  }
  return out;
}

std::string sha256_hex(const std::string& data) {
  Sha256 h;
  h.update(data.data(), data.size());
  return h.hex_digest();
}

std::string sha256_file(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", path.string(), std::strerror(errno));
  Sha256 h;
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      fail("cannot read {}: {}", path.string(), std::strerror(e));
    }
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return h.hex_digest();
}

}  // namespace vatic
