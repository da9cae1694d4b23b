#include <cstdlib>
#include <mutex>

#include "backend/backend.h"
#ifdef VATIC_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace vatic {

namespace {

std::string list(const std::vector<Device>& devices) {
  std::string s;
  for (const auto& d : devices) s += (s.empty() ? "" : ", ") + d.str();
  return s;
}

}  // namespace

std::vector<Device> available_devices() {
  std::vector<Device> d{Device::CPU};
#ifdef VATIC_WITH_CUDA
  for (int i = 0; i < cuda_device_count(); i++) d.push_back(Device::cuda(i));
#endif
  return d;
}

bool device_available(Device device) {
  if (device.is_cpu()) return true;
#ifdef VATIC_WITH_CUDA
  if (device.is_cuda()) return device.index >= 0 && device.index < cuda_device_count();
#endif
  return false;
}

Backend& backend_for(Device device) {
  if (device.is_cpu()) return cpu_backend();
#ifdef VATIC_WITH_CUDA
  if (device.is_cuda() && device_available(device)) return cuda_backend(device.index);
  if (device.is_cuda())
    throw InvalidInput(fmt::format("no {} on this machine: it has {}{}", device.str(), list(available_devices()),
                                   cuda_device_count() == 0 ? fmt::format(" ({})", cuda_unavailable_reason()) : ""));
#endif
  throw InvalidInput(fmt::format("no {} backend in this build (built without CUDA): it has {}", device.str(),
                                 list(available_devices())));
}

Device default_device() { return resolve_device("auto"); }

Device resolve_device(const std::string& text) {
  if (text.empty() || text == "auto") {
    std::vector<Device> d = available_devices();
    if (const char* env = std::getenv("VATIC_DEVICE"); env && *env && std::string(env) != "auto")
      return resolve_device(env);
    return d.size() > 1 ? d[1] : Device::CPU;
  }
  Device d = Device::parse(text);
  backend_for(d);  // throws naming what the machine has
  return d;
}

}  // namespace vatic
