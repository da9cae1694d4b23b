#include "quant/format.h"

#include <map>

namespace vatic {

static QuantSpec parse_spec(const std::string& text, const std::string& group, const std::string& where) {
  QuantSpec q;
  std::string type = text, g = group;
  if (auto c = text.find(':'); c != std::string::npos) {
    type = text.substr(0, c);
    g = text.substr(c + 1);
  }
  if (type == "int8" || type == "q8") q.bits = 8;
  else if (type == "int4" || type == "q4") q.bits = 4;
  else throw InvalidInput(fmt::format("{}: unknown quantization \"{}\" (supported: int8, int4)", where, type));
  try {
    q.group_size = g.empty() ? 64 : std::stoi(g);
  } catch (const std::exception&) {
    throw InvalidInput(fmt::format("{}: invalid group size \"{}\"", where, g));
  }
  if (q.group_size != 32 && q.group_size != 64 && q.group_size != 128)
    throw InvalidInput(fmt::format("{}: unsupported group size {}", where, q.group_size));
  return q;
}

QuantSpec quant_spec_of(const TensorStore& ts, const std::string& name) {
  const auto& file = ts.file_of(name);
  const std::map<std::string, std::string>& meta = ts.metadata_of(name);
  const std::string where = file.string() + " (" + name + ")";
  if (auto it = meta.find(name); it != meta.end()) return parse_spec(it->second, "", where);
  auto q = meta.find("quantization");
  if (q == meta.end()) throw InvalidInput(fmt::format("{}: quantized tensor without quantization metadata", where));
  auto g = meta.find("group_size");
  return parse_spec(q->second, g == meta.end() ? "" : g->second, where);
}

}  // namespace vatic
