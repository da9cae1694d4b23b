// The safetensors reader on arbitrary files: header parsing, offsets, dtypes and shapes must be checked before any
// tensor is touched. Every tensor the reader accepts is read in full (ASan catches a view past the mapping).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "formats/safetensors.h"
#include "util/error.h"

namespace {
// The reader takes a path, so each input goes through one scratch file, removed when the fuzzer exits.
struct ScratchFile {
  std::string path = "/tmp/vatic-fuzz-" + std::to_string(::getpid()) + ".safetensors";
  ~ScratchFile() { std::remove(path.c_str()); }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchFile scratch;
  const std::string& path = scratch.path;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    vatic::SafetensorsFile file(path);
    for (const auto& name : file.names()) {
      vatic::Tensor t = file.get(name);
      const auto* p = static_cast<const volatile uint8_t*>(t.raw());
      uint8_t sum = 0;
      for (size_t i = 0; i < t.nbytes(); i++) sum ^= p[i];
      (void)sum;
    }
  } catch (const vatic::Error&) {
  }
  return 0;
}
