#pragma once
// Where a tensor lives: a kind of device and its index ("cpu", "cuda:0"). A value that flows from the runner to
// the engine, the model loader, the weights, the caches and the drafter; nothing below picks a device on its own.
#include <cstdint>
#include <string>

namespace vatic {

enum class DeviceKind : uint8_t { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;

  static const Device CPU;  // the host
  static constexpr Device cuda(int index = 0) { return Device{DeviceKind::CUDA, index}; }

  bool is_cpu() const { return kind == DeviceKind::CPU; }
  bool is_cuda() const { return kind == DeviceKind::CUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
  // "cpu", "cuda" (index 0) or "cuda:N"; throws vatic::InvalidInput naming the accepted spellings.
  static Device parse(const std::string& text);
};
inline constexpr Device Device::CPU{DeviceKind::CPU, 0};

inline std::string device_name(Device d) { return d.str(); }

}  // namespace vatic
