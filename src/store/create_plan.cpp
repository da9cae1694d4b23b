// The plan of `vatic create`: tensor groups, pre-quantized copies, per-expert stacking, the quantization
// policy.
#include "store/create_plan.h"

#include <algorithm>
#include <cstring>
#include <regex>

#include "quant/policy.h"
#include "util/error.h"

namespace vatic::store_detail {

namespace {

uint64_t entry_bytes(const ModelInput& in, const std::string& n) {
  const auto& e = in.files[in.where.at(n)]->entry(n);
  return e.end - e.begin;
}

void add_quant_metadata(std::map<std::string, std::string>& md, const std::string& tensor, QuantType t,
                        int g) {
  md[tensor] = fmt::format("{}:{}", quant_type_name(t), g);
  auto it = md.find("quantization");
  if (it == md.end()) {
    md["quantization"] = quant_type_name(t);
    md["group_size"] = std::to_string(g);
  } else if (it->second != quant_type_name(t) || md["group_size"] != std::to_string(g)) {
    // mixed file: the per-tensor keys are authoritative; drop the file-wide pair
    md.erase("quantization");
    md.erase("group_size");
  }
}

// Adds the groups of one model to a plan; `consumed` holds the tensors already in a group.
class PlanBuilder {
 public:
  PlanBuilder(const ModelInput& in, QuantType requested, int group_size, QuantPolicyContext ctx)
      : in_(in), requested_(requested), group_size_(group_size), ctx_(std::move(ctx)) {
    plan_.group_size = group_size;
  }

  // Quantized weights are copied as they are, with their scales and biases.
  void add_prequantized(const std::map<std::string, PreQuant>& pq) {
    const ModelInput& in = in_;
    for (const auto& [w, p] : pq) {
      consumed_.insert(w);
      consumed_.insert(p.scales);
      consumed_.insert(p.biases);
      Group g;
      g.name = w;
      g.type = p.q.type;
      g.status = "copying " + w;
      g.source_bytes = entry_bytes(in, w) + entry_bytes(in, p.scales) + entry_bytes(in, p.biases);
      g.params = shape_numel(*logical_shape(in, pq, w));
      g.build = [&in, p](std::vector<NamedTensor>& out, std::map<std::string, std::string>& md) {
        out.push_back({p.weight, in.get(p.weight)});
        out.push_back({p.scales, in.get(p.scales)});
        out.push_back({p.biases, in.get(p.biases)});
        add_quant_metadata(md, p.weight, p.q.type, p.q.group_size);
      };
      plan_.types.insert(p.q.type);
      plan_.groups.push_back(std::move(g));
    }
  }

  // Per-expert weights stacked per projection (`E.experts.N.P.weight` -> `E.experts.P.weight`, [experts,
  // ...]).
  void add_expert_stacks() {
    static const std::regex expert_re(R"((.*\.experts)\.(\d+)\.([A-Za-z0-9_]+)\.weight)");
    std::map<std::string, std::map<int, std::string>> stacks;  // stacked name -> expert -> source name
    for (const auto& [name, idx] : in_.where) {
      std::smatch m;
      if (consumed_.count(name) || !std::regex_match(name, m, expert_re)) continue;
      stacks[m[1].str() + "." + m[3].str() + ".weight"][std::stoi(m[2].str())] = name;
    }
    for (const auto& [stacked, experts] : stacks) add_stack(stacked, experts);
  }

  // Every tensor not in a group yet, one group each.
  void add_remaining() {
    const ModelInput& in = in_;
    for (const auto& [name, idx] : in.where) {
      if (consumed_.count(name)) continue;
      const auto& e = in.files[idx]->entry(name);
      add_weight(name, e.shape, e.dtype, e.end - e.begin, [&in, name]() { return in.get(name); });
    }
  }

  Plan finish() {
    std::sort(plan_.groups.begin(), plan_.groups.end(),
              [](const Group& a, const Group& b) { return a.name < b.name; });
    for (const auto& g : plan_.groups) {
      plan_.params += g.params;
      plan_.bytes += g.source_bytes;
    }
    return std::move(plan_);
  }

 private:
  // One blob for a (possibly stacked) weight, quantized per the policy.
  void add_weight(const std::string& name, Shape shape, DType dtype, uint64_t bytes,
                  std::function<Tensor()> source) {
    QuantDecision d = decide_quantization(name, shape, requested_, group_size_, ctx_);
    if (d.type != QuantType::None && dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16)
      d.type = QuantType::None;  // integer / fp8 tensors are copied as they are
    Group g;
    g.name = name;
    g.type = d.type;
    g.source_bytes = bytes;
    g.params = shape_numel(shape);
    g.status = d.type == QuantType::None ? "importing " + name
                                         : fmt::format("quantizing {} to {}", name, quant_type_name(d.type));
    g.build = [name, d, source, label = in_.label](std::vector<NamedTensor>& out,
                                                   std::map<std::string, std::string>& md) {
      Tensor t = source();
      if (d.type == QuantType::None) {
        out.push_back({name, t});
        return;
      }
      QuantizedTensor q;
      try {
        q = quantize(t, quant_bits(d.type), d.group_size);
      } catch (const InvalidInput& e) {
        throw InvalidInput(fmt::format("{}: tensor {}: {}", label, name, e.what()));
      }
      const std::string base = quant_base_name(name);
      out.push_back({name, q.packed});
      out.push_back({base + ".scales", q.scales});
      out.push_back({base + ".biases", q.biases});
      add_quant_metadata(md, name, d.type, d.group_size);
    };
    if (d.type != QuantType::None) plan_.types.insert(d.type);
    plan_.groups.push_back(std::move(g));
  }

  // One stacked weight from its experts' tensors, which must all be there and agree in shape and dtype.
  void add_stack(const std::string& stacked, const std::map<int, std::string>& experts) {
    const ModelInput& in = in_;
    const int E = static_cast<int>(experts.size());
    std::vector<std::string> names;
    for (int x = 0; x < E; ++x) {
      auto it = experts.find(x);
      if (it == experts.end())
        throw InvalidInput(fmt::format("{}: expert {} of {} is missing", in.label, x, stacked));
      names.push_back(it->second);
    }
    const auto& e0 = in.files[in.where.at(names[0])]->entry(names[0]);
    uint64_t bytes = 0;
    for (const auto& n : names) {
      const auto& e = in.files[in.where.at(n)]->entry(n);
      if (e.shape != e0.shape || e.dtype != e0.dtype)
        throw InvalidInput(fmt::format("{}: experts of {} differ in shape or dtype ({} is {} {})", in.label,
                                       stacked, n, dtype_name(e.dtype), shape_str(e.shape)));
      bytes += e.end - e.begin;
      consumed_.insert(n);
    }
    Shape shape = e0.shape;
    shape.insert(shape.begin(), E);
    add_weight(stacked, shape, e0.dtype, bytes, [&in, names, shape, dt = e0.dtype]() {
      Tensor out = Tensor::empty(shape, dt);
      auto* dst = static_cast<uint8_t*>(out.raw());
      for (const auto& n : names) {
        Tensor t = in.get(n);
        std::memcpy(dst, t.raw(), t.nbytes());
        dst += t.nbytes();
      }
      return out;
    });
  }

  const ModelInput& in_;
  const QuantType requested_;
  const int group_size_;
  const QuantPolicyContext ctx_;
  Plan plan_;
  std::set<std::string> consumed_;
};

// A model that is already quantized keeps its precision: asking to quantize it again is an error.
void refuse_requantizing(const ModelInput& in, const std::map<std::string, PreQuant>& pq, QuantType requested,
                         bool is_draft) {
  bool any4 =
      std::any_of(pq.begin(), pq.end(), [](const auto& kv) { return kv.second.q.type == QuantType::Int4; });
  if (!pq.empty() && requested != QuantType::None)
    throw InvalidInput(fmt::format("{} is already quantized ({}); it cannot be quantized again: leave out {}",
                                   in.label, any4 ? "int4" : "int8",
                                   is_draft ? "--draft-quantize" : "--quantize"));
}

}  // namespace

Plan make_plan(const ModelInput& in, QuantType requested, int group_size, bool is_draft) {
  auto pq = find_prequantized(in);
  refuse_requantizing(in, pq, requested, is_draft);
  validate_tensors(in, pq);
  PlanBuilder b(in, requested, group_size, in.family->quant_context(in.config, in.label, is_draft));
  b.add_prequantized(pq);
  // Per-expert weights are stacked per projection when quantizing (families say whether theirs are).
  if (requested != QuantType::None && in.family->stacks_experts_when_quantizing()) b.add_expert_stacks();
  b.add_remaining();
  return b.finish();
}

}  // namespace vatic::store_detail
