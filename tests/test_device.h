#pragma once
// The device the model, cache and engine tests run on: VATIC_TEST_DEVICE (cpu, cuda, cuda:N), the CPU when unset.
// ctest runs these binaries twice: as they are, and with VATIC_TEST_DEVICE=cuda under the label "gpu"; on a machine
// (or build) without that device every test of the second run skips, saying what is missing.
#include <cstdlib>
#include <string>

#include "backend/backend.h"

namespace vatic {

inline Device test_device() {
  const char* e = std::getenv("VATIC_TEST_DEVICE");
  return e && *e ? Device::parse(e) : Device::CPU;
}

}  // namespace vatic
