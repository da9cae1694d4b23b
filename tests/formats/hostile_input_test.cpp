// config.json and safetensors headers nested deep enough to overflow a recursive parser are refused, and parse
// errors do not quote the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <string>

#include "formats/config_json.h"
#include "formats/safetensors.h"
#include "util/error.h"

namespace vatic {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/vatic-hostile-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(FormatsHostile, DeepConfigJsonIsRefused) {
  TempDir d;
  std::ofstream(d.path / "config.json") << "{\"a\": " << std::string(60000, '[') << std::string(60000, ']') << "}";
  std::string e = error_of([&] { load_config_json(d.path); });
  EXPECT_NE(e.find("nested deeper"), std::string::npos) << e;
  std::ofstream(d.path / "config.json") << "{\"architectures\": SECRET-CONTENT}";
  e = error_of([&] { load_config_json(d.path); });
  EXPECT_FALSE(e.empty());
  EXPECT_EQ(e.find("SECRET"), std::string::npos) << e;
}

TEST(FormatsHostile, DeepSafetensorsHeaderIsRefused) {
  TempDir d;
  std::string header = "{\"__metadata__\": " + std::string(50000, '[') + std::string(50000, ']') + "}";
  uint64_t n = header.size();
  std::ofstream f(d.path / "m.safetensors", std::ios::binary);
  char len[8];
  std::memcpy(len, &n, 8);
  f.write(len, 8);
  f << header;
  f.close();
  std::string e = error_of([&] { SafetensorsFile file(d.path / "m.safetensors"); });
  EXPECT_NE(e.find("nested deeper"), std::string::npos) << e;
}

}  // namespace
}  // namespace vatic
