#include "tensor/dtype.h"

#include <cmath>

namespace vatic {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::I8: return 1;
    case DType::U32: return 4;
    case DType::F8_E4M3: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::U32: return "U32";
    case DType::F8_E4M3: return "F8_E4M3";
  }
  return "?";
}

bool parse_dtype(const std::string& n, DType* out) {
  static const struct {
    const char* name;
    DType t;
  } table[] = {{"F32", DType::F32}, {"BF16", DType::BF16}, {"F16", DType::F16},         {"I32", DType::I32},
               {"I64", DType::I64}, {"U8", DType::U8},     {"I8", DType::I8},           {"U32", DType::U32},
               {"F8_E4M3", DType::F8_E4M3}};
  for (auto& e : table) {
    if (n == e.name) {
      *out = e.t;
      return true;
    }
  }
  return false;
}


float f16_to_f32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00);
  if (a < 6.103515625e-05f) {  // subnormal: round to nearest multiple of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  uint32_t u;
  std::memcpy(&u, &a, 4);
  uint32_t e = ((u >> 23) & 0xff) - 127 + 15;
  uint32_t m = u & 0x7fffff;
  uint32_t r = (e << 10) | (m >> 13);
  uint32_t rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return static_cast<uint16_t>(sign | r);
}

float f8e4m3_to_f32(uint8_t v) {
  uint32_t sign = v >> 7, exp = (v >> 3) & 0xf, mant = v & 7;
  float r;
  if (exp == 0xf && mant == 7) {
    r = NAN;
  } else if (exp == 0) {
    r = std::ldexp(static_cast<float>(mant), -9);
  } else {
    r = std::ldexp(static_cast<float>(8 | mant), static_cast<int>(exp) - 10);
  }
  return sign ? -r : r;
}

}  // namespace vatic
