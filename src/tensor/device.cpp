#include "tensor/device.h"

#include <charconv>

#include "util/error.h"

namespace vatic {

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  return "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return Device::CPU;
  if (text == "cuda" || text == "gpu") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const char* b = text.data() + 5;
    const char* e = text.data() + text.size();
    int index = -1;
    auto [p, ec] = std::from_chars(b, e, index);
    if (ec == std::errc() && p == e && b != e && index >= 0) return Device::cuda(index);
  }
  throw InvalidInput("unknown device \"" + text + "\": expected cpu, cuda or cuda:N");
}

}  // namespace vatic
