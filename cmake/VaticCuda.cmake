# The CUDA backend (src/backend/cuda/) builds when VATIC_CUDA is on and a CUDA toolkit is found (nvcc on PATH, in
# CUDACXX, or at /usr/local/cuda). It targets Hopper (sm_90a machine code) and embeds compute_90 PTX, so later GPUs
# run it through the driver's JIT. Without a toolkit vatic builds for the CPU alone; without a GPU at run time the
# CUDA backend reports no devices and everything runs on the CPU.
set(VATIC_WITH_CUDA OFF)
if(VATIC_CUDA AND VATIC_SANITIZE)
  # nvcc takes no -fsanitize, and a sanitizer build has no GPU to test: those builds are for the CPU.
  message(STATUS "vatic: VATIC_SANITIZE is set, building without the CUDA backend")
elseif(VATIC_CUDA)
  if(NOT DEFINED ENV{CUDACXX} AND NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(VATIC_WITH_CUDA ON)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(CMAKE_CUDA_ARCHITECTURES OFF)
    set(VATIC_CUDA_FLAGS -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90
        --expt-relaxed-constexpr -Xcompiler=-Wall,-Wno-unused-parameter -lineinfo)
    if(CUDAToolkit_VERSION VERSION_GREATER_EQUAL 12.8)
      # The kernels' machine code compresses to about half its size, which each binary carries.
      list(APPEND VATIC_CUDA_FLAGS --compress-mode=size)
    endif()
    message(STATUS "vatic: building the CUDA backend with ${CMAKE_CUDA_COMPILER} (CUDA ${CUDAToolkit_VERSION})")
  else()
    message(STATUS "vatic: no CUDA toolkit found, building for the CPU only")
  endif()
endif()
