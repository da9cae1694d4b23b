#pragma once
// The CUDA backend: one Backend per visible GPU (cuda:N). Built only with the CUDA toolkit (VATIC_WITH_CUDA).
#include <string>

#include "backend/backend.h"

namespace vatic {

int cuda_device_count();               // 0 when there is no driver or no GPU
std::string cuda_unavailable_reason();  // why cuda_device_count() is 0 ("no CUDA driver", ...)
Backend& cuda_backend(int index);

}  // namespace vatic
