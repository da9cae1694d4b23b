// The CPU backend's copies of mapped weights (src/backend/cpu/weight_arena.h): the same bytes, 64-byte aligned,
// read-only, counted while alive; tensors not from a file mapping stay where they are.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/weight_arena.h"

namespace vatic {
namespace {

TEST(WeightArena, MappedWeightsAreCopiedBitForBit) {
  const auto path = std::filesystem::temp_directory_path() / "vatic_weight_arena_test.bin";
  std::vector<uint16_t> values(3000);
  for (size_t i = 0; i < values.size(); i++) values[i] = static_cast<uint16_t>(i * 2654435761u >> 7);
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 2));
  }
  auto file = std::make_shared<MappedFile>(path);
  Backend& be = backend_for(Device::CPU);
  const size_t before = cpu::resident_bytes();
  {
    // Two tensors of one mapping, the second at an offset that is not a multiple of 64.
    Tensor a(file, DType::BF16, {10, 100});
    Tensor b(file, DType::BF16, {1000}, 2002);
    Tensor ca = be.place_weight(a), cb = be.place_weight(b);
    for (const auto& [orig, copy] : {std::pair{a, ca}, std::pair{b, cb}}) {
      EXPECT_NE(copy.raw(), orig.raw());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(copy.raw()) % 64, 0u);
      EXPECT_EQ(copy.shape(), orig.shape());
      EXPECT_EQ(copy.dtype(), orig.dtype());
      EXPECT_TRUE(copy.storage()->read_only());
      EXPECT_EQ(std::memcmp(copy.raw(), orig.raw(), orig.nbytes()), 0);
    }
    EXPECT_EQ(cpu::resident_bytes(), before + a.nbytes() + b.nbytes());
  }
  EXPECT_EQ(cpu::resident_bytes(), before);
  std::filesystem::remove(path);

  // A tensor of the process's own memory is not copied.
  Tensor h = Tensor::from_floats({1, 2, 3}, {3});
  EXPECT_EQ(be.place_weight(h).raw(), h.raw());
}

}  // namespace
}  // namespace vatic
