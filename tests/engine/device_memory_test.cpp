// The engine refuses a model whose KV cache at num_ctx cannot fit the device, with both sizes in the message,
// before it allocates anything for the sequence.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "engine/engine.h"
#include "models/fixture_util.h"
#include "test_device.h"

namespace vatic {
namespace {

using namespace vatic::testing;
namespace fs = std::filesystem;

TEST(DeviceMemory, KvCacheLargerThanTheDeviceIsRefusedClearly) {
  // The dense fixture with a context window of 2^31 - 1 tokens: its KV cache at that length is terabytes.
  fs::path dir = fs::temp_directory_path() / fmt::format("vatic-kv-too-big-{}", ::getpid());
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(model_dir("gemma4-dense-tiny")))
    fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
  json cfg = json::parse(read_file(dir / "config.json"));
  json& t = cfg.contains("text_config") ? cfg["text_config"] : cfg;
  t["max_position_embeddings"] = 2147483647;
  write_file_atomic(dir / "config.json", cfg.dump());
  EngineOptions o;
  o.num_ctx = 2000000000;
  try {
    Engine e(ModelSource::from_directory(dir), test_device(), o);
    FAIL() << "a KV cache of 2e9 tokens was accepted";
  } catch (const InvalidInput& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("does not fit"), std::string::npos) << m;
    EXPECT_NE(m.find("GB"), std::string::npos) << m;
    EXPECT_NE(m.find("num_ctx"), std::string::npos) << m;
  }
  // The same model at a context that fits loads.
  o.num_ctx = 512;
  EXPECT_NO_THROW(Engine(ModelSource::from_directory(dir), test_device(), o));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace vatic
