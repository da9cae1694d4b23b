// Linked into every test binary that runs on test_device(): skips the whole binary when that device is absent.
#include <gtest/gtest.h>

#include "test_device.h"

namespace {

class DeviceEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const vatic::Device d = vatic::test_device();
    if (!vatic::device_available(d)) {
      try {
        vatic::backend_for(d);
      } catch (const std::exception& e) {
        GTEST_SKIP() << "VATIC_TEST_DEVICE=" << d.str() << " is not available: " << e.what();
      }
    }
    vatic::backend_for(d).bind_thread();
  }
};

[[maybe_unused]] ::testing::Environment* const kDeviceEnvironment =
    ::testing::AddGlobalTestEnvironment(new DeviceEnvironment);

}  // namespace
