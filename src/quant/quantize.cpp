#include "quant/quantize.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "util/error.h"

namespace vatic {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// bf16 rounding toward -inf / +inf. Directed rounding lets the stored (bf16) bias stay at or below the group
// minimum and the stored scale cover the whole range, so no value is clamped (see quantize_row).
float bf16_down(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  uint32_t t = u & 0xffff0000u;
  float tf;
  std::memcpy(&tf, &t, 4);
  if (tf <= x) return tf;  // positive (or exact): truncation went down
  t += 0x10000u;           // negative with dropped bits: one bf16 step further from zero
  std::memcpy(&tf, &t, 4);
  return tf;
}
float bf16_up(float x) { return -bf16_down(-x); }

float load_elem(const uint8_t* p, DType t) {
  switch (t) {
    case DType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_f32(h);
    }
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return f16_to_f32(h);
    }
    default:
      return 0;
  }
}

// Walks the rows (all dims but the last) of a possibly strided tensor.
template <typename F>
void for_each_row(const Tensor& w, F&& f) {
  const int nd = w.ndim();
  const int64_t rows = w.numel() / w.dim(-1);
  std::vector<int64_t> idx(static_cast<size_t>(nd - 1), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = 0;
    for (int d = 0; d < nd - 1; ++d) off += idx[static_cast<size_t>(d)] * w.stride(d);
    f(r, off);
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[static_cast<size_t>(d)] < w.dim(d)) break;
      idx[static_cast<size_t>(d)] = 0;
    }
  }
}

}  // namespace

int quant_bits(QuantType t) { return t == QuantType::Int8 ? 8 : t == QuantType::Int4 ? 4 : 0; }
const char* quant_type_name(QuantType t) {
  return t == QuantType::Int8 ? "int8" : t == QuantType::Int4 ? "int4" : "";
}
std::string supported_quant_types() { return "int8, int4 (aliases q8, fp8, q4, fp4)"; }

QuantType parse_quant_type(const std::string& text, const std::string& what) {
  std::string t = lower(text);
  if (t.empty() || t == "none") return QuantType::None;
  if (t == "int8" || t == "q8" || t == "fp8") return QuantType::Int8;
  if (t == "int4" || t == "q4" || t == "fp4") return QuantType::Int4;
  throw InvalidInput(
      fmt::format("unsupported {} \"{}\": supported types are {}", what, text, supported_quant_types()));
}

bool valid_group_size(int g) { return g == 32 || g == 64; }

Shape QuantizedTensor::logical_shape() const {
  Shape s = packed.shape();
  s.back() = s.back() * 32 / bits;
  return s;
}

std::string quant_base_name(const std::string& name) {
  static const std::string suffix = ".weight";
  if (name.size() > suffix.size() && name.ends_with(suffix)) return name.substr(0, name.size() - suffix.size());
  return name;
}

QuantizedTensor quantize(const Tensor& w, int bits, int group) {
  if (bits != 8 && bits != 4) throw InvalidInput(fmt::format("quantize: unsupported bit width {}", bits));
  if (!valid_group_size(group)) throw InvalidInput(fmt::format("quantize: unsupported group size {}", group));
  if (w.dtype() != DType::F32 && w.dtype() != DType::BF16 && w.dtype() != DType::F16)
    throw InvalidInput(fmt::format("quantize: expected a F32, BF16 or F16 tensor, got {}", w.describe()));
  if (w.ndim() < 2) throw InvalidInput(fmt::format("quantize: expected a matrix, got {}", w.describe()));
  const int64_t K = w.dim(-1);
  if (K % group != 0)
    throw InvalidInput(fmt::format("quantize: last dimension of {} is not a multiple of {}", w.describe(), group));
  const int per_word = 32 / bits;
  const int64_t words = K / per_word, groups = K / group;
  const uint32_t qmax = (1u << bits) - 1;

  Shape ps = w.shape(), ss = w.shape();
  ps.back() = words;
  ss.back() = groups;
  QuantizedTensor out;
  out.bits = bits;
  out.group_size = group;
  out.packed = Tensor::empty(ps, DType::U32);
  out.scales = Tensor::empty(ss, DType::BF16);
  out.biases = Tensor::empty(ss, DType::BF16);
  uint32_t* P = out.packed.data<uint32_t>();
  uint16_t* S = out.scales.data<uint16_t>();
  uint16_t* B = out.biases.data<uint16_t>();
  const auto* base = static_cast<const uint8_t*>(w.raw());
  const size_t esz = dtype_size(w.dtype());
  const int64_t kstride = w.stride(-1);
  std::vector<float> row(static_cast<size_t>(K));
  std::vector<uint32_t> qs(static_cast<size_t>(group));

  for_each_row(w, [&](int64_t r, int64_t off) {
    float* xr = row.data();
    const uint8_t* src = base + static_cast<size_t>(off) * esz;
    if (kstride == 1 && w.dtype() == DType::BF16) {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      for (int64_t k = 0; k < K; ++k) xr[k] = bf16_to_f32(h[k]);
    } else if (kstride == 1 && w.dtype() == DType::F32) {
      std::memcpy(xr, src, static_cast<size_t>(K) * 4);
    } else {
      for (int64_t k = 0; k < K; ++k) xr[k] = load_elem(src + static_cast<size_t>(k * kstride) * esz, w.dtype());
    }
    uint32_t bad = 0;  // any infinity or NaN (all exponent bits set)
    for (int64_t k = 0; k < K; ++k) {
      uint32_t u;
      std::memcpy(&u, xr + k, 4);
      bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
    }
    if (bad)
      for (int64_t k = 0; k < K; ++k)
        if (!std::isfinite(xr[k]))
          throw InvalidInput(fmt::format("quantize: non-finite value {} at row {} column {}", xr[k], r, k));
    uint32_t* prow = P + r * words;
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = xr + g * group;
      // The first smallest and the last largest value, as std::minmax_element picks them (the sign of a zero
      // bias is stored).
      float mn = x[0], mx = x[0];
      for (int i = 1; i < group; ++i) {
        if (x[i] < mn) mn = x[i];
        if (!(x[i] < mx)) mx = x[i];
      }
      // bias: bf16 at or below the minimum; scale: bf16 at or above (max - bias) / qmax, so every value maps into
      // [0, qmax] before rounding and the only error is the rounding of q.
      float b = bf16_down(mn);
      double span = static_cast<double>(mx) - static_cast<double>(b);
      float s = span > 0 ? bf16_up(static_cast<float>(span / qmax)) : 0.0f;
      if (s > 0 && static_cast<double>(s) * qmax < span) s = bf16_up(std::nextafter(s, INFINITY));
      S[r * groups + g] = f32_to_bf16(s);
      B[r * groups + g] = f32_to_bf16(b);
      if (s > 0) {
        // q = nearbyint((x - b) / s), clamped to [0, qmax]. x - b >= 0, so adding and subtracting 2^52 rounds to
        // the nearest integer, ties to even, exactly as nearbyint does in the default rounding mode.
        const double bd = b, sd = s, top = qmax;
        for (int i = 0; i < group; ++i) {
          double qd = (static_cast<double>(x[i]) - bd) / sd;
          double rq = (qd + 0x1p52) - 0x1p52;
          qs[static_cast<size_t>(i)] = static_cast<uint32_t>(rq < top ? rq : top);
        }
      } else {
        std::fill(qs.begin(), qs.end(), 0u);
      }
      uint32_t* pw = prow + g * (group / per_word);
      for (int j = 0; j < group / per_word; ++j) {
        uint32_t word = 0;
        for (int i = 0; i < per_word; ++i) word |= qs[static_cast<size_t>(j * per_word + i)] << (i * bits);
        pw[j] = word;
      }
    }
  });
  return out;
}

Tensor dequantize(const Tensor& packed, const Tensor& scales, const Tensor& biases, int bits, int group) {
  VATIC_CHECK(packed.dtype() == DType::U32 && packed.is_contiguous(), "dequantize: packed must be contiguous U32");
  VATIC_CHECK(scales.dtype() == DType::BF16 && biases.dtype() == DType::BF16 && scales.is_contiguous() &&
                  biases.is_contiguous(),
              "dequantize: scales and biases must be contiguous BF16");
  VATIC_CHECK(bits == 8 || bits == 4, "dequantize: unsupported bit width {}", bits);
  const int per_word = 32 / bits;
  Shape ls = packed.shape();
  const int64_t words = ls.back();
  const int64_t K = words * per_word;
  ls.back() = K;
  VATIC_CHECK(K % group == 0, "dequantize: K={} is not a multiple of the group size {}", K, group);
  Shape ss = ls;
  ss.back() = K / group;
  VATIC_CHECK(scales.shape() == ss && biases.shape() == ss, "dequantize: scales {} / biases {} do not match {}",
              scales.describe(), biases.describe(), shape_str(ss));
  Tensor out = Tensor::empty(ls, DType::F32);
  float* O = out.data<float>();
  const uint32_t* P = packed.data<uint32_t>();
  const uint16_t* S = scales.data<uint16_t>();
  const uint16_t* B = biases.data<uint16_t>();
  const uint32_t mask = (1u << bits) - 1;
  const int64_t rows = packed.numel() / words, groups = K / group;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k) {
      uint32_t q = (P[r * words + k / per_word] >> ((k % per_word) * bits)) & mask;
      int64_t g = r * groups + k / group;
      O[r * K + k] = bf16_to_f32(S[g]) * static_cast<float>(q) + bf16_to_f32(B[g]);
    }
  return out;
}

Tensor dequantize(const QuantizedTensor& q) { return dequantize(q.packed, q.scales, q.biases, q.bits, q.group_size); }

std::optional<TensorQuant> tensor_quant_from_metadata(const std::map<std::string, std::string>& metadata,
                                                      const std::string& tensor) {
  auto parse_type = [&](const std::string& t) {
    QuantType qt = QuantType::None;
    try {
      qt = parse_quant_type(t);
    } catch (const InvalidInput&) {
    }
    if (qt == QuantType::None)
      throw InvalidInput(fmt::format("quantization metadata of {}: unknown type \"{}\"", tensor, t));
    return qt;
  };
  auto parse_group = [&](const std::string& g) {
    int n = 0;
    try {
      n = std::stoi(g);
    } catch (...) {
    }
    if (!valid_group_size(n))
      throw InvalidInput(fmt::format("quantization metadata of {}: bad group size \"{}\"", tensor, g));
    return n;
  };
  if (auto it = metadata.find(tensor); it != metadata.end()) {
    size_t colon = it->second.find(':');
    if (colon == std::string::npos)
      throw InvalidInput(fmt::format("quantization metadata of {}: expected TYPE:GROUP, got \"{}\"", tensor,
                                     it->second));
    return TensorQuant{parse_type(it->second.substr(0, colon)), parse_group(it->second.substr(colon + 1))};
  }
  auto t = metadata.find("quantization"), g = metadata.find("group_size");
  if (t != metadata.end() && g != metadata.end()) return TensorQuant{parse_type(t->second), parse_group(g->second)};
  return std::nullopt;
}

}  // namespace vatic
