// vatic create: import a Hugging Face directory (or an existing model) into the store, quantizing as asked.
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>

#include "chat/format.h"
#include "chat/renderer.h"
#include "models/registry.h"
#include "formats/safetensors.h"
#include "quant/policy.h"
#include "quant/quantize.h"
#include "store/blobs.h"
#include "store/import_pipeline.h"
#include "store/store.h"
#include "util/error.h"
#include "util/files.h"

namespace vatic {
namespace fs = std::filesystem;
using namespace store_detail;

namespace {

// One model to import: a directory, or the target or draft part of a stored model.
struct ModelInput {
  std::string label;  // "FROM /path", "DRAFT name:tag", for messages
  std::string config_bytes;
  json config;
  std::string arch;                    // architectures[0]
  const ModelFamily* family = nullptr;  // from the registry: everything family-specific comes from it
  std::map<std::string, std::string> extras;  // layer kind -> bytes (tokenizer, generation_config, ...)
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  std::map<std::string, size_t> where;  // tensor -> index in files
  // Inherited from a stored model (FROM name).
  bool from_store = false;
  json params = json::object();
  std::string system, template_text, renderer, parser;
  std::vector<std::string> licenses;
  json messages = json::array();

  Tensor get(const std::string& n) const { return files[where.at(n)]->get(n); }
  bool has(const std::string& n) const { return where.count(n) != 0; }
  const std::map<std::string, std::string>& metadata_of(const std::string& n) const {
    return files[where.at(n)]->metadata();
  }
};

json parse_json_text(const std::string& text, const std::string& what) {
  return parse_json(text, what);
}

ModelInput load_directory(const fs::path& dir, const std::string& role) {
  ModelInput in;
  in.label = role + " " + dir.string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InvalidInput(fmt::format("{}: no such directory (expected a Hugging Face model directory)", in.label));
  if (!fs::is_regular_file(dir / "config.json", ec))
    throw InvalidInput(fmt::format("{}: config.json is missing (expected a Hugging Face model directory with "
                                   "config.json and model.safetensors)",
                                   in.label));
  in.config_bytes = read_file(dir / "config.json");
  in.config = parse_json_text(in.config_bytes, (dir / "config.json").string());
  try {
    in.family = &family_of(in.config, (dir / "config.json").string());
    in.arch = config_architecture(in.config, (dir / "config.json").string());
  } catch (const InvalidInput& e) {
    throw InvalidInput(fmt::format("{}: {}", in.label, e.what()));
  }
  std::unique_ptr<TensorStore> ts;
  try {
    ts = std::make_unique<TensorStore>(dir);
  } catch (const NotFound& e) {
    throw InvalidInput(fmt::format("{}: {}", in.label, e.what()));
  }
  std::map<fs::path, size_t> index;
  for (const auto& f : ts->files()) {
    index[f] = in.files.size();
    in.files.push_back(std::make_shared<SafetensorsFile>(f));
  }
  for (const auto& n : ts->names()) in.where[n] = index.at(ts->file_of(n));
  auto extra = [&](const char* file, const char* kind) {
    if (!fs::is_regular_file(dir / file, ec)) return;
    in.extras[kind] = read_file(dir / file);
    // JSON side files are stored as they are, so a broken one would only fail later, at load time.
    if (std::string_view(file).ends_with(".json")) parse_json_text(in.extras[kind], in.label + ": " + file);
  };
  extra("tokenizer.json", media::kTokenizer);
  extra("tokenizer_config.json", media::kTokenizerConfig);
  extra("generation_config.json", media::kGenerationConfig);
  extra("chat_template.jinja", media::kChatTemplate);
  if (!in.extras.count(media::kChatTemplate) && in.extras.count(media::kTokenizerConfig)) {
    json tc = parse_json_text(in.extras[media::kTokenizerConfig], (dir / "tokenizer_config.json").string());
    if (tc.contains("chat_template") && tc["chat_template"].is_string())
      in.extras[media::kChatTemplate] = tc["chat_template"].get<std::string>();
  }
  return in;
}

ModelInput load_stored(const ModelStore& store, const std::string& name, bool draft_part, const std::string& role) {
  Manifest m = store.manifest(name);  // NotFound
  ModelInput in;
  in.label = role + " " + ModelName::parse(name).str();
  in.from_store = true;
  bool any = false;
  for (const auto& l : m.layers) {
    if (l.is_draft() != draft_part) continue;
    any = true;
    fs::path p = store.blob_path(l.digest);
    const std::string k = l.kind();
    if (k == media::kTensor) {
      auto f = std::make_shared<SafetensorsFile>(p);
      for (const auto& n : f->names()) in.where[n] = in.files.size();
      in.files.push_back(f);
    } else if (k == media::kModelConfig) {
      in.config_bytes = read_file(p);
    } else if (k == media::kParams) {
      in.params = parse_json_text(read_file(p), p.string());
    } else if (k == media::kSystem) {
      in.system = read_file(p);
    } else if (k == media::kTemplate) {
      in.template_text = read_file(p);
    } else if (k == media::kLicense) {
      in.licenses.push_back(read_file(p));
    } else if (k == media::kMessages) {
      in.messages = parse_json_text(read_file(p), p.string());
    } else {
      in.extras[k] = read_file(p);
    }
  }
  if (!any && draft_part) throw InvalidInput(fmt::format("{}: that model has no draft model", in.label));
  if (in.config_bytes.empty()) throw InvalidInput(fmt::format("{}: the stored model has no config", in.label));
  in.config = parse_json_text(in.config_bytes, in.label + " config");
  in.family = &family_of(in.config, in.label);
  in.arch = config_architecture(in.config, in.label);
  json cfg = parse_json_text(read_file(store.blob_path(m.config.digest)), in.label + " config blob");
  if (!draft_part) {
    in.renderer = cfg.value("renderer", "");
    in.parser = cfg.value("parser", "");
  }
  return in;
}

// ---------------------------------------------------------------------------------------------------------------
// Pre-quantized tensors (MLX layout / our own blobs) and logical shapes

struct PreQuant {
  std::string weight, scales, biases;
  TensorQuant q;
};

// Finds quantized weights (U32 + .scales): their names and parameters.
std::map<std::string, PreQuant> find_prequantized(const ModelInput& in) {
  std::map<std::string, PreQuant> out;
  for (const auto& [name, idx] : in.where) {
    if (!name.ends_with(".scales")) continue;
    std::string base = name.substr(0, name.size() - 7);
    std::string w = in.has(base + ".weight") ? base + ".weight" : base;
    if (!in.has(w) || in.files[in.where.at(w)]->entry(w).dtype != DType::U32) continue;
    PreQuant p{w, name, base + ".biases", {}};
    if (!in.has(p.biases))
      throw InvalidInput(fmt::format("{}: quantized tensor {} has scales but no {} (only affine quantization is "
                                     "supported)",
                                     in.label, w, p.biases));
    auto q = tensor_quant_from_metadata(in.metadata_of(w), w);
    if (!q) {
      const json* qc = nullptr;
      for (const char* key : {"quantization", "quantization_config"})
        if (in.config.contains(key) && in.config[key].is_object()) qc = &in.config[key];
      if (qc && qc->contains("bits") && qc->contains("group_size")) {
        int bits = (*qc)["bits"].get<int>();
        q = TensorQuant{bits == 8 ? QuantType::Int8 : bits == 4 ? QuantType::Int4 : QuantType::None,
                        (*qc)["group_size"].get<int>()};
      }
      if (!q || q->type == QuantType::None || !valid_group_size(q->group_size))
        throw InvalidInput(fmt::format("{}: cannot tell the bit width and group size of quantized tensor {}",
                                       in.label, w));
    }
    p.q = *q;
    out[w] = p;
  }
  return out;
}

std::optional<Shape> logical_shape(const ModelInput& in, const std::map<std::string, PreQuant>& pq,
                                   const std::string& name) {
  if (!in.has(name)) return std::nullopt;
  Shape s = in.files[in.where.at(name)]->entry(name).shape;
  if (auto it = pq.find(name); it != pq.end() && !s.empty()) s.back() = s.back() * 32 / quant_bits(it->second.q.type);
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Expected tensors, from the config classes

std::vector<ExpectedTensor> expected_tensors(const ModelInput& in) {
  return in.family->expected_tensors(in.config, in.label + " config.json",
                                     [&in](const std::string& n) { return in.has(n); });
}

void validate_tensors(const ModelInput& in, const std::map<std::string, PreQuant>& pq) {
  std::vector<std::string> problems;
  for (const auto& x : expected_tensors(in)) {
    auto s = logical_shape(in, pq, x.name);
    if (!s) {
      if (!x.optional) problems.push_back(fmt::format("tensor {} is missing", x.name));
    } else if (*s != x.shape) {
      problems.push_back(fmt::format("tensor {} has shape {} but config.json implies {}", x.name, shape_str(*s),
                                     shape_str(x.shape)));
    }
  }
  if (problems.empty()) return;
  std::string msg = fmt::format("{}: {} tensor{} missing or mis-shaped:", in.label, problems.size(),
                                problems.size() == 1 ? "" : "s");
  for (size_t i = 0; i < problems.size() && i < 10; ++i) msg += "\n  " + problems[i];
  if (problems.size() > 10) msg += fmt::format("\n  ... and {} more", problems.size() - 10);
  throw InvalidInput(msg);
}

// The "model" part of a tokenizer.json (vocabulary, merges) and its added tokens: what must agree for a draft
// model's tokens to mean the target's.
json tokenizer_identity(const ModelInput& in) {
  auto it = in.extras.find(media::kTokenizer);
  if (it == in.extras.end()) return nullptr;
  json t = parse_json_text(it->second, in.label + " tokenizer.json");
  json id = json::object();
  for (const char* k : {"model", "added_tokens"})
    if (t.is_object() && t.contains(k)) id[k] = t[k];
  return id;
}

void validate_draft_fit(const ModelInput& target, const ModelInput& draft) {
  if (draft.family->drafter_only(draft.config)) {
    draft.family->check_drafter_fit(target.config, target.label, draft.config, draft.label);
    return;
  }
  // A model of its own drafting with its own cache: it must speak the target's tokens.
  ConfigSummary t = target.family->summary(target.config, target.label);
  ConfigSummary d = draft.family->summary(draft.config, draft.label);
  if (d.vocab_size != t.vocab_size)
    throw InvalidInput(fmt::format("{} cannot draft for {}: its vocabulary has {} tokens, the target's {} (a draft "
                                   "model needs the target's tokenizer)",
                                   draft.label, target.label, d.vocab_size, t.vocab_size));
  json ti = tokenizer_identity(target), di = tokenizer_identity(draft);
  if (ti.is_null() || di.is_null())
    throw InvalidInput(fmt::format("{} cannot draft for {}: {} has no tokenizer.json to compare (a draft model needs "
                                   "the target's tokenizer)",
                                   draft.label, target.label, ti.is_null() ? target.label : draft.label));
  if (ti != di)
    throw InvalidInput(fmt::format("{} cannot draft for {}: their tokenizers differ (a draft model needs the "
                                   "target's tokenizer: the same vocabulary, merges and special tokens)",
                                   draft.label, target.label));
}

// ---------------------------------------------------------------------------------------------------------------
// Plan: the tensor groups (one blob each)

struct Group {
  std::string name;
  uint64_t source_bytes = 0;
  int64_t params = 0;
  QuantType type = QuantType::None;
  std::string status;
  std::function<void(std::vector<NamedTensor>&, std::map<std::string, std::string>&)> build;
};

struct Plan {
  std::vector<Group> groups;
  int64_t params = 0;
  uint64_t bytes = 0;
  std::set<QuantType> types;
  int group_size = 0;
};

uint64_t entry_bytes(const ModelInput& in, const std::string& n) {
  const auto& e = in.files[in.where.at(n)]->entry(n);
  return e.end - e.begin;
}

void add_quant_metadata(std::map<std::string, std::string>& md, const std::string& tensor, QuantType t, int g) {
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

Plan make_plan(const ModelInput& in, QuantType requested, int group_size, bool is_draft) {
  Plan plan;
  plan.group_size = group_size;
  auto pq = find_prequantized(in);
  bool any4 = std::any_of(pq.begin(), pq.end(), [](const auto& kv) { return kv.second.q.type == QuantType::Int4; });
  if (!pq.empty() && requested != QuantType::None)
    throw InvalidInput(fmt::format("{} is already quantized ({}); it cannot be quantized again: leave out {}",
                                   in.label, any4 ? "int4" : "int8",
                                   is_draft ? "--draft-quantize" : "--quantize"));
  validate_tensors(in, pq);

  const QuantPolicyContext ctx = in.family->quant_context(in.config, in.label, is_draft);

  std::set<std::string> consumed;
  for (const auto& [w, p] : pq) {
    consumed.insert(w);
    consumed.insert(p.scales);
    consumed.insert(p.biases);
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
    plan.types.insert(p.q.type);
    plan.groups.push_back(std::move(g));
  }

  // One blob for a (possibly stacked) weight, quantized per the policy.
  auto add_weight = [&](const std::string& name, Shape shape, DType dtype, uint64_t bytes,
                        std::function<Tensor()> source) {
    QuantDecision d = decide_quantization(name, shape, requested, group_size, ctx);
    if (d.type != QuantType::None && dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16)
      d.type = QuantType::None;  // integer / fp8 tensors are copied as they are
    Group g;
    g.name = name;
    g.type = d.type;
    g.source_bytes = bytes;
    g.params = shape_numel(shape);
    g.status = d.type == QuantType::None ? "importing " + name
                                         : fmt::format("quantizing {} to {}", name, quant_type_name(d.type));
    g.build = [name, d, source, label = in.label](std::vector<NamedTensor>& out,
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
    if (d.type != QuantType::None) plan.types.insert(d.type);
    plan.groups.push_back(std::move(g));
  };

  // Per-expert weights are stacked per projection when quantizing (families say whether theirs are).
  if (requested != QuantType::None && in.family->stacks_experts_when_quantizing()) {
    static const std::regex expert_re(R"((.*\.experts)\.(\d+)\.([A-Za-z0-9_]+)\.weight)");
    std::map<std::string, std::map<int, std::string>> stacks;  // stacked name -> expert -> source name
    for (const auto& [name, idx] : in.where) {
      std::smatch m;
      if (consumed.count(name) || !std::regex_match(name, m, expert_re)) continue;
      stacks[m[1].str() + "." + m[3].str() + ".weight"][std::stoi(m[2].str())] = name;
    }
    for (const auto& [stacked, experts] : stacks) {
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
          throw InvalidInput(fmt::format("{}: experts of {} differ in shape or dtype ({} is {} {})", in.label, stacked,
                                         n, dtype_name(e.dtype), shape_str(e.shape)));
        bytes += e.end - e.begin;
        consumed.insert(n);
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
  }

  for (const auto& [name, idx] : in.where) {
    if (consumed.count(name)) continue;
    const auto& e = in.files[idx]->entry(name);
    add_weight(name, e.shape, e.dtype, e.end - e.begin, [&in, name]() { return in.get(name); });
  }
  std::sort(plan.groups.begin(), plan.groups.end(), [](const Group& a, const Group& b) { return a.name < b.name; });
  for (const auto& g : plan.groups) {
    plan.params += g.params;
    plan.bytes += g.source_bytes;
  }
  return plan;
}

// Serializes a tensor group as safetensors (deterministically: metadata first, tensors in name order) and stores
// it as a blob.
BlobRef write_tensor_blob(const fs::path& root, std::vector<NamedTensor> tensors,
                          const std::map<std::string, std::string>& md) {
  std::sort(tensors.begin(), tensors.end(), [](const NamedTensor& a, const NamedTensor& b) { return a.first < b.first; });
  ordered_json header = ordered_json::object();
  if (!md.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : md) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  uint64_t off = 0;
  std::vector<Tensor> keep;
  for (auto& [name, t] : tensors) {
    if (!t.is_contiguous()) fail("tensor {} is not contiguous", name);
    ordered_json e = ordered_json::object();
    e["dtype"] = dtype_name(t.dtype());
    e["shape"] = t.shape();
    e["data_offsets"] = {off, off + t.nbytes()};
    off += t.nbytes();
    header[name] = std::move(e);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
  std::vector<Chunk> chunks{{len, 8}, {h.data(), h.size()}};
  for (const auto& [name, t] : tensors) chunks.push_back({t.raw(), t.nbytes()});
  return write_blob(root, chunks);
}

std::string dtype_label(const json& config) {
  for (const json* c : {&config, config.contains("text_config") ? &config["text_config"] : nullptr}) {
    if (!c || !c->is_object()) continue;
    for (const char* k : {"dtype", "torch_dtype"})
      if (c->contains(k) && (*c)[k].is_string()) return (*c)[k].get<std::string>();
  }
  return "bfloat16";
}

std::string quant_label(const Plan& p, const json& config) {
  if (p.types.count(QuantType::Int4)) return "int4";
  if (p.types.count(QuantType::Int8)) return "int8";
  return dtype_label(config);
}

// The family's chat format, unless the checkpoint's own chat template is one vatic has no renderer for.
std::pair<std::string, std::string> default_chat_names(const ModelInput& in, const ChatDefaults& d) {
  auto tmpl = in.extras.find(media::kChatTemplate);
  if (tmpl != in.extras.end() && !chat::template_matches_renderer(d.renderer, tmpl->second)) {
    std::string names;
    for (const auto& n : chat::renderer_names()) names += (names.empty() ? "" : ", ") + n;
    throw InvalidInput(fmt::format("{}: its chat template is not one vatic has a renderer for (renderers: {}); add "
                                   "RENDERER and PARSER lines to the Modelfile naming the format it follows, or "
                                   "RENDERER raw to serve prompts as they are",
                                   in.label, names));
  }
  return {d.renderer, d.parser};
}

}  // namespace

ModelInfo ModelStore::create(const std::string& name, const Modelfile& mf, const CreateOptions& opt) {
  const ModelName target_name = ModelName::parse(name);
  const QuantType qt = parse_quant_type(opt.quantize, "--quantize");
  const QuantType dqt = parse_quant_type(opt.draft_quantize, "--draft-quantize");
  if (dqt != QuantType::None && mf.draft.empty())
    throw InvalidInput("--draft-quantize requires a DRAFT model in the Modelfile");
  if (!valid_group_size(opt.group_size))
    throw InvalidInput(fmt::format("unsupported quantization group size {}: use 64 or 32", opt.group_size));
  if (mf.from.empty()) throw InvalidInput("the Modelfile has no FROM");
  {
    std::error_code ec;
    fs::path mp = manifest_path(target_name);
    for (fs::path p = mp.parent_path(); p != root_ / "manifests" && p != root_; p = p.parent_path())
      if (fs::exists(p, ec) && !fs::is_directory(p, ec))
        throw InvalidInput(fmt::format("cannot create {}: it conflicts with the model stored at {}",
                                       target_name.str(), p.lexically_relative(root_ / "manifests").string()));
    if (fs::is_directory(mp, ec))
      throw InvalidInput(fmt::format("cannot create {}: a namespace of that name exists", target_name.str()));
  }

  // Inputs and every check come before anything is written.
  ModelInput target = mf.from.is_path() ? load_directory(mf.from.path, "FROM")
                                        : load_stored(*this, mf.from.text, false, "FROM");
  if (target.family->drafter_only(target.config))
    throw InvalidInput(fmt::format("{} is a drafter ({}); use it as DRAFT under its target model", target.label,
                                   target.arch));
  std::optional<ModelInput> draft;
  if (!mf.draft.empty()) {
    if (mf.draft.is_path()) {
      draft = load_directory(mf.draft.path, "DRAFT");
    } else {
      // A stored model with a drafter lends its drafter; one without drafts itself (a small model of the family).
      Manifest dm = manifest(mf.draft.text);
      const bool has_draft =
          std::any_of(dm.layers.begin(), dm.layers.end(), [](const ManifestLayer& l) { return l.is_draft(); });
      draft = load_stored(*this, mf.draft.text, has_draft, "DRAFT");
    }
  } else if (target.from_store) {
    Manifest base = manifest(mf.from.text);
    if (std::any_of(base.layers.begin(), base.layers.end(), [](const ManifestLayer& l) { return l.is_draft(); }))
      draft = load_stored(*this, mf.from.text, true, "draft of " + mf.from.text);
  }
  if (draft) validate_draft_fit(target, *draft);
  Plan tplan = make_plan(target, qt, opt.group_size, false);
  std::optional<Plan> dplan;
  if (draft) dplan = make_plan(*draft, dqt, opt.group_size, true);

  // Modelfile settings over inherited ones.
  json params = target.params.is_object() ? target.params : json::object();
  for (const auto& [k, v] : mf.params.items()) params[k] = v;
  std::string system = !mf.system.empty() ? mf.system : target.system;
  std::string template_text = !mf.template_text.empty() ? mf.template_text : target.template_text;
  std::vector<std::string> licenses = !mf.licenses.empty() ? mf.licenses : target.licenses;
  json messages = json::array();
  if (!mf.messages.empty()) {
    for (const auto& m : mf.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
  } else {
    messages = target.messages;
  }
  const ChatDefaults chat_defaults = target.family->chat_defaults(target.config);
  std::string renderer = !mf.renderer.empty() ? mf.renderer : target.renderer;
  std::string parser = !mf.parser.empty() ? mf.parser : target.parser;
  if (renderer.empty()) {
    auto [def_renderer, def_parser] = default_chat_names(target, chat_defaults);
    renderer = def_renderer;
    if (parser.empty()) parser = def_parser;
  } else if (parser.empty() && renderer != "raw") {
    parser = chat_defaults.parser;
  }

  // Writing.
  const uint64_t total = tplan.bytes + (dplan ? dplan->bytes : 0);
  uint64_t done = 0;
  auto report = [&](const std::string& status) {
    if (opt.progress) opt.progress({status, done, total});
  };
  std::vector<std::string> fresh;
  std::unique_ptr<store_detail::StoreLock> lock = std::make_unique<store_detail::StoreLock>(root_, false);
  remove_stale_temps(root_ / "blobs");
  remove_stale_temps(root_ / "manifests");
  Manifest m;
  try {
    auto add = [&](const std::string& kind, bool is_draft, const std::string& lname, const BlobRef& b) {
      if (b.fresh) fresh.push_back(b.digest);
      m.layers.push_back({std::string(is_draft ? media::kDraftPrefix : media::kPrefix) + kind, b.digest, b.size, lname});
    };
    auto add_text = [&](const std::string& kind, bool is_draft, const std::string& lname, const std::string& bytes) {
      add(kind, is_draft, lname, write_blob(root_, bytes));
    };
    auto add_model = [&](const ModelInput& in, const Plan& plan, bool is_draft) {
      add_text(media::kModelConfig, is_draft, "config.json", in.config_bytes);
      static const std::vector<std::pair<const char*, const char*>> extras = {
          {media::kTokenizer, "tokenizer.json"},
          {media::kTokenizerConfig, "tokenizer_config.json"},
          {media::kGenerationConfig, "generation_config.json"},
          {media::kChatTemplate, "chat_template.jinja"}};
      for (const auto& [kind, file] : extras)
        if (auto it = in.extras.find(kind); it != in.extras.end()) add_text(kind, is_draft, file, it->second);
      // Tensor blobs on parallel workers (see import_pipeline.h); the manifest lists them in plan order.
      std::vector<std::optional<BlobRef>> refs(plan.groups.size());
      std::vector<uint64_t> weights;
      for (const auto& g : plan.groups) weights.push_back(g.source_bytes);
      std::mutex mu;
      try {
        run_parallel(weights, import_threads(), [&](size_t i) {
          const Group& g = plan.groups[i];
          {
            std::lock_guard<std::mutex> l(mu);
            report(g.status);
          }
          std::vector<NamedTensor> tensors;
          std::map<std::string, std::string> md;
          g.build(tensors, md);
          BlobRef b = write_tensor_blob(root_, std::move(tensors), md);
          std::lock_guard<std::mutex> l(mu);
          refs[i] = std::move(b);
          done += g.source_bytes;
          report(g.status);
        });
      } catch (...) {
        for (const auto& r : refs)
          if (r && r->fresh) fresh.push_back(r->digest);
        throw;
      }
      for (size_t i = 0; i < plan.groups.size(); ++i) add(media::kTensor, is_draft, plan.groups[i].name, *refs[i]);
    };
    add_model(target, tplan, false);
    if (!params.empty()) add_text(media::kParams, false, "params", params.dump());
    if (!template_text.empty()) add_text(media::kTemplate, false, "template", template_text);
    if (!system.empty()) add_text(media::kSystem, false, "system", system);
    for (const auto& l : licenses) add_text(media::kLicense, false, "license", l);
    if (!messages.empty()) add_text(media::kMessages, false, "messages", messages.dump());
    if (draft) add_model(*draft, *dplan, true);

    // The config blob: what show / list print without opening tensors.
    json cfg = json::object();
    cfg["model_format"] = "safetensors";
    cfg["architecture"] = target.arch;
    cfg["quantization"] = quant_label(tplan, target.config);
    if (!tplan.types.empty()) cfg["group_size"] = opt.group_size;
    cfg["parameter_count"] = tplan.params;
    {
      ConfigSummary c = target.family->summary(target.config, target.label);
      cfg["context_length"] = c.context_length;
      cfg["embedding_length"] = c.hidden_size;
      cfg["kv_bytes_per_token"] = c.kv_bytes_per_token;
    }
    std::vector<std::string> caps{"completion"};
    const chat::ParserCapabilities pc = chat::parser_capabilities(parser);
    if (pc.tools) caps.push_back("tools");
    if (pc.thinking) caps.push_back("thinking");
    cfg["capabilities"] = caps;
    cfg["renderer"] = renderer;
    cfg["parser"] = parser;
    if (draft) {
      cfg["draft"] = {{"architecture", draft->arch},
                      {"parameter_count", dplan->params},
                      {"quantization", quant_label(*dplan, draft->config)},
                      {"config", "draft config.json layer"}};
    }
    BlobRef cb = write_blob(root_, cfg.dump());
    if (cb.fresh) fresh.push_back(cb.digest);
    m.config = {media::kConfig, cb.digest, cb.size, ""};

    report("writing manifest");
    if (opt.before_manifest) opt.before_manifest();
    std::error_code ec;
    for (const auto& l : m.layers)
      if (!fs::is_regular_file(blob_path(l.digest), ec))
        fail("blob {} of layer {} vanished before the manifest was written", l.digest, l.name);
    write_atomic(manifest_path(target_name), m.to_json().dump());
  } catch (...) {
    // Roll back: remove the blobs this create wrote that no manifest uses. Waiting for the exclusive lock lets
    // concurrent creates (which may have found these blobs and be about to reference them) finish first.
    lock.reset();
    try {
      store_detail::StoreLock ex(root_, true);
      std::set<std::string> used;
      std::error_code ec;
      fs::path mdir = root_ / "manifests";
      if (fs::is_directory(mdir, ec))
        for (auto it = fs::recursive_directory_iterator(mdir, ec); !ec && it != fs::recursive_directory_iterator();
             it.increment(ec)) {
          if (!it->is_regular_file(ec) || is_temp_name(it->path().filename().string())) continue;
          Manifest other = Manifest::from_json(json::parse(read_file(it->path())));
          used.insert(other.config.digest);
          for (const auto& l : other.layers) used.insert(l.digest);
        }
      for (const auto& d : fresh)
        if (!used.count(d)) fs::remove(blob_path(d), ec);
    } catch (...) {
      // best effort: garbage_collect() removes what is left
    }
    throw;
  }
  done = total;
  report("success");
  lock.reset();
  return show(target_name.str());
}

}  // namespace vatic
