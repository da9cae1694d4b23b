# vatic_layer(NAME [DEPS layer...] [LIBS target...])
# One static library per engine layer, made of every .cpp under src/NAME/ (recursively).
# Include paths are rooted at src/, so code writes #include "tensor/tensor.h".
function(vatic_layer name)
  cmake_parse_arguments(L "" "" "DEPS;LIBS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${name}/*.cpp)
  # Device backends other than the CPU build only when their toolkit is there (src/backend/cuda/: CUDA).
  if(NOT VATIC_WITH_CUDA)
    list(FILTER srcs EXCLUDE REGEX "/cuda/")
  endif()
  if(srcs)
    add_library(vatic_${name} STATIC ${srcs})
    target_include_directories(vatic_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
    target_compile_options(vatic_${name} PRIVATE ${VATIC_WARNINGS})
    set(kind PUBLIC)
  else()
    add_library(vatic_${name} INTERFACE)
    target_include_directories(vatic_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    set(kind INTERFACE)
  endif()
  foreach(d ${L_DEPS})
    target_link_libraries(vatic_${name} ${kind} vatic_${d})
  endforeach()
  if(L_LIBS)
    target_link_libraries(vatic_${name} ${kind} ${L_LIBS})
  endif()
endfunction()

# vatic_layer_tests(NAME [ON_DEVICE] [DEPS layer...] [LIBS target...])
# One GoogleTest binary per layer from tests/NAME/*.cpp, registered with ctest. ON_DEVICE: the binary's tests run on
# test_device() (tests/test_device.h) and are registered a second time as "cuda.*" with VATIC_TEST_DEVICE=cuda and
# the label "gpu"; without a GPU those skip, saying so.
function(vatic_layer_tests name)
  cmake_parse_arguments(L "ON_DEVICE" "" "DEPS;LIBS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/${name}/*.cpp)
  if(NOT srcs)
    return()
  endif()
  if(L_ON_DEVICE)
    list(APPEND srcs ${PROJECT_SOURCE_DIR}/tests/test_device_env.cpp)
  endif()
  add_executable(test_${name} ${srcs})
  target_include_directories(test_${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(test_${name} PRIVATE ${VATIC_WARNINGS})
  target_compile_definitions(test_${name} PRIVATE
    VATIC_FIXTURES_DIR="${PROJECT_SOURCE_DIR}/tests/fixtures"
    VATIC_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    VATIC_BINARY="${PROJECT_BINARY_DIR}/vatic")
  foreach(d ${L_DEPS})
    target_link_libraries(test_${name} PRIVATE vatic_${d})
  endforeach()
  target_link_libraries(test_${name} PRIVATE ${L_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  include(GoogleTest)
  gtest_discover_tests(test_${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 900)
  if(L_ON_DEVICE)
    gtest_discover_tests(test_${name} DISCOVERY_TIMEOUT 60 TEST_PREFIX "cuda."
      PROPERTIES TIMEOUT 900 LABELS gpu ENVIRONMENT "VATIC_TEST_DEVICE=cuda"
      SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  endif()
endfunction()
